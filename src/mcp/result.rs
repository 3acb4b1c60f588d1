//! One table from how a call went to what MCP says.
//!
//! | how it went | MCP |
//! |---|---|
//! | unknown tool | protocol error `-32602` (invalid params) |
//! | arguments that break the schema | `isError`, every violation with its JSON pointer |
//! | `ok`, a string and no `outputSchema` (`-> str`, or no annotation) | a text block holding the string itself |
//! | `ok`, rich content (images, audio, files, links, text) | one block per part, no `structuredContent` (clients drop the blocks beside it) |
//! | `ok`, rich content where the `outputSchema` promised data | the blocks, with a `result_mismatch` warning in `_meta.warden.warnings` (`isError` naming both with `strict_results`) |
//! | `ok`, a value that does not fit the `outputSchema` | its JSON as text, no `structuredContent`, with a `result_mismatch` warning (`isError` with `strict_results`) |
//! | `ok` | `structuredContent` (`{"result": value}` when the `outputSchema` wraps it) and the same JSON as text |
//! | `ok`, result cut to `return_char_limit` | text saying so, then the kept text; `isError` when an `outputSchema` promised the whole value |
//! | `tool_error` from `warden.ToolError` (or FastMCP's) | `isError` with just its message |
//! | `tool_error` | `isError`: the exception's type, message, the host's advice if any (a module the runtime lacks) and traceback |
//! | host statuses (`timeout`, `out_of_fuel`, `memory_limit`, `output_limit`, `crashed`, `invalid_request`) | `isError`: the status, the host's sentence and the limit to raise |
//! | the server could not run the call | `isError` with the source's message |
//! | the server could not list the tools | protocol error `-32603` (internal error) |
//!
//! The tool's own stdout and stderr follow as more text blocks when not empty, and
//! `_meta.warden` gives the call's status, start, fuel, wall time, peak memory and
//! warnings (when any).

use rmcp::ErrorData;
use rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::{Value, json};

use super::{Output, Ran, SourceError};
use crate::app::MAX_VIOLATIONS;
use crate::outcome::{CallResult, ContentPart, RESULT_MISMATCH, Status};

/// The result of a call that ran. `how_to_raise` says how the operator raises the
/// limits it names.
pub(super) fn ran(ran: Ran, how_to_raise: impl Fn(&[&str]) -> String) -> CallToolResult {
    let Ran {
        result,
        output,
        start,
        warnings,
    } = ran;
    let mut meta = json!({
        "status": result.status,
        "start": start,
        "fuel_used": result.fuel_used,
        "wall_time_us": u64::try_from(result.wall_time.as_micros()).unwrap_or(u64::MAX),
        "peak_memory_bytes": result.peak_memory_bytes,
    });
    if !warnings.is_empty() {
        meta["warnings"] = json!(warnings);
    }
    // A value that does not fit the annotation is delivered, as text: structured
    // content would contradict the outputSchema the tool advertises.
    let output = match warnings.iter().any(|w| w.code == RESULT_MISMATCH) {
        true => Output::NoSchema,
        false => output,
    };
    let mut answer = match (result.status, result.truncated) {
        (Status::Ok, None) if !result.content.is_empty() => {
            if output == Output::NoSchema {
                CallToolResult::success(result.content.iter().map(block).collect())
            } else {
                let kinds: Vec<&str> = result.content.iter().map(kind).collect();
                CallToolResult::error(vec![ContentBlock::text(format!(
                    "{}: the tool returned {} content, but its return annotation promises structured data (its outputSchema); annotate it with the content type (e.g. -> Image) or return the data",
                    Status::ToolError,
                    kinds.join(" and ")
                ))])
            }
        }
        (Status::Ok, None) => match (output, result.value.clone().unwrap_or(Value::Null)) {
            (Output::NoSchema, Value::String(text)) => {
                CallToolResult::success(vec![ContentBlock::text(text)])
            }
            (Output::NoSchema, value) if !warnings.is_empty() => {
                CallToolResult::success(vec![ContentBlock::text(value.to_string())])
            }
            (Output::Wrapped, value) => CallToolResult::structured(json!({ "result": value })),
            (Output::Object | Output::NoSchema, value) => CallToolResult::structured(value),
        },
        (Status::Ok, Some(cut)) => {
            let kept = match &result.value {
                Some(Value::String(s)) => s.clone(),
                other => other.as_ref().map(Value::to_string).unwrap_or_default(),
            };
            let note = format!(
                "truncated: the result is {} characters long and only its first {} follow; \
                 {}",
                cut.original_chars,
                cut.kept_chars,
                how_to_raise(&["return_char_limit"])
            );
            let blocks = vec![ContentBlock::text(note), ContentBlock::text(kept)];
            // Cut text cannot match an outputSchema's promise of the whole value.
            if output == Output::NoSchema {
                CallToolResult::success(blocks)
            } else {
                CallToolResult::error(blocks)
            }
        }
        (Status::ToolError, _) => {
            CallToolResult::error(vec![ContentBlock::text(exception(&result))])
        }
        (status, _) => {
            let mut text = format!(
                "{status}: {}",
                result.message.as_deref().unwrap_or("the call failed")
            );
            let limits = limits_of(status);
            if !limits.is_empty() {
                text.push_str("; ");
                text.push_str(&how_to_raise(limits));
            }
            CallToolResult::error(vec![ContentBlock::text(text)])
        }
    };
    for (name, text) in [("stdout", &result.stdout), ("stderr", &result.stderr)] {
        if !text.is_empty() {
            answer
                .content
                .push(ContentBlock::text(format!("tool {name}:\n{text}")));
        }
    }
    let mut object = MetaObject::default();
    object.0.insert("warden".into(), meta);
    answer.with_meta(Some(object))
}

