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

#[tokio::test]
async fn a_result_against_its_annotation_or_a_bad_part_is_a_tool_error() {
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let liar = s.register(&key, json!({"source": LIAR})).await;
    let r = s.run(&key, &liar, json!({})).await;
    assert_eq!(r.json["status"], "tool_error", "{}", r.json);
    assert_eq!(r.json["error"]["type"], "ResultMismatch", "{}", r.json);
    let rich = s.register(&key, json!({"source": RICH})).await;
    let r = s.run(&key, &rich, json!({"kind": "bad"})).await;
    assert_eq!(r.json["status"], "tool_error", "{}", r.json);
    assert_eq!(r.json["error"]["type"], "InvalidContent", "{}", r.json);
    let message: &Value = &r.json["error"]["message"];
    assert!(message.as_str().unwrap().contains("not a uri"), "{message}");
}
