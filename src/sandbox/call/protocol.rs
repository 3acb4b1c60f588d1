//! The JSON that crosses the guest's stdin and stdout, and the harness that speaks it.
//!
//! The host writes one [`Request`] to stdin. The harness (`runtime/harness.py`) writes
//! one response frame to fd 1 as the last thing it does: `"\n\x1ewarden:" NONCE " "
//! JSON`. Anything before the frame is the tool's own stdout. The frame is trusted only
//! when it ends the stream and carries this call's nonce, so text a tool prints cannot
//! pass for a response.

use serde::{Deserialize, Serialize};

use crate::outcome::{ToolError, Truncation};

/// The harness's source: run in `__main__` after [`GUEST_MODULES`], it defines the
/// entry points each turn calls (`_warden_call`, `_warden_prepare`).
pub const HARNESS: &str = include_str!("../../../runtime/harness.py");

/// One Python module of the guest side.
#[derive(Debug, Clone, Copy)]
pub struct GuestModule {
    /// Its name in `sys.modules`.
    pub name: &'static str,
    /// The file name its frames show (under `/warden/`, which no guest folder is).
    pub file: &'static str,
    /// Its source, from `runtime/`.
    pub source: &'static str,
}

/// The guest side's modules, loaded in this order (each may import those before it)
/// while Warden builds its snapshot, before the harness. `tests/guest/` tests their
/// pure parts under the host's CPython, loaded from this list.
pub const GUEST_MODULES: &[GuestModule] = &[
    // The stand-in `ssl` for a runtime without `_ssl`, offered by the outbound finder.
    GuestModule {
        name: "_warden_ssl",
        file: "/warden/ssl_standin.py",
        source: include_str!("../../../runtime/ssl_standin.py"),
    },
    // The guest's half of outbound HTTP (`crate::outbound`): the door's wire and the
    // libraries' patches; the harness installs it.
    GuestModule {
        name: "_warden_outbound",
        file: "/warden/outbound.py",
        source: include_str!("../../../runtime/outbound.py"),
    },
    // Its http.client and urllib.request half, applied by the outbound finder.
    GuestModule {
        name: "_warden_http_client",
        file: "/warden/http_client.py",
        source: include_str!("../../../runtime/http_client.py"),
    },
    // Its requests and httpx halves, applied by the outbound finder.
    GuestModule {
        name: "_warden_http_libraries",
        file: "/warden/http_libraries.py",
        source: include_str!("../../../runtime/http_libraries.py"),
    },
    // The `warden` module tools import: progress, rich results, `ToolError`, `Context`.
    GuestModule {
        name: "warden",
        file: "/warden/warden.py",
        source: include_str!("../../../runtime/warden.py"),
    },
    // Stand-ins for the MCP SDKs' and agent frameworks' import paths.
    GuestModule {
        name: "_warden_compat",
        file: "/warden/compat.py",
        source: include_str!("../../../runtime/compat.py"),
    },
    // A call's arguments bound to the tool's function.
    GuestModule {
        name: "_warden_bind",
        file: "/warden/bind.py",
        source: include_str!("../../../runtime/bind.py"),
    },
    // A result encoded as JSON.
    GuestModule {
        name: "_warden_encode",
        file: "/warden/encode.py",
        source: include_str!("../../../runtime/encode.py"),
    },
    // A tool's warm state: its import, the libraries' first work, per-call reseeding.
    GuestModule {
        name: "_warden_warm",
        file: "/warden/warm.py",
        source: include_str!("../../../runtime/warm.py"),
    },
];

/// Turned once, while Warden builds its snapshot, with [`snapshot_stdin`] on stdin:
/// defines each of [`GUEST_MODULES`], then runs the harness in `__main__`. The file
/// names make their frames readable in a crash report.
pub const LOAD_HARNESS: &str = r"import sys
_w_parts = sys.stdin.buffer.read().split(b'\0')
_w_harness = _w_parts.pop()
for _w_at in range(0, len(_w_parts), 3):
    _w_name, _w_file = _w_parts[_w_at].decode(), _w_parts[_w_at + 1].decode()
    _w_module = type(sys)(_w_name)
    _w_module.__file__ = _w_file
    sys.modules[_w_name] = _w_module
    exec(compile(_w_parts[_w_at + 2], _w_file, 'exec'), _w_module.__dict__)
exec(compile(_w_harness, '/warden/harness.py', 'exec'))
del _w_parts, _w_harness, _w_at, _w_name, _w_file, _w_module
";

/// The snapshot turn's stdin: each guest module's name, file and source, then the
/// harness, split by NULs (which Python source cannot hold).
pub fn snapshot_stdin() -> Vec<u8> {
    let mut stdin = Vec::new();
    for module in GUEST_MODULES {
        for part in [module.name, module.file, module.source] {
            stdin.extend_from_slice(part.as_bytes());
            stdin.push(0);
        }
    }
    stdin.extend_from_slice(HARNESS.as_bytes());
    stdin
}

/// Turned per call: the harness reads the request from stdin. It returns None, so the
/// reactor echoes nothing.
pub const CALL: &str = "_warden_call()\n";

