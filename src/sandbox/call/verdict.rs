//! How a call's status is decided: a pure function of what the host observed.
//!
//! The order matters and is the same for every call:
//!
//! 1. an output cap hit: `output_limit` (a guest that hit one may then fail in any way);
//! 2. the memory cap hit: `memory_limit`, even if the tool caught its `MemoryError`
//!    and returned;
//! 3. the host stopped the call at its deadline: `timeout`;
//! 4. the guest trapped: by its deadline (`timeout`), out of fuel (`out_of_fuel`), or
//!    anything else, including `os._exit` (`crashed`);
//! 5. the guest returned: its answer becomes `ok` or `tool_error`, and nothing else
//!    (see [`protocol::Response`]); no well-formed answer is `crashed`.
//!
//! Everything here is plain data, so the ladder is tested without a runtime.

use serde_json::Value;

use crate::limits::Limits;
use crate::outcome::{ContentPart, Status, ToolError, Truncation};
use crate::sandbox::call::missing;
use crate::sandbox::content;
use crate::sandbox::protocol::{self, Answer, Response};

/// How the guest's run ended, as the host saw it.
#[derive(Debug)]
pub(in crate::sandbox) enum Ended {
    /// `turn` returned this code (0: the harness ran to its end).
    Returned(i32),
    /// The guest trapped.
    Trapped(TrapKind),
    /// The host's timer stopped the call while the guest was blocked in a host call.
    TimedOut,
}

/// Why the guest trapped, classified by the trap's type where it was raised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::sandbox) enum TrapKind {
    /// The deadline had passed at a slice's end.
    Deadline,
    /// The fuel ran out.
    OutOfFuel,
    /// The guest called `proc_exit` (`os._exit`, `sys.exit` at top level).
    Exit(i32),
    /// Any other trap, with wasmtime's description.
    Other(String),
}

/// What the host observed of one call.
#[derive(Debug)]
pub(in crate::sandbox) struct Observed {
    /// How the run ended.
    pub ended: Ended,
    /// The tool wrote past its stdout or stderr cap.
    pub output_over: bool,
    /// The guest tried to grow its memory past the cap.
    pub memory_hit: bool,
    /// The guest's answer (only read when `turn` returned 0).
    pub answer: Answer,
}

/// The host's decision: the status and what goes with it.
#[derive(Debug, PartialEq)]
pub(in crate::sandbox) struct Verdict {
    pub status: Status,
    pub value: Option<Value>,
    pub truncated: Option<Truncation>,
    pub error: Option<ToolError>,
    /// The host's own explanation; never text from the guest.
    pub message: Option<String>,
    /// A rich result's parts, checked.
    pub content: Vec<ContentPart>,
}

impl Verdict {
    fn host(status: Status, message: String) -> Verdict {
        Verdict {
            status,
            value: None,
            truncated: None,
            error: None,
            message: Some(message),
            content: Vec::new(),
        }
    }

    /// A tool's exception, with the host's advice when there is some (a module the
    /// guest lacks, [`missing::advice`]).
    fn tool_error(error: ToolError) -> Verdict {
        Verdict {
            status: Status::ToolError,
            value: None,
            truncated: None,
            message: missing::advice(&error),
            error: Some(error),
            content: Vec::new(),
        }
    }
}

