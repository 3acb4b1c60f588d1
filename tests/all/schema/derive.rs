use serde_json::json;
use warden::schema::{Code, DeriveOptions, Severity, derive};

use super::{derive_ok, opts};

const TOOL: &str = r#"
from typing import Optional

def tool(a: str, b: Optional[int], c: int = 3, *, d: bool = False) -> str:
    """Do a thing.

    Args:
        a: First.
        b: Second.
        c: Third.
        d: Fourth.
    """
    return a
"#;

#[test]
fn optional_parameter_is_not_required() {
    let d = derive_ok(TOOL);
    assert_eq!(d.schema.parameters["required"], json!(["a"]));
    assert_eq!(
        d.schema.parameters["properties"]["b"]["type"],
        json!("integer")
    );
}

#[test]
fn parameter_with_default_is_not_required_and_shows_default() {
    let d = derive_ok(TOOL);
    assert_eq!(d.schema.parameters["properties"]["c"]["default"], json!(3));
    assert_eq!(
        d.schema.parameters["properties"]["d"]["default"],
        json!(false)
    );
}

#[test]
fn parameters_keep_signature_order() {
    let d = derive_ok(TOOL);
    let keys: Vec<&String> = d.schema.parameters["properties"]
        .as_object()
        .unwrap()
        .keys()
        .collect();
    assert_eq!(keys, ["a", "b", "c", "d"]);
}

#[test]
fn description_excludes_parameter_sections() {
    let d = derive_ok(TOOL);
    assert_eq!(d.schema.description, "Do a thing.");
    assert!(d.diagnostics.is_empty(), "{:?}", d.diagnostics);
}

#[test]
fn function_option_selects_a_function() {
    let src = "def a(x: int):\n    pass\n\ndef b(y: str):\n    pass\n";
    let o = DeriveOptions {
        file_stem: "zzz".into(),
        function: Some("b".into()),
    };
    let d = derive(src, &o).unwrap();
    assert_eq!(d.schema.name, "b");
}

#[test]
fn missing_requested_function_lists_candidates() {
    let src = "def a(x: int):\n    pass\n";
    let o = DeriveOptions {
        file_stem: "zzz".into(),
        function: Some("nope".into()),
    };
    let err = derive(src, &o).unwrap_err();
    let d = &err.diagnostics()[0];
    assert_eq!(d.code, Code::FunctionNotFound);
    assert!(d.message.contains("`a`"), "{}", d.message);
}

#[test]
fn deeply_nested_source_is_rejected_without_crashing() {
    let src = format!("x = {}1{}\n", "(".repeat(5000), ")".repeat(5000));
    let err = derive(&src, &opts("tool")).unwrap_err();
    assert_eq!(err.diagnostics()[0].code, Code::SourceTooComplex);
    let src = format!("x = 1{}\n", " + 1".repeat(20000));
    let err = derive(&src, &opts("tool")).unwrap_err();
    assert_eq!(err.diagnostics()[0].code, Code::SourceTooComplex);
}

#[test]
fn error_message_is_lower_case_and_says_what_to_do() {
    let err = derive("def tool(x: Frobnicator):\n    pass\n", &opts("tool")).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("no schema can be derived"), "{text}");
    assert!(text.contains("fix the reported errors"), "{text}");
    assert!(
        err.diagnostics()
            .iter()
            .any(|d| d.severity == Severity::Error)
    );
}

#[test]
fn diagnostic_renders_compiler_style() {
    let src = "def tool(x: Foo):\n    pass\n";
    let err = derive(src, &opts("tool")).unwrap_err();
    let d = err
        .diagnostics()
        .iter()
        .find(|d| d.severity == Severity::Error)
        .unwrap();
    let text = d.render(src, "tool.py");
    assert_eq!(
        text,
        "error[unknown-type]: unknown type `Foo`\n --> tool.py:1:13\n  |\n1 | def tool(x: Foo):\n  |             ^^^\n  = hint: import it, or define it in this file as an Enum, TypedDict, dataclass or pydantic model\n"
    );
}

#[test]
fn return_type_becomes_output_schema_with_description() {
    let src = "def tool(x: int) -> list[int]:\n    \"\"\"Go.\n\n    Args:\n        x: X.\n\n    Returns:\n        The numbers.\n    \"\"\"\n";
    let d = derive_ok(src);
    assert_eq!(
        d.schema.returns,
        Some(json!({"type": "array", "items": {"type": "integer"}, "description": "The numbers."}))
    );
}

#[test]
fn model_used_by_parameter_and_return_is_defined_in_both() {
    let src = "from pydantic import BaseModel\nclass M(BaseModel):\n    a: int\ndef tool(m: M) -> M:\n    \"\"\"Go.\n\n    Args:\n        m: M.\n    \"\"\"\n";
    let d = derive_ok(src);
    assert!(d.schema.parameters["$defs"]["M"].is_object());
    assert_eq!(
        d.schema.returns.as_ref().unwrap()["$ref"],
        json!("#/$defs/M")
    );
    assert!(d.schema.returns.as_ref().unwrap()["$defs"]["M"].is_object());
}

#[test]
fn epydoc_fields_describe_parameters_and_the_return_value() {
    let d = derive_ok(
        r#"
def tool(path: str, *, depth: int = 1) -> int:
    """Count files.

    @param path: Folder to count in.
    @type path: str
    @keyword depth: How deep to go,
        1 for the folder only.
    @rtype: int
    @return: The count.
    @see: os.walk
    """
    return 0
"#,
    );
    let properties = &d.schema.parameters["properties"];
    assert_eq!(
        properties["path"]["description"],
        json!("Folder to count in.")
    );
    assert_eq!(
        properties["depth"]["description"],
        json!("How deep to go,\n1 for the folder only.")
    );
    assert_eq!(d.schema.description, "Count files.");
    assert_eq!(
        d.schema.returns.as_ref().map(|r| &r["description"]),
        Some(&json!("The count."))
    );
    assert!(d.diagnostics.is_empty(), "{:?}", d.diagnostics);
}

#[test]
fn an_at_sign_in_a_google_docstring_is_not_epydoc() {
    let d = derive_ok(
        r#"
def tool(user: str) -> str:
    """Greet a user.

    Mention them as @user: the handle without the sign.

    Args:
        user: The handle.
    """
    return user
"#,
    );
    assert_eq!(
        d.schema.parameters["properties"]["user"]["description"],
        json!("The handle.")
    );
}
