use serde_json::json;
use warden::schema::{ArgumentValidator, validate_arguments};

use super::derive_ok;

const TOOL: &str = r#"
from pydantic import BaseModel

class Item(BaseModel):
    name: str
    price: float

def tool(items: list[Item], note: str = "") -> None:
    """Buy."""
"#;

#[test]
fn valid_arguments_pass() {
    let d = derive_ok(TOOL);
    let args = json!({"items": [{"name": "a", "price": 1.5}]});
    assert_eq!(validate_arguments(&d.schema, &args), Ok(()));
}

#[test]
fn wrong_type_deep_inside_reports_pointer() {
    let d = derive_ok(TOOL);
    let args = json!({"items": [{"name": "a", "price": 1}, {"name": "b", "price": 2}, {"name": "c", "price": "3"}]});
    let v = validate_arguments(&d.schema, &args).unwrap_err();
    assert_eq!(v.len(), 1);
    assert_eq!(
        v[0].to_string(),
        "/items/2/price: expected number, got string"
    );
}

#[test]
fn unknown_argument_is_rejected() {
    let d = derive_ok(TOOL);
    let v = validate_arguments(&d.schema, &json!({"items": [], "colour": "red"})).unwrap_err();
    assert_eq!(v[0].pointer, "/colour");
    assert_eq!(v[0].message, "unknown argument");
}

#[test]
fn missing_required_argument_is_rejected() {
    let d = derive_ok(TOOL);
    let v = validate_arguments(&d.schema, &json!({})).unwrap_err();
    assert_eq!(v[0].to_string(), "/items: missing required argument");
}

#[test]
fn non_object_arguments_are_a_violation_at_the_root() {
    let d = derive_ok(TOOL);
    let v = validate_arguments(&d.schema, &json!([1, 2])).unwrap_err();
    assert_eq!(v[0].pointer, "");
    assert_eq!(v[0].message, "expected object, got array");
}

#[test]
fn formats_are_asserted() {
    let d = derive_ok("import datetime\ndef tool(when: datetime.date):\n    \"\"\"Go.\"\"\"\n");
    let validator = ArgumentValidator::new(&d.schema);
    assert!(validator.validate(&json!({"when": "2024-02-30x"})).is_err());
    assert!(validator.validate(&json!({"when": "2024-02-03"})).is_ok());
}

#[test]
fn a_schema_that_does_not_compile_is_told_apart_from_bad_arguments() {
    let mut d = derive_ok("def tool(a: int):\n    \"\"\"Go.\"\"\"\n");
    assert_eq!(ArgumentValidator::new(&d.schema).compile_error(), None);
    d.schema.parameters = json!({"type": 12});
    let validator = ArgumentValidator::new(&d.schema);
    assert!(validator.compile_error().is_some());
}