/// The answer to a call that did not run: a protocol error for an unknown tool, else a
/// result the caller (and its model) can read.
pub(super) fn refused(error: SourceError) -> Result<CallToolResult, ErrorData> {
    let text = match error {
        SourceError::UnknownTool(_) => {
            return Err(ErrorData::invalid_params(error.to_string(), None));
        }
        SourceError::InvalidArguments { tool, violations } => {
            let mut lines: Vec<String> = violations
                .iter()
                .take(MAX_VIOLATIONS)
                .map(|v| format!("  {v}"))
                .collect();
            if violations.len() > MAX_VIOLATIONS {
                lines.push(format!(
                    "  ... and {} more ({} in all)",
                    violations.len() - MAX_VIOLATIONS,
                    violations.len()
                ));
            }
            format!(
                "{}: the arguments do not match the schema of {tool}() (its inputSchema):\n{}",
                Status::InvalidRequest,
                lines.join("\n")
            )
        }
        SourceError::Failed(message) => message,
    };
    Ok(CallToolResult::error(vec![ContentBlock::text(text)]))
}

/// The answer to a `tools/list` the source could not answer.
pub(super) fn list_failed(error: SourceError) -> ErrorData {
    tracing::error!("cannot list the tools: {error}");
    ErrorData::internal_error(format!("cannot list the tools: {error}"), None)
}

/// One part of a rich result as an MCP content block (the part is in MCP's shape).
fn block(part: &ContentPart) -> ContentBlock {
    serde_json::to_value(part)
        .ok()
        .and_then(|v| serde_json::from_value(v).ok())
        .unwrap_or_else(|| ContentBlock::text(part.render()))
}

/// The kind of a part, in words.
fn kind(part: &ContentPart) -> &'static str {
    match part {
        ContentPart::Text { .. } => "text",
        ContentPart::Image { .. } => "image",
        ContentPart::Audio { .. } => "audio",
        ContentPart::Resource { .. } => "file",
        ContentPart::ResourceLink { .. } => "link",
    }
}

