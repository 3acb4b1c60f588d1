//! Rich results over REST: a run and a batch answer the content parts (binary as base64
//! with its mime type) and a text rendering in `value`; the binary budget
//! (`return_bytes`) holds with its tenant ceiling; a result that contradicts its
//! annotation, or a bad part, is a `tool_error` naming what is wrong.

use axum::http::{Method, StatusCode};
use base64::Engine as _;
use serde_json::{Value, json};

use super::Service;

/// Returns a text part, a 1x1 PNG made by Pillow, a CSV file, a link, or `n` bytes of
/// a WAV-headed sound.
const RICH: &str = r#"import io
import warden
from PIL import Image

def rich(kind: str, n: int = 0) -> list[str | warden.Image | warden.Audio | warden.File | warden.Link]:
    """Rich parts."""
    if kind == "all":
        buf = io.BytesIO()
        Image.new("RGB", (1, 1), "red").save(buf, format="PNG")
        return ["hello", warden.Image(buf.getvalue()), warden.File("a,b\n1,2\n", name="t.csv"),
                warden.Link("https://example.com/r", name="r")]
    if kind == "sound":
        return [warden.Audio(b"RIFF" + b"\0" * 4 + b"WAVE" + b"\0" * n)]
    if kind == "bad":
        return [warden.Link("not a uri", name="x")]
    return []
"#;

/// Says it returns data, returns an image.
const LIAR: &str = r#"import warden

def liar() -> dict:
    """Claims a dict."""
    return warden.Image(b"\x89PNG\r\n\x1a\n")
"#;

fn b64(data: &str) -> Vec<u8> {
    base64::engine::general_purpose::STANDARD
        .decode(data)
        .expect("base64")
}

#[tokio::test]
async fn a_run_and_a_batch_answer_the_content_parts() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let id = s.register(&key, json!({"source": RICH})).await;
    let r = s.run(&key, &id, json!({"kind": "all"})).await;
    assert_eq!(
        (r.status, r.json["status"].as_str()),
        (StatusCode::OK, Some("ok")),
        "{}",
        r.json
    );
    let parts = r.json["content"].as_array().expect("content parts");
    let kinds: Vec<&str> = parts.iter().map(|p| p["type"].as_str().unwrap()).collect();
    assert_eq!(kinds, ["text", "image", "resource", "resource_link"]);
    assert_eq!(parts[0]["text"], "hello");
    assert_eq!(parts[1]["mimeType"], "image/png");
    assert!(b64(parts[1]["data"].as_str().unwrap()).starts_with(b"\x89PNG\r\n\x1a\n"));
    assert_eq!(parts[2]["resource"]["text"], "a,b\n1,2\n");
    assert_eq!(parts[2]["resource"]["mimeType"], "text/csv");
    assert_eq!(parts[3]["uri"], "https://example.com/r");
    // Callers that take text only (Letta, OpenAI, Anthropic) read `value`.
    let value = r.json["value"].as_str().expect("a text rendering");
    assert!(
        value.contains("hello") && value.contains("[image image/png"),
        "{value}"
    );

    let batch = s
        .send(
            Method::POST,
            "/v1/runs/batch",
            Some(&key),
            Some(json!({"calls": [{"tool": id, "arguments": {"kind": "sound", "n": 8}}]})),
        )
        .await;
    assert_eq!(batch.status, StatusCode::OK, "{}", batch.json);
    let part = &batch.json["results"][0]["content"][0];
    assert_eq!(
        (part["type"].as_str(), part["mimeType"].as_str()),
        (Some("audio"), Some("audio/wav"))
    );
    let mut expected = b"RIFF\0\0\0\0WAVE".to_vec();
    expected.extend([0; 8]);
    assert_eq!(b64(part["data"].as_str().unwrap()), expected);
}

#[tokio::test]
async fn the_binary_budget_and_its_ceiling_hold() {
    let s = Service::start();
    let key = s
        .tenant(json!({"ceilings": {
            "fuel": 2_000_000_000u64, "deadline_ms": 10000, "memory_bytes": 268_435_456u64,
            "stdout_bytes": 65536, "stderr_bytes": 65536, "return_char_limit": 10000,
            "return_bytes": 4096
        }}))
        .await;
    let greedy = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": RICH, "limits": {"return_bytes": 8192}})),
        )
        .await;
    assert_eq!(
        (greedy.status, greedy.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "above_ceiling"),
        "{}",
        greedy.json
    );
    assert!(
        greedy.json.to_string().contains("return_bytes"),
        "{}",
        greedy.json
    );
    // Left out, the budget is the default lowered to the ceiling: 4 KiB.
    let id = s.register(&key, json!({"source": RICH})).await;
    let fits = s.run(&key, &id, json!({"kind": "sound", "n": 4000})).await;
    assert_eq!(fits.json["status"], "ok", "{}", fits.json);
    let big = s.run(&key, &id, json!({"kind": "sound", "n": 4100})).await;
    assert_eq!(big.json["status"], "tool_error", "{}", big.json);
    assert_eq!(big.json["error"]["type"], "ResultTooLarge", "{}", big.json);
    assert!(
        big.json.to_string().contains("return_bytes"),
        "{}",
        big.json
    );
}

