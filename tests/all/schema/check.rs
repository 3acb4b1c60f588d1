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
    let src =
        "def tool(a: int = 1) -> int:\n    \"\"\"Go.\n\n    Args:\n        a: A.\n    \"\"\"\n";
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
    let src = "def tool(a: int) -> int:\n    \"\"\"Go.\n\n    Args:\n        a: A.\n    \"\"\"\n";
    assert!(check(src, &opts("tool")).is_empty());
}

#[test]
fn missing_annotations_are_warnings_that_say_what_the_schema_assumed() {
    let src = "def tool(a, b):\n    \"\"\"Go.\n\n    Args:\n        a (int): A.\n        b: B.\n    \"\"\"\n";
    let diags = check(src, &opts("tool"));
    let missing: Vec<&str> = diags
        .iter()
        .filter(|d| d.code == Code::MissingAnnotation)
        .map(|d| d.message.as_str())
        .collect();
    assert!(
        diags.iter().all(|d| d.severity == Severity::Warning),
        "{diags:?}"
    );
    assert_eq!(missing.len(), 3, "{missing:?}");
    assert!(
        missing
            .iter()
            .any(|m| m.contains("`a`") && m.contains("docstring (`int`)"))
    );
    assert!(
        missing
            .iter()
            .any(|m| m.contains("`b`") && m.contains("any JSON value"))
    );
    assert!(missing.iter().any(|m| m.contains("no return annotation")));
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