/// Turned once per tool version, while its warm state is prepared (see `warm.rs`): the
/// harness imports the tool named on stdin.
pub const PREPARE: &str = "_warden_prepare()\n";

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
    /// Bytes the binary parts of a rich result may hold, decoded.
    pub return_bytes: u64,
    /// Whether the caller asked for progress reports (`warden.progress` is free
    /// otherwise).
    pub progress: bool,
    /// The least MCP level of log records the caller asked for; none when nobody asked.
    pub log_level: Option<&'a str>,
    /// The guest folder of the tool's installed packages, appended to `sys.path`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub packages: Option<&'a str>,
}

/// What the harness answered. The guest can only ever speak for the tool: whatever it
/// writes becomes `ok` or `tool_error`. Every other status (`invalid_request`,
/// `timeout`, `out_of_fuel`, `memory_limit`, `output_limit`, `crashed`) is decided by
/// the host from what it observed, because the tool runs in the same interpreter as the
/// harness and can rewrite anything the harness does after the tool's code has run.
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
        /// The parts of a rich result (images, audio, files, links, text), unchecked:
        /// the host checks each before anyone sees it.
        #[serde(default)]
        content: Option<Vec<serde_json::Value>>,
    },
    /// The tool raised, or returned something without a JSON form.
    ToolError {
        /// The exception.
        error: ToolError,
    },
}

/// Deepest nesting of arrays and objects a result may have; the harness refuses a
/// deeper one as a `tool_error`, and so does the host (serde_json's own parser stops
/// at 128 levels).
pub const MAX_RESULT_DEPTH: usize = 100;

/// Nesting the response frame adds around a result: `{"status": "ok", "value": ...}`.
/// (A `tool_error` frame nests two levels in all.)
const FRAME_DEPTH: usize = 1;

/// What the host made of the guest's stdout.
#[derive(Debug)]
pub enum Answer {
    /// A well-formed frame with this call's nonce ends the stream.
    Response(Response),
    /// A frame ends the stream but nests deeper than [`MAX_RESULT_DEPTH`].
    TooDeep,
    /// No well-formed frame with this call's nonce ends the stream: the guest died
    /// before answering, or answered garbage.
    Missing,
}

/// Splits the guest's stdout into the tool's own output and the harness's answer.
pub fn split_stdout<'a>(stdout: &'a [u8], nonce: &str) -> (&'a [u8], Answer) {
    let marker = format!("\n\x1ewarden:{nonce} ");
    let Some(at) = find_last(stdout, marker.as_bytes()) else {
        return (stdout, Answer::Missing);
    };
    let body = &stdout[at + marker.len()..];
    if depth(body) > MAX_RESULT_DEPTH + FRAME_DEPTH {
        return (&stdout[..at], Answer::TooDeep);
    }
    match serde_json::from_slice(body) {
        Ok(response) => (&stdout[..at], Answer::Response(response)),
        Err(_) => (stdout, Answer::Missing),
    }
}

/// The deepest nesting of arrays and objects in `json`, brackets inside strings not
/// counted. Linear, with no recursion, whatever the input.
fn depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let (mut in_string, mut escaped) = (false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
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
        let (tool, answer) = split_stdout(out, "n0nce");
        assert_eq!(tool, out);
        assert!(matches!(answer, Answer::Missing));
    }

    #[test]
    fn the_frame_splits_off_the_tools_output() {
        let out = b"printed\n\x1ewarden:n0nce {\"status\":\"ok\",\"value\":[1,2]}";
        let (tool, answer) = split_stdout(out, "n0nce");
        assert_eq!(tool, b"printed");
        assert!(matches!(answer, Answer::Response(Response::Ok { .. })));
    }

    #[test]
    fn text_after_the_frame_voids_it() {
        let out = b"\n\x1ewarden:n0nce {\"status\":\"ok\",\"value\":1}trailing";
        assert!(matches!(split_stdout(out, "n0nce").1, Answer::Missing));
    }

    #[test]
    fn the_guest_cannot_claim_a_host_verdict() {
        for status in ["invalid_request", "timeout", "crashed", "memory_limit"] {
            let out =
                format!("\n\x1ewarden:n0nce {{\"status\":\"{status}\",\"message\":\"forged\"}}");
            let (_, answer) = split_stdout(out.as_bytes(), "n0nce");
            assert!(matches!(answer, Answer::Missing), "{status}: {answer:?}");
        }
    }

    #[test]
    fn nesting_is_measured_outside_strings() {
        assert_eq!(depth(br#"{"a":[1,[2]],"b":"[[[[\"]]"}"#), 3);
        let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
        assert_eq!(depth(deep.as_bytes()), 100_000);
    }

    #[test]
    fn a_frame_nested_past_the_limit_is_too_deep_not_garbage() {
        let ok = |n: usize| {
            format!(
                "\n\x1ewarden:n0nce {{\"status\":\"ok\",\"value\":{}{}}}",
                "[".repeat(n),
                "]".repeat(n)
            )
        };
        let fits = ok(MAX_RESULT_DEPTH);
        assert!(matches!(
            split_stdout(fits.as_bytes(), "n0nce").1,
            Answer::Response(_)
        ));
        let deep = ok(MAX_RESULT_DEPTH + 1);
        assert!(matches!(
            split_stdout(deep.as_bytes(), "n0nce").1,
            Answer::TooDeep
        ));
    }
}