/// What a tool returned is never lost over its annotation: delivered as returned, with a
/// `result_mismatch` warning (in the answer and the audit trail), unless the tool or
/// its tenant asks for strict results.
#[tokio::test]
async fn a_result_against_its_annotation_is_delivered_with_a_warning_unless_strict() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let liar = s.register(&key, json!({"source": LIAR})).await;
    let r = s.run(&key, &liar, json!({})).await;
    assert_eq!(r.json["status"], "ok", "{}", r.json);
    assert_eq!(r.json["content"][0]["type"], "image", "{}", r.json);
    assert_eq!(
        r.json["warnings"][0]["code"], "result_mismatch",
        "{}",
        r.json
    );
    let audit = s
        .send(
            axum::http::Method::GET,
            "/v1/audit?limit=1",
            Some(&key),
            None,
        )
        .await;
    assert_eq!(
        audit.json["items"][0]["event"]["warnings"][0]["code"], "result_mismatch",
        "{}",
        audit.json
    );
    // Both ways data goes wrong: None from `-> str`, a string from `-> int`.
    for (source, value) in [
        ("def note() -> str:\n    return None\n", json!(null)),
        ("def count() -> int:\n    return '7'\n", json!("7")),
    ] {
        let tool = s.register(&key, json!({ "source": source })).await;
        let r = s.run(&key, &tool, json!({})).await;
        assert_eq!(
            (&r.json["status"], &r.json["value"]),
            (&json!("ok"), &value),
            "{}",
            r.json
        );
        let warning = r.json["warnings"][0]["message"]
            .as_str()
            .unwrap_or_default();
        assert!(
            warning.contains("does not match its return annotation"),
            "{}",
            r.json
        );
    }
    let strict = s
        .register(
            &key,
            json!({"source": LIAR.replace("def liar(", "def strict_liar("),
                   "limits": {"strict_results": true}}),
        )
        .await;
    let r = s.run(&key, &strict, json!({})).await;
    assert_eq!(r.json["status"], "tool_error", "{}", r.json);
    assert_eq!(r.json["error"]["type"], "ResultMismatch", "{}", r.json);
    assert!(r.json.get("warnings").is_none(), "{}", r.json);
    // A tenant whose ceilings say so has every tool strict.
    let mut ceilings = serde_json::to_value(warden::limits::Limits::default()).unwrap();
    ceilings["strict_results"] = json!(true);
    let strict_tenant = s.tenant(json!({ "ceilings": ceilings })).await;
    let liar = s.register(&strict_tenant, json!({"source": LIAR})).await;
    let r = s.run(&strict_tenant, &liar, json!({})).await;
    assert_eq!(r.json["error"]["type"], "ResultMismatch", "{}", r.json);
}

#[tokio::test]
async fn a_bad_part_is_a_tool_error() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let rich = s.register(&key, json!({"source": RICH})).await;
    let r = s.run(&key, &rich, json!({"kind": "bad"})).await;
    assert_eq!(r.json["status"], "tool_error", "{}", r.json);
    assert_eq!(r.json["error"]["type"], "InvalidContent", "{}", r.json);
    let message: &Value = &r.json["error"]["message"];
    assert!(message.as_str().unwrap().contains("not a uri"), "{message}");
}

/// A bare `-> list` (or `list[Any]`) may hold rich items: one part each, as FastMCP
/// sends them, no warning; a list of plain data under the same annotation stays data.
#[tokio::test]
async fn a_list_of_anything_holding_rich_items_is_content() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let source = r#"import typing
import warden


def mixed(rich: bool) -> list:
    if not rich:
        return [1, "two"]
    return ["a caption", warden.Image(b"\x89PNG\r\n\x1a\n"), warden.File("a,b\n", name="t.csv")]


def anything(rich: bool) -> typing.List[typing.Any]:
    return mixed(rich)
"#;
    for function in ["mixed", "anything"] {
        let tool = s
            .register(&key, json!({"source": source, "function": function}))
            .await;
        let r = s.run(&key, &tool, json!({"rich": true})).await;
        assert_eq!(r.json["status"], "ok", "{}", r.json);
        let kinds: Vec<&str> = r.json["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["type"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["text", "image", "resource"], "{}", r.json);
        assert!(r.json.get("warnings").is_none(), "{}", r.json);
        let r = s.run(&key, &tool, json!({"rich": false})).await;
        assert_eq!(r.json["value"], json!([1, "two"]), "{}", r.json);
    }
}
