//! The JSON that crosses the guest's stdin and stdout, and the harness that speaks it.
//!
//! The host writes one [`Request`] to stdin. The harness (`runtime/harness.py`) writes
//! one response frame to fd 1 as the last thing it does: `"\n\x1ewarden:" NONCE " "
//! JSON`. Anything before the frame is the tool's own stdout. The frame is trusted only
//! when it ends the stream and carries this call's nonce, so text a tool prints cannot
//! pass for a response.

use serde::{Deserialize, Serialize};

use crate::outcome::{ToolError, Truncation};

/// The harness's source.
pub const HARNESS: &str = include_str!("../../runtime/harness.py");

/// Turned once, while Warden builds its snapshot, with the harness's source on stdin:
/// defines the harness in `__main__`. The file name makes the harness's frames readable
/// in a crash report.
pub const LOAD_HARNESS: &str = "import sys\n\
exec(compile(sys.stdin.buffer.read(), '/warden/harness.py', 'exec'))\n";

/// Turned per call: the harness reads the request from stdin. It returns None, so the
/// reactor echoes nothing.
pub const CALL: &str = "_warden_call()\n";

/// A call's stdin: the JSON request.
pub fn stdin(request: &Request<'_>) -> Result<Vec<u8>, serde_json::Error> {
    serde_json::to_vec(request)
}

/// What the harness is asked to do.
#[derive(Debug, Serialize)]
pub struct Request<'a> {
    /// A fresh random token; the response must carry it.
    pub nonce: &'a str,
    /// The tool's path in the guest, e.g. `/tool/csv_summary.py`.
    pub module: &'a str,
    /// The function to call.
    pub function: &'a str,
    /// Keyword arguments.
    pub arguments: &'a serde_json::Map<String, serde_json::Value>,
    /// Parameters passed `None` when omitted and without a Python default.
    pub none_if_omitted: &'a [String],
    /// The guest's `os.environ`, exactly.
    pub env: serde_json::Map<String, serde_json::Value>,
    /// Characters of the result kept.
    pub return_char_limit: u32,
}

/// What the harness answered.
#[derive(Debug, Deserialize)]
#[serde(tag = "status", rename_all = "snake_case", deny_unknown_fields)]
pub enum Response {
    /// The tool returned.
    Ok {
        /// Its result as JSON (or the truncated text).
        #[serde(default)]
        value: serde_json::Value,
        /// Set when the result was cut.
        #[serde(default)]
        truncated: Option<Truncation>,
    },
    /// The tool raised, or returned something without a JSON form.
    ToolError {
        /// The exception.
        error: ToolError,
    },
    /// The function or its arguments did not fit.
    InvalidRequest {
        /// Why.
        message: String,
    },
}

/// Splits the guest's stdout into the tool's own output and the harness's response.
///
/// Returns `None` for the response when no well-formed frame with this nonce ends the
/// stream (the guest died before answering, or answered garbage).
pub fn split_stdout<'a>(stdout: &'a [u8], nonce: &str) -> (&'a [u8], Option<Response>) {
    let marker = format!("\n\x1ewarden:{nonce} ");
    let Some(at) = find_last(stdout, marker.as_bytes()) else {
        return (stdout, None);
    };
    let body = &stdout[at + marker.len()..];
    match serde_json::from_slice(body) {
        Ok(response) => (&stdout[..at], Some(response)),
        Err(_) => (stdout, None),
    }
}

fn find_last(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_frame_without_the_nonce_is_tool_output() {
        let out = b"hi\n\n\x1ewarden:guess {\"status\":\"ok\",\"value\":1}";
        let (tool, response) = split_stdout(out, "n0nce");
        assert_eq!(tool, out);
        assert!(response.is_none());
    }

    #[test]
    fn the_frame_splits_off_the_tools_output() {
        let out = b"printed\n\x1ewarden:n0nce {\"status\":\"ok\",\"value\":[1,2]}";
        let (tool, response) = split_stdout(out, "n0nce");
        assert_eq!(tool, b"printed");
        assert!(matches!(response, Some(Response::Ok { .. })));
    }

    #[test]
    fn text_after_the_frame_voids_it() {
        let out = b"\n\x1ewarden:n0nce {\"status\":\"ok\",\"value\":1}trailing";
        assert!(split_stdout(out, "n0nce").1.is_none());
    }
}