/// Decides the status of a call from what was observed.
pub(in crate::sandbox) fn decide(observed: Observed, limits: &Limits) -> Verdict {
    if observed.output_over {
        return Verdict::host(
            Status::OutputLimit,
            format!(
                "the tool wrote more than its output cap (stdout {}, stderr {})",
                limits.stdout, limits.stderr
            ),
        );
    }
    if observed.memory_hit {
        return Verdict::host(
            Status::MemoryLimit,
            format!(
                "the guest tried to grow its memory past the cap of {}",
                limits.memory
            ),
        );
    }
    let timeout = || {
        Verdict::host(
            Status::Timeout,
            format!(
                "the call passed its deadline of {}",
                humantime::format_duration(limits.deadline)
            ),
        )
    };
    match (observed.ended, observed.answer) {
        (Ended::TimedOut | Ended::Trapped(TrapKind::Deadline), _) => timeout(),
        (Ended::Trapped(TrapKind::OutOfFuel), _) => Verdict::host(
            Status::OutOfFuel,
            format!("the call used up its fuel budget of {}", limits.fuel),
        ),
        (Ended::Trapped(TrapKind::Exit(code)), _) => Verdict::host(
            Status::Crashed,
            format!("the tool ended the interpreter with exit code {code}"),
        ),
        (Ended::Trapped(TrapKind::Other(trap)), _) => {
            Verdict::host(Status::Crashed, format!("the guest trapped: {trap}"))
        }
        (
            Ended::Returned(0),
            Answer::Response(Response::Ok {
                content: Some(parts),
                ..
            }),
        ) => match content::check(parts, limits) {
            Ok(parts) => {
                let rendered: Vec<String> = parts.iter().map(ContentPart::render).collect();
                let (value, truncated) =
                    enforce_char_limit(Value::String(rendered.join("\n")), None, limits);
                Verdict {
                    status: Status::Ok,
                    value: Some(value),
                    truncated,
                    error: None,
                    message: None,
                    content: parts,
                }
            }
            Err(refused) => Verdict::tool_error(ToolError {
                kind: refused.kind().into(),
                message: refused.to_string(),
                traceback: String::new(),
                deliberate: false,
            }),
        },
        (
            Ended::Returned(0),
            Answer::Response(Response::Ok {
                value, truncated, ..
            }),
        ) => {
            let (value, truncated) = enforce_char_limit(value, truncated, limits);
            Verdict {
                status: Status::Ok,
                message: truncated.map(|t| {
                    format!(
                        "the result was {} characters long and was cut to its first {} \
                         (return_char_limit)",
                        t.original_chars, t.kept_chars
                    )
                }),
                value: Some(value),
                truncated,
                error: None,
                content: Vec::new(),
            }
        }
        (Ended::Returned(0), Answer::Response(Response::ToolError { error })) => {
            Verdict::tool_error(error)
        }
        (Ended::Returned(0), Answer::TooDeep) => Verdict::tool_error(ToolError {
            kind: "UnserializableResult".into(),
            message: format!(
                "the result nests deeper than {} levels of lists and dicts; flatten it",
                protocol::MAX_RESULT_DEPTH
            ),
            traceback: String::new(),
            deliberate: false,
        }),
        (Ended::Returned(0), Answer::Missing) => Verdict::host(
            Status::Crashed,
            "the guest returned no well-formed response".into(),
        ),
        (Ended::Returned(code), _) => Verdict::host(
            Status::Crashed,
            format!("the harness failed (code {code}); see stderr"),
        ),
    }
}

/// The host's own check of `return_char_limit` on the serialized result, whatever its
/// type: a string is cut to its first `limit` characters; anything else longer than
/// `limit` once serialized as Python's `json.dumps` writes it (`", "` and `": "`
/// between items) becomes the first `limit` characters of that text. The harness cuts
/// the same way first, so its frames stay small, but the host does not rely on it.
fn enforce_char_limit(
    value: Value,
    truncated: Option<Truncation>,
    limits: &Limits,
) -> (Value, Option<Truncation>) {
    let limit = limits.return_chars.0 as usize;
    // A string result is measured in place; anything else as its JSON text.
    let serialized;
    let text: &str = match &value {
        Value::String(s) => s,
        other => {
            serialized = python_json(other);
            &serialized
        }
    };
    if text.chars().nth(limit).is_none() {
        return (value, truncated);
    }
    let original = text.chars().count() as u64;
    let kept: String = text.chars().take(limit).collect();
    let original = match truncated {
        // The harness already cut a longer text: keep its count of the original.
        Some(t) if t.original_chars > original => t.original_chars,
        _ => original,
    };
    (
        Value::String(kept),
        Some(Truncation {
            original_chars: original,
            kept_chars: limit as u64,
        }),
    )
}

