use serde_json::json;
use warden::schema::{
    Format, HealthClass, LettaExtras, PipRequirement, SchemaError, classify, export,
};

use super::derive_ok;

const TOOL: &str = r#"
from typing import Optional
from pydantic import BaseModel, Field

class Point(BaseModel):
    """A point."""
    x: float = Field(..., description="X.")
    y: float = Field(0.0, description="Y.")

def tool(p: Point, label: Optional[str] = None) -> float:
    """Measure.

    Args:
        p: The point.
        label: A label.
    """
    return 0.0
"#;

#[test]
fn format_parses_from_cli_names() {
    for name in ["json-schema", "openai", "anthropic", "mcp", "letta"] {
        assert_eq!(name.parse::<Format>().unwrap().as_str(), name);
    }
    let err = "yaml".parse::<Format>().unwrap_err();
    assert!(err.to_string().starts_with("unknown export format `yaml`"));
}

#[test]
fn openai_export_wraps_function() {
    let d = derive_ok(TOOL);
    let v = export(&d.schema, Format::OpenAi, false, &LettaExtras::default()).unwrap();
    assert_eq!(v["type"], json!("function"));
    assert_eq!(v["function"]["name"], json!("tool"));
    assert_eq!(v["function"]["strict"], json!(false));
    assert_eq!(v["function"]["parameters"], d.schema.parameters);
}

#[test]
fn strict_export_makes_optional_parameters_required_and_nullable() {
    let d = derive_ok(TOOL);
    let v = export(&d.schema, Format::OpenAi, true, &LettaExtras::default()).unwrap();
    let p = &v["function"]["parameters"];
    assert_eq!(v["function"]["strict"], json!(true));
    assert_eq!(p["required"], json!(["p", "label"]));
    assert_eq!(
        p["properties"]["label"],
        json!({"type": ["string", "null"], "description": "A label."})
    );
    assert_eq!(p["$defs"]["Point"]["required"], json!(["x", "y"]));
    assert_eq!(
        p["$defs"]["Point"]["properties"]["y"],
        json!({"type": ["number", "null"], "description": "Y."})
    );
    assert_eq!(
        classify(p).class,
        HealthClass::StrictCompliant,
        "{:?}",
        classify(p).reasons
    );
    assert!(
        p["properties"]["p"].get("$ref").is_none(),
        "a $ref with a description is inlined"
    );
}

#[test]
fn strict_export_fails_clearly_without_a_strict_variant() {
    let d = derive_ok("def tool(a: dict[str, int]):\n    \"\"\"Go.\"\"\"\n");
    let err = export(&d.schema, Format::OpenAi, true, &LettaExtras::default()).unwrap_err();
    assert!(matches!(err, SchemaError::NoStrictVariant { .. }));
    let text = err.to_string();
    assert!(
        text.contains("no strict-mode schema") && text.contains("dict[str, T]"),
        "{text}"
    );
}

#[test]
fn anthropic_export_uses_input_schema() {
    let d = derive_ok(TOOL);
    let v = export(&d.schema, Format::Anthropic, false, &LettaExtras::default()).unwrap();
    assert_eq!(
        v,
        json!({"name": "tool", "description": "Measure.", "input_schema": d.schema.parameters})
    );
}

#[test]
fn json_schema_export_has_title_and_defs() {
    let d = derive_ok(TOOL);
    let v = export(
        &d.schema,
        Format::JsonSchema,
        false,
        &LettaExtras::default(),
    )
    .unwrap();
    assert_eq!(v["title"], json!("tool"));
    assert_eq!(
        v["$schema"],
        json!("https://json-schema.org/draft/2020-12/schema")
    );
    assert!(v["$defs"]["Point"].is_object());
}

#[test]
fn mcp_export_wraps_non_object_output() {
    let d = derive_ok(TOOL);
    let v = export(&d.schema, Format::Mcp, false, &LettaExtras::default()).unwrap();
    assert_eq!(
        v["outputSchema"],
        json!({"type": "object", "properties": {"result": {"type": "number"}}, "required": ["result"]})
    );
    assert_eq!(v["inputSchema"], d.schema.parameters);
}

#[test]
fn mcp_export_keeps_object_output() {
    let d = derive_ok(
        "from typing import TypedDict\nclass R(TypedDict):\n    n: int\ndef tool() -> R:\n    \"\"\"Go.\"\"\"\n",
    );
    let v = export(&d.schema, Format::Mcp, false, &LettaExtras::default()).unwrap();
    assert_eq!(v["outputSchema"]["$ref"], json!("#/$defs/R"));
    // MCP requires an object root; the $ref alone does not say so.
    assert_eq!(v["outputSchema"]["type"], json!("object"));
    assert!(v["outputSchema"]["$defs"]["R"].is_object());
}

#[test]
fn letta_export_is_a_letta_tool_with_inlined_models() {
    let d = derive_ok(TOOL);
    let extras = LettaExtras {
        source_code: TOOL.into(),
        tags: vec!["geo".into()],
        pip_requirements: vec![PipRequirement {
            name: "numpy".into(),
            version: Some("2.0".into()),
        }],
        ..LettaExtras::default()
    };
    let v = export(&d.schema, Format::Letta, false, &extras).unwrap();
    assert_eq!(v["source_type"], json!("python"));
    assert_eq!(v["tool_type"], json!("custom"));
    assert_eq!(v["return_char_limit"], json!(50000));
    assert_eq!(v["tags"], json!(["geo"]));
    assert_eq!(
        v["pip_requirements"],
        json!([{"name": "numpy", "version": "2.0"}])
    );
    assert_eq!(v["source_code"], json!(TOOL));
    let p = &v["json_schema"]["parameters"]["properties"]["p"];
    assert_eq!(p["type"], json!("object"));
    assert_eq!(p["description"], json!("The point."));
    assert!(v["json_schema"]["parameters"].get("$defs").is_none());
}

#[test]
fn letta_export_keeps_recursive_definitions() {
    let src = "from pydantic import BaseModel\nclass N(BaseModel):\n    kids: list['N']\ndef tool(n: N):\n    \"\"\"Go.\"\"\"\n";
    let d = derive_ok(src);
    let v = export(&d.schema, Format::Letta, false, &LettaExtras::default()).unwrap();
    let params = &v["json_schema"]["parameters"];
    assert_eq!(
        params["properties"]["n"]["properties"]["kids"]["items"],
        json!({"$ref": "#/$defs/N"})
    );
    assert!(params["$defs"]["N"].is_object());
}

#[test]
fn letta_export_rejects_out_of_range_char_limit() {
    let d = derive_ok(TOOL);
    let extras = LettaExtras {
        return_char_limit: 0,
        ..LettaExtras::default()
    };
    let err = export(&d.schema, Format::Letta, false, &extras).unwrap_err();
    assert!(err.to_string().contains("return_char_limit"));
}
