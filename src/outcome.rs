//! The outcome of one call: a status from a closed set and the plain data around it.
//!
//! A tool's failure is data, not an error: every status here is a successful answer
//! from the sandbox. Only a host-side failure (the runtime could not be loaded, a grant
//! could not be opened) is an `Err` elsewhere.

use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::limits::Fuel;

/// How a call ended. The set is closed: callers may match on it exhaustively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// The tool returned; `value` holds its result.
    Ok,
    /// The tool raised an exception, or returned something JSON cannot hold; `error`
    /// says which.
    ToolError,
    /// The call could not be made as asked: no such function, arguments that do not
    /// bind to its parameters.
    InvalidRequest,
    /// The wall-clock deadline passed.
    Timeout,
    /// The fuel (CPU) budget ran out.
    OutOfFuel,
    /// The guest tried to grow its memory past the cap.
    MemoryLimit,
    /// The tool wrote more to stdout or stderr than allowed.
    OutputLimit,
    /// The guest stopped abnormally: a trap, `os._exit`, or a malformed response.
    Crashed,
}

impl Status {
    /// Every status, in the order the CLI's exit codes follow.
    pub const ALL: [Status; 8] = [
        Status::Ok,
        Status::ToolError,
        Status::InvalidRequest,
        Status::Timeout,
        Status::OutOfFuel,
        Status::MemoryLimit,
        Status::OutputLimit,
        Status::Crashed,
    ];

    /// The wire name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Ok => "ok",
            Status::ToolError => "tool_error",
            Status::InvalidRequest => "invalid_request",
            Status::Timeout => "timeout",
            Status::OutOfFuel => "out_of_fuel",
            Status::MemoryLimit => "memory_limit",
            Status::OutputLimit => "output_limit",
            Status::Crashed => "crashed",
        }
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An exception raised by the tool (or the reason its result could not be returned).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ToolError {
    /// The exception's class name, e.g. `ValueError`.
    #[serde(rename = "type")]
    pub kind: String,
    /// `str(exception)`.
    pub message: String,
    /// The traceback, starting at the tool's own frames.
    pub traceback: String,
    /// The tool raised `warden.ToolError` (or FastMCP's): `message` is its word to the
    /// caller, shown alone (MCP: `isError` with just the message).
    #[serde(default, skip_serializing_if = "is_false")]
    pub deliberate: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// One part of a rich result, in MCP's shape (`image`, `audio`, `resource`,
/// `resource_link`, `text`). Binary data is base64; every part was checked by the host
/// (type, base64, mime type, size) before it got here.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum ContentPart {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// An image.
    Image {
        /// The image's bytes, base64.
        data: String,
        /// Its type, e.g. `image/png`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A sound.
    Audio {
        /// The sound's bytes, base64.
        data: String,
        /// Its type, e.g. `audio/wav`.
        #[serde(rename = "mimeType")]
        mime_type: String,
    },
    /// A file, embedded.
    Resource {
        /// The file.
        resource: EmbeddedFile,
    },
    /// A link to something the caller can fetch.
    ResourceLink {
        /// Where it is.
        uri: String,
        /// Its name.
        name: String,
        /// What it is.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        description: Option<String>,
        /// Its type.
        #[serde(rename = "mimeType", default, skip_serializing_if = "Option::is_none")]
        mime_type: Option<String>,
    },
}

/// A file embedded in a result: text, or bytes as base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct EmbeddedFile {
    /// Its uri, e.g. `file:///report.csv`.
    pub uri: String,
    /// Its type, e.g. `text/csv`.
    #[serde(rename = "mimeType")]
    pub mime_type: String,
    /// Its text, for a text file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// Its bytes as base64, for any other.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub blob: Option<String>,
}

impl ContentPart {
    /// One line (or the text itself) standing for this part where only text can go.
    pub fn render(&self) -> String {
        // Decoded size from the base64 length; saturating, so that even an unchecked
        // part (say "=") renders instead of overflowing.
        let size = |b64: &str| {
            (b64.len() / 4 * 3).saturating_sub(b64.bytes().rev().take_while(|&b| b == b'=').count())
        };
        match self {
            ContentPart::Text { text } => text.clone(),
            ContentPart::Image { data, mime_type } => {
                format!("[image {mime_type}, {} bytes]", size(data))
            }
            ContentPart::Audio { data, mime_type } => {
                format!("[audio {mime_type}, {} bytes]", size(data))
            }
            ContentPart::Resource { resource } => match (&resource.text, &resource.blob) {
                (Some(text), _) => {
                    format!("[file {} ({})]\n{text}", resource.uri, resource.mime_type)
                }
                (None, blob) => format!(
                    "[file {} ({}), {} bytes]",
                    resource.uri,
                    resource.mime_type,
                    blob.as_deref().map_or(0, size)
                ),
            },
            ContentPart::ResourceLink { uri, name, .. } => format!("[link {name}: {uri}]"),
        }
    }
}