/// `value` as Python's `json.dumps(value, ensure_ascii=False)` writes it.
fn python_json(value: &Value) -> String {
    use serde::Serialize;

    /// serde_json's compact output with Python's separators.
    struct PythonStyle;

    impl serde_json::ser::Formatter for PythonStyle {
        fn begin_array_value<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            if first {
                Ok(())
            } else {
                writer.write_all(b", ")
            }
        }

        fn begin_object_key<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
            first: bool,
        ) -> std::io::Result<()> {
            if first {
                Ok(())
            } else {
                writer.write_all(b", ")
            }
        }

        fn begin_object_value<W: ?Sized + std::io::Write>(
            &mut self,
            writer: &mut W,
        ) -> std::io::Result<()> {
            writer.write_all(b": ")
        }
    }

    let mut out = Vec::new();
    let mut serializer = serde_json::Serializer::with_formatter(&mut out, PythonStyle);
    // Writing a `Value` to memory cannot fail, and serde_json writes UTF-8.
    match value.serialize(&mut serializer) {
        Ok(()) => String::from_utf8_lossy(&out).into_owned(),
        Err(_) => value.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::limits::CharLimit;

    fn ok(value: Value) -> Answer {
        Answer::Response(Response::Ok {
            value,
            truncated: None,
            content: None,
        })
    }

    fn tool_error() -> Answer {
        Answer::Response(Response::ToolError {
            error: ToolError {
                kind: "ValueError".into(),
                message: "bad".into(),
                traceback: String::new(),
                deliberate: false,
            },
        })
    }

    fn status(ended: Ended, output_over: bool, memory_hit: bool, answer: Answer) -> Status {
        let observed = Observed {
            ended,
            output_over,
            memory_hit,
            answer,
        };
        decide(observed, &Limits::default()).status
    }

    #[test]
    fn the_ladder() {
        use Ended::*;
        use Status as S;
        use TrapKind as K;
        let table: Vec<(Ended, bool, bool, Answer, Status)> = vec![
            (Returned(0), false, false, ok(json!(1)), S::Ok),
            (Returned(0), false, false, tool_error(), S::ToolError),
            (Returned(0), false, false, Answer::TooDeep, S::ToolError),
            (Returned(0), false, false, Answer::Missing, S::Crashed),
            (Returned(1), false, false, ok(json!(1)), S::Crashed),
            (TimedOut, false, false, Answer::Missing, S::Timeout),
            (
                Trapped(K::Deadline),
                false,
                false,
                Answer::Missing,
                S::Timeout,
            ),
            (
                Trapped(K::OutOfFuel),
                false,
                false,
                Answer::Missing,
                S::OutOfFuel,
            ),
            (Trapped(K::Exit(0)), false, false, ok(json!(1)), S::Crashed),
            (
                Trapped(K::Other("unreachable".into())),
                false,
                false,
                Answer::Missing,
                S::Crashed,
            ),
            // A tool that caught its MemoryError and returned still hit the cap.
            (Returned(0), false, true, ok(json!(1)), S::MemoryLimit),
            (
                Trapped(K::OutOfFuel),
                false,
                true,
                Answer::Missing,
                S::MemoryLimit,
            ),
            // Output caps come first: the guest may fail any way after hitting one.
            (Returned(0), true, true, ok(json!(1)), S::OutputLimit),
            (
                Trapped(K::Other("output".into())),
                true,
                false,
                Answer::Missing,
                S::OutputLimit,
            ),
        ];
        for (ended, output_over, memory_hit, answer, expected) in table {
            let shown = format!("{ended:?} output_over={output_over} memory_hit={memory_hit}");
            assert_eq!(
                status(ended, output_over, memory_hit, answer),
                expected,
                "{shown}"
            );
        }
    }

    #[test]
    fn host_verdicts_carry_the_hosts_message_and_nothing_of_the_guest() {
        let observed = Observed {
            ended: Ended::Trapped(TrapKind::OutOfFuel),
            output_over: false,
            memory_hit: false,
            answer: ok(json!("forged")),
        };
        let verdict = decide(observed, &Limits::default());
        assert_eq!(verdict.status, Status::OutOfFuel);
        assert_eq!(verdict.value, None);
        assert!(verdict.message.unwrap_or_default().contains("fuel budget"));
    }

    #[test]
    fn the_char_limit_holds_for_every_result_type() {
        let limits = Limits {
            return_chars: CharLimit(10),
            ..Limits::default()
        };
        for value in [
            json!("abcdefghijklmnop"),
            json!([1, 2, 3, 4, 5, 6, 7, 8]),
            json!({"key": "a long value"}),
            json!(12345678901234567u64),
        ] {
            let (kept, truncated) = enforce_char_limit(value.clone(), None, &limits);
            let kept = kept.as_str().map(str::to_owned).unwrap_or_default();
            assert_eq!(kept.chars().count(), 10, "{value}");
            assert!(truncated.is_some(), "{value}");
        }
        assert_eq!(
            python_json(&json!({"a": [1, 2], "b": {}})),
            r#"{"a": [1, 2], "b": {}}"#
        );
        let small = json!([1, 2]);
        assert_eq!(
            enforce_char_limit(small.clone(), None, &limits),
            (small, None)
        );
    }
}
