use serde_json::json;
use warden::schema::{HealthClass, classify, health};

use super::derive_ok;

#[test]
fn all_required_tool_is_strict_compliant() {
    let d = derive_ok("def tool(a: int, b: list[str]):\n    \"\"\"Go.\"\"\"\n");
    let h = health(&d.schema);
    assert_eq!(h.class, HealthClass::StrictCompliant, "{:?}", h.reasons);
}

#[test]
fn optional_parameter_makes_schema_non_strict() {
    let d = derive_ok("def tool(a: int = 1):\n    \"\"\"Go.\"\"\"\n");
    let h = health(&d.schema);
    assert_eq!(h.class, HealthClass::NonStrictOnly);
    assert!(
        h.reasons
            .iter()
            .any(|r| r.contains("#/properties/a") && r.contains("optional")),
        "{:?}",
        h.reasons
    );
}

#[test]
fn free_form_dict_is_non_strict() {
    let d = derive_ok("def tool(a: dict[str, int]):\n    \"\"\"Go.\"\"\"\n");
    assert_eq!(health(&d.schema).class, HealthClass::NonStrictOnly);
}

#[test]
fn root_that_is_not_an_object_is_invalid() {
    let h = classify(&json!({"type": "string"}));
    assert_eq!(h.class, HealthClass::Invalid);
    let h = classify(&json!({"anyOf": [{"type": "object"}]}));
    assert_eq!(h.class, HealthClass::Invalid);
}

#[test]
fn dangling_ref_is_invalid() {
    let h = classify(
        &json!({"type": "object", "properties": {"a": {"$ref": "#/$defs/Nope"}}, "required": ["a"], "additionalProperties": false}),
    );
    assert_eq!(h.class, HealthClass::Invalid);
}

#[test]
fn unsupported_keyword_is_non_strict() {
    let h = classify(
        &json!({"type": "object", "properties": {"a": {"type": "string", "minLength": 2}}, "required": ["a"], "additionalProperties": false}),
    );
    assert_eq!(h.class, HealthClass::NonStrictOnly);
    assert!(h.reasons[0].contains("minLength"));
}

#[test]
fn too_deep_nesting_is_non_strict() {
    let mut s = json!({"type": "string"});
    for _ in 0..11 {
        s = json!({"type": "object", "properties": {"x": s}, "required": ["x"], "additionalProperties": false});
    }
    let h = classify(&s);
    assert_eq!(h.class, HealthClass::NonStrictOnly);
    assert!(h.reasons.iter().any(|r| r.contains("levels")));
}

#[test]
fn health_class_serializes_in_screaming_case() {
    assert_eq!(
        serde_json::to_value(HealthClass::NonStrictOnly).unwrap(),
        json!("NON_STRICT_ONLY")
    );
    assert_eq!(
        serde_json::to_value(HealthClass::StrictCompliant).unwrap(),
        json!("STRICT_COMPLIANT")
    );
}