/// Says that the result was cut to `return_char_limit`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Truncation {
    /// Characters of the full serialized result.
    pub original_chars: u64,
    /// Characters kept.
    pub kept_chars: u64,
}

/// Everything known about one call once it has ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct CallResult {
    /// How the call ended.
    pub status: Status,
    /// The tool's return value as JSON when `status` is `ok`. When the result was
    /// truncated it is a string: the first characters of the result (of its JSON text,
    /// unless the result was itself a string).
    pub value: Option<serde_json::Value>,
    /// Present when the result was truncated.
    pub truncated: Option<Truncation>,
    /// The parts of a rich result (images, audio, files, links, text), when the tool
    /// returned one; `value` then holds their text rendering. Absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ContentPart>,
    /// The exception, for `tool_error`.
    pub error: Option<ToolError>,
    /// One sentence on what happened, for every status but `ok` and `tool_error`; for
    /// `tool_error`, the host's advice when it has some (a module the tool imports that
    /// the runtime lacks: how to declare it).
    pub message: Option<String>,
    /// What the tool wrote to stdout (lossy UTF-8, cut at the stdout cap).
    pub stdout: String,
    /// What the tool wrote to stderr (lossy UTF-8, cut at the stderr cap).
    pub stderr: String,
    /// Fuel consumed, the harness's own work included.
    pub fuel_used: Fuel,
    /// Wall time from instantiation to the end of the call.
    #[serde(rename = "wall_time_us", with = "micros")]
    #[schema(value_type = u64)]
    pub wall_time: Duration,
    /// The largest the guest's linear memory grew to, in bytes.
    pub peak_memory_bytes: u64,
    /// Every outbound HTTP request the tool made or tried, in order (absent when none).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub requests: Vec<RequestRecord>,
    /// Whether the call started from its tool version's warm state or cold (a call
    /// given a warm state that could not be used, say evicted, runs cold and says so).
    #[serde(default)]
    pub start: Start,
}

/// Something about a call its caller should know, though the call went as asked: a
/// machine `code` and one sentence. Codes: `result_mismatch` (the value was delivered
/// as the tool returned it, though it does not fit its return annotation).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Warning {
    /// What kind of warning: `result_mismatch`.
    pub code: String,
    /// What happened, and what to do about it.
    pub message: String,
}

/// The code of the warning that a result does not fit its return annotation.
pub const RESULT_MISMATCH: &str = "result_mismatch";

/// One outbound HTTP request a tool made or tried, as the host carried (or refused) it.
/// Never holds a secret's value, a query string or a body.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequestRecord {
    /// The method, uppercase.
    pub method: String,
    /// `http` or `https`.
    pub scheme: String,
    /// The host as the URL names it.
    pub host: String,
    /// The port (the scheme's default when the URL has none).
    pub port: u16,
    /// The path, without the query.
    pub path: String,
    /// The response's status, when one came.
    pub status: Option<u16>,
    /// Bytes of the request body sent.
    pub request_bytes: u64,
    /// Bytes of the response body received.
    pub response_bytes: u64,
    /// Time from the request to the end of its response, in microseconds.
    pub duration_us: u64,
    /// Why the host refused the request (not granted, private address, a secret bound
    /// elsewhere, a limit); absent when it was sent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<String>,
    /// Why a request that was sent got no response (connection, TLS, timeout).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The state a call's fresh instance started from.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Start {
    /// Warden's snapshot: the call imported the tool (and its packages) itself.
    #[default]
    Cold,
    /// The tool version's warm state: the tool was imported once, when the state was
    /// prepared, and every call starts from a fresh copy of it.
    Warm,
}

impl Start {
    /// The wire name, as in JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Start::Cold => "cold",
            Start::Warm => "warm",
        }
    }
}

mod micros {
    use serde::{Deserialize, Deserializer, Serializer};
    use std::time::Duration;

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_u64(u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        Ok(Duration::from_micros(u64::deserialize(d)?))
    }
}