/// `Type: message`, the host's advice if any, and the traceback of a tool's exception;
/// the message alone for a `ToolError` the tool raised on purpose.
fn exception(result: &CallResult) -> String {
    let Some(e) = &result.error else {
        return format!("{}: the tool failed", Status::ToolError);
    };
    if e.deliberate {
        return e.message.clone();
    }
    let mut head = format!("{}: {}: {}", Status::ToolError, e.kind, e.message);
    // The host's advice (a module the runtime lacks: how to declare it).
    if let Some(advice) = &result.message {
        head = format!("{head}\n{advice}");
    }
    match e.traceback.trim_end() {
        "" => head,
        traceback => format!("{head}\n\n{traceback}"),
    }
}

/// The limits (as `warden.toml` names them) whose hitting ends a call with `status`.
fn limits_of(status: Status) -> &'static [&'static str] {
    match status {
        Status::Timeout => &["timeout"],
        Status::OutOfFuel => &["fuel"],
        Status::MemoryLimit => &["memory"],
        Status::OutputLimit => &["stdout_limit", "stderr_limit"],
        Status::Ok | Status::ToolError | Status::InvalidRequest | Status::Crashed => &[],
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::limits::Fuel;
    use crate::outcome::{Start, ToolError, Truncation, Warning};
    use crate::schema::Violation;

    fn result(status: Status) -> CallResult {
        CallResult {
            status,
            value: None,
            truncated: None,
            content: Vec::new(),
            error: None,
            message: None,
            stdout: String::new(),
            stderr: String::new(),
            fuel_used: Fuel(7),
            wall_time: Duration::from_millis(3),
            peak_memory_bytes: 1,
            requests: Vec::new(),
            start: Start::Cold,
        }
    }

    fn ran_with(result: CallResult, output: Output) -> CallToolResult {
        ran_warned(result, output, Vec::new())
    }

    fn ran_warned(result: CallResult, output: Output, warnings: Vec<Warning>) -> CallToolResult {
        ran(
            Ran {
                result,
                output,
                start: Start::Cold,
                warnings,
            },
            |l| format!("raise {}", l.join("+")),
        )
    }

    fn mismatch() -> Vec<Warning> {
        vec![Warning {
            code: RESULT_MISMATCH.into(),
            message: "the tool returned a string, which does not match -> int".into(),
        }]
    }

    #[test]
    fn a_mismatched_result_is_sent_as_text_with_its_warning_never_as_structured_content() {
        let mut ok = result(Status::Ok);
        ok.value = Some(json!("seven"));
        let r = ran_warned(ok, Output::Wrapped, mismatch());
        assert_eq!(r.structured_content, None);
        assert_eq!(r.is_error, Some(false));
        assert_eq!(texts(&r), ["seven"]);
        let meta = r.meta.unwrap();
        assert_eq!(
            meta.0["warden"]["warnings"][0]["code"],
            json!("result_mismatch")
        );
        let mut ok = result(Status::Ok);
        ok.value = Some(json!({"a": [1]}));
        let r = ran_warned(ok, Output::Object, mismatch());
        assert_eq!(r.structured_content, None);
        assert_eq!(texts(&r), [r#"{"a":[1]}"#]);
        // Rich content where data was promised: the blocks themselves.
        let mut rich = result(Status::Ok);
        rich.content = vec![ContentPart::Text { text: "hi".into() }];
        let r = ran_warned(rich, Output::Object, mismatch());
        assert_eq!(
            (r.is_error, texts(&r)),
            (Some(false), vec!["hi".to_owned()])
        );
    }

    fn texts(r: &CallToolResult) -> Vec<String> {
        r.content
            .iter()
            .filter_map(|c| c.as_text().map(|t| t.text.clone()))
            .collect()
    }

    #[test]
    fn a_wrapped_output_is_sent_as_result() {
        let mut ok = result(Status::Ok);
        ok.value = Some(json!(42));
        let r = ran_with(ok.clone(), Output::Wrapped);
        assert_eq!(r.structured_content, Some(json!({"result": 42})));
        assert_eq!(r.is_error, Some(false));
        assert_eq!(texts(&r), [r#"{"result":42}"#]);
        let r = ran_with(ok, Output::NoSchema);
        assert_eq!(r.structured_content, Some(json!(42)));
        let meta = r.meta.unwrap();
        assert_eq!(meta.0["warden"]["status"], json!("ok"));
        assert_eq!(meta.0["warden"]["fuel_used"], json!(7));
    }

    #[test]
    fn a_truncated_result_says_so_and_is_no_structured_content() {
        let mut ok = result(Status::Ok);
        ok.value = Some(json!("[1, 2, 3"));
        ok.truncated = Some(Truncation {
            original_chars: 20,
            kept_chars: 8,
        });
        let r = ran_with(ok.clone(), Output::Wrapped);
        assert_eq!(r.structured_content, None);
        assert_eq!(r.is_error, Some(true));
        let t = texts(&r);
        assert!(t[0].contains("truncated") && t[0].contains("20"), "{t:?}");
        assert!(t[0].contains("raise return_char_limit"), "{t:?}");
        assert_eq!(t[1], "[1, 2, 3");
        assert_eq!(ran_with(ok, Output::NoSchema).is_error, Some(false));
    }

    #[test]
    fn a_tool_error_carries_type_message_and_traceback_and_output() {
        let mut failed = result(Status::ToolError);
        failed.error = Some(ToolError {
            kind: "ValueError".into(),
            message: "negative".into(),
            traceback: "Traceback (most recent call last):\n  line 3\nValueError: negative\n"
                .into(),
            deliberate: false,
        });
        failed.stdout = "printed\n".into();
        let r = ran_with(failed, Output::Object);
        assert_eq!(r.is_error, Some(true));
        let t = texts(&r);
        assert!(
            t[0].starts_with("tool_error: ValueError: negative"),
            "{t:?}"
        );
        assert!(t[0].contains("Traceback"), "{t:?}");
        assert_eq!(t[1], "tool stdout:\nprinted\n");
    }

    #[test]
    fn a_tool_errors_advice_from_the_host_comes_between_its_line_and_its_traceback() {
        let mut failed = result(Status::ToolError);
        failed.error = Some(ToolError {
            kind: "ModuleNotFoundError".into(),
            message: "No module named 'requests'".into(),
            traceback: "Traceback (most recent call last):\n  line 1\n".into(),
            deliberate: false,
        });
        failed.message = Some("declare it".into());
        let t = texts(&ran_with(failed, Output::Object));
        assert!(
            t[0].starts_with(
                "tool_error: ModuleNotFoundError: No module named 'requests'\ndeclare it\n\nTraceback"
            ),
            "{t:?}"
        );
    }

    #[test]
    fn host_statuses_name_the_limit_to_raise() {
        for (status, limit) in [
            (Status::Timeout, "timeout"),
            (Status::OutOfFuel, "fuel"),
            (Status::MemoryLimit, "memory"),
            (Status::OutputLimit, "stdout_limit+stderr_limit"),
        ] {
            let mut r = result(status);
            r.message = Some("the host's sentence".into());
            let t = texts(&ran_with(r, Output::Object)).join("\n");
            assert!(
                t.starts_with(&format!("{status}: the host's sentence")),
                "{t}"
            );
            assert!(t.contains(&format!("raise {limit}")), "{t}");
        }
        let t = texts(&ran_with(result(Status::Crashed), Output::Object)).join("");
        assert!(t.starts_with("crashed") && !t.contains("raise"), "{t}");
    }

    #[test]
    fn refusals_name_every_pointer_and_unknown_tools_are_protocol_errors() {
        let violations = (0..MAX_VIOLATIONS + 2)
            .map(|i| Violation {
                pointer: format!("/{i}"),
                message: "wrong".into(),
            })
            .collect();
        let r = refused(SourceError::InvalidArguments {
            tool: "add".into(),
            violations,
        })
        .unwrap();
        assert_eq!(r.is_error, Some(true));
        let t = texts(&r).join("");
        assert!(t.contains("  /0: wrong\n  /1: wrong"), "{t}");
        assert!(t.contains("... and 2 more (102 in all)"), "{t}");
        let e = refused(SourceError::UnknownTool("nope".into())).unwrap_err();
        assert_eq!(e.code, rmcp::model::ErrorCode::INVALID_PARAMS);
        assert!(e.message.contains("unknown tool `nope`"));
    }
}
