use warden::schema::{Code, Severity, check};

use super::opts;

#[test]
fn check_reports_all_problems_at_once() {
    let src = "def tool(a, b: Foo, *rest, c: int):\n    pass\n";
    let codes: Vec<Code> = check(src, &opts("tool")).iter().map(|d| d.code).collect();
    for code in [
        Code::MissingDocstring,
        Code::MissingAnnotation,
        Code::UnknownType,
        Code::VariadicParameter,
        Code::UndocumentedParameter,
    ] {
        assert!(codes.contains(&code), "{code} missing from {codes:?}");
    }
}

#[test]
fn check_warns_when_schema_is_not_strict_compliant() {
    let src = "def tool(a: int = 1):\n    \"\"\"Go.\n\n    Args:\n        a: A.\n    \"\"\"\n";
    let diags = check(src, &opts("tool"));
    assert_eq!(diags.len(), 1, "{diags:?}");
    assert_eq!(diags[0].code, Code::NotStrictCompliant);
    assert_eq!(diags[0].severity, Severity::Warning);
    assert!(
        diags[0]
            .hint
            .as_deref()
            .unwrap()
            .contains("export with strict mode")
    );
}

#[test]
fn clean_tool_has_no_diagnostics() {
    let src = "def tool(a: int):\n    \"\"\"Go.\n\n    Args:\n        a: A.\n    \"\"\"\n";
    assert!(check(src, &opts("tool")).is_empty());
}

#[test]
fn undocumented_parameter_is_reported() {
    let src = "def tool(a: int, b: str):\n    \"\"\"Go.\n\n    Args:\n        a: A.\n    \"\"\"\n";
    let diags = check(src, &opts("tool"));
    assert!(
        diags
            .iter()
            .any(|d| d.code == Code::UndocumentedParameter && d.message.contains("`b`"))
    );
}
