//! Hostile sources: whatever a file spells, deriving its schema ends with a schema or
//! diagnostics, never with a crash. Each source is generated at size, far past the bounds.

use std::process::Command;

use warden::schema::{Code, MAX_SOURCE, MAX_SYNTAX_DEPTH, check, derive};

use super::{derive_ok, opts};

/// Levels of nesting in the hostile sources: 25 times the depth bound.
const N: usize = 100_000;

/// What a hostile source must produce.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Expect {
    /// A `source-too-complex` error.
    TooComplex,
    /// Some error (a syntax error found before the depth could be measured).
    AnyError,
    /// A schema: the source is long but flat.
    Schema,
}

const TOOL: &str = "def tool(x: int) -> int:\n    \"\"\"Tool.\n\n    Args:\n        x: a number\n    \"\"\"\n    return x\n";

/// `(name, source, expectation)` for every spelling of depth we know of.
fn hostile(n: usize) -> Vec<(&'static str, String, Expect)> {
    use Expect::*;
    let stmt = |body: String| format!("{TOOL}y = {body}\n");
    vec![
        (
            "unary minus",
            stmt(format!("{}x", "-".repeat(n))),
            TooComplex,
        ),
        (
            "unary in f-string",
            stmt(format!("f\"{{{}x}}\"", "-".repeat(n))),
            TooComplex,
        ),
        (
            "not chain",
            stmt(format!("{}x", "not ".repeat(n))),
            TooComplex,
        ),
        (
            "binary sum",
            stmt(format!("1{}", "+1".repeat(n))),
            TooComplex,
        ),
        (
            "power chain",
            stmt(format!("2{}", "**2".repeat(n))),
            TooComplex,
        ),
        (
            "attribute chain",
            stmt(format!("a{}", ".b".repeat(n))),
            TooComplex,
        ),
        (
            "call chain",
            stmt(format!("f{}", "()".repeat(n))),
            TooComplex,
        ),
        (
            "subscript chain",
            stmt(format!("a{}", "[0]".repeat(n))),
            TooComplex,
        ),
        (
            "lambda chain",
            stmt(format!("{}1", "lambda: ".repeat(n))),
            TooComplex,
        ),
        (
            "ternary chain",
            stmt(format!("{}1", "1 if x else ".repeat(n))),
            TooComplex,
        ),
        // Not Python (`await` takes a primary), but the parser must say so without crashing.
        (
            "await chain",
            format!("{TOOL}async def g():\n    {}x\n", "await ".repeat(n)),
            AnyError,
        ),
        // Past the size cap (within it, a chain is flat: the parser keeps `elif`s in a list).
        (
            "elif chain",
            format!("{TOOL}if x:\n    pass\n{}", "elif x:\n    pass\n".repeat(n)),
            TooComplex,
        ),
        (
            "nested subscripts",
            stmt(format!("{}0{}", "a[".repeat(n), "]".repeat(n))),
            TooComplex,
        ),
        (
            "nested parentheses",
            stmt(format!("{}1{}", "(".repeat(n), ")".repeat(n))),
            TooComplex,
        ),
        (
            "nested lists",
            stmt(format!("{}1{}", "[".repeat(n), "]".repeat(n))),
            TooComplex,
        ),
        (
            "nested comprehensions",
            stmt(format!("{}0{}", "[x for x in ".repeat(n), "]".repeat(n))),
            TooComplex,
        ),
        (
            "nested assignment target",
            format!("{TOOL}{}a{} = b\n", "[".repeat(n), "]".repeat(n)),
            TooComplex,
        ),
        (
            "brackets in f-string",
            stmt(format!("f\"{{{}1{}}}\"", "(".repeat(n), ")".repeat(n))),
            TooComplex,
        ),
        (
            "comprehension target in f-string",
            stmt(format!(
                "f\"{{[0 for {}a{} in b]}}\"",
                "[".repeat(n),
                "]".repeat(n)
            )),
            TooComplex,
        ),
        (
            "nested f-strings",
            stmt(format!(
                "f\"\"\"{{f'''{{f\"{{f'{{{}x}}'}}\"}}'''}}\"\"\"",
                "-".repeat(n)
            )),
            TooComplex,
        ),
        (
            "f-string format spec",
            stmt(format!("f\"{{x:{{{}y}}}}\"", "-".repeat(n))),
            TooComplex,
        ),
        (
            "nested defs",
            (0..n.min(5000))
                .map(|i| format!("{}def f{i}():\n", " ".repeat(i)))
                .collect::<String>()
                + &" ".repeat(n.min(5000))
                + "pass\n"
                + TOOL,
            TooComplex,
        ),
        (
            "nested classes",
            (0..n.min(5000))
                .map(|i| format!("{}class C{i}:\n", "\t".repeat(i)))
                .collect::<String>()
                + &"\t".repeat(n.min(5000))
                + "pass\n"
                + TOOL,
            TooComplex,
        ),
        (
            "deep annotation",
            format!(
                "def tool(x: {}int{}):\n    pass\n",
                "list[".repeat(n),
                "]".repeat(n)
            ),
            TooComplex,
        ),
        (
            "deep string annotation",
            format!("def tool(x: \"{}int\"):\n    pass\n", "-".repeat(990)),
            AnyError,
        ),
        (
            "deep default",
            format!("def tool(x: int = {}1):\n    pass\n", "-".repeat(n)),
            TooComplex,
        ),
        (
            "unary then syntax error",
            stmt(format!("{}x +", "-".repeat(n))),
            AnyError,
        ),
        (
            "sum then syntax error",
            stmt(format!("1{} +", "+1".repeat(n))),
            AnyError,
        ),
        (
            "chained comparison",
            stmt(format!("1{}", " < 1".repeat(n))),
            Schema,
        ),
        (
            "boolean chain",
            stmt(format!("x{}", " and x".repeat(n))),
            Schema,
        ),
        ("string concatenation", stmt("'a' ".repeat(n)), Schema),
        ("decorators", format!("{}{TOOL}", "@d\n".repeat(n)), Schema),
        ("long list", stmt(format!("[{}]", "1, ".repeat(n))), Schema),
    ]
}

fn check_outcome(name: &str, source: &str, expect: Expect) {
    let derived = derive(source, &opts("tool"));
    match (expect, &derived) {
        (Expect::Schema, Ok(_)) => {}
        (Expect::AnyError, Err(e)) if !e.diagnostics().is_empty() => {}
        (Expect::TooComplex, Err(e))
            if e.diagnostics()
                .iter()
                .any(|d| d.code == Code::SourceTooComplex) => {}
        _ => {
            let got = format!("{:?}", derived.map_err(|e| e.diagnostics().to_vec()));
            panic!("{name}: expected {expect:?}, got {}", cut(&got));
        }
    }
    // `warden validate` goes through the same guarded path.
    let diagnostics = check(source, &opts("tool"));
    if expect == Expect::TooComplex {
        assert!(
            diagnostics.iter().any(|d| d.code == Code::SourceTooComplex),
            "{name}: check: {}",
            cut(&format!("{diagnostics:?}"))
        );
    }
}

/// The first 2,000 characters of a failure message (the sources are huge).
fn cut(text: &str) -> String {
    text.chars().take(2000).collect()
}

#[test]
fn hostile_sources_get_diagnostics_not_crashes() {
    for (name, source, expect) in hostile(N) {
        check_outcome(name, &source, expect);
    }
}

#[test]
fn hostile_sources_at_the_size_cap_get_diagnostics_not_crashes() {
    // The deepest trees a file within the size cap can build: the stack of the analysis
    // thread must hold them while the parser builds and drops them.
    let room = usize::try_from(MAX_SOURCE.as_u64()).unwrap() - TOOL.len() - 32;
    let cases = [
        (
            "unary minus",
            format!("{TOOL}y = {}x\n", "-".repeat(room)),
            Expect::TooComplex,
        ),
        (
            "unary then syntax error",
            format!("{TOOL}y = {}x +\n", "-".repeat(room)),
            Expect::AnyError,
        ),
        (
            "unary in f-string",
            format!("{TOOL}y = f\"{{{}x}}\"\n", "-".repeat(room)),
            Expect::TooComplex,
        ),
        (
            "call chain",
            format!("{TOOL}y = f{}\n", "()".repeat(room / 2)),
            Expect::TooComplex,
        ),
        (
            "elif chain",
            format!("{TOOL}if x:\n pass\n{}", "elif x:pass\n".repeat(room / 12)),
            Expect::Schema,
        ),
        (
            "binary sum",
            format!("{TOOL}y = 1{}\n", "+1".repeat(room / 2)),
            Expect::TooComplex,
        ),
        (
            "lambda chain with parameters",
            format!("{TOOL}y = {}1\n", "lambda a, b: ".repeat(room / 13)),
            Expect::TooComplex,
        ),
    ];
    for (name, source, expect) in cases {
        assert!(source.len() as u64 <= MAX_SOURCE.as_u64(), "{name}");
        check_outcome(name, &source, expect);
    }
    let over = format!("{TOOL}#{}\n", "x".repeat(room + 64));
    let err = derive(&over, &opts("tool")).unwrap_err();
    assert_eq!(err.diagnostics()[0].code, Code::SourceTooComplex);
    assert!(err.diagnostics()[0].message.contains("bytes"), "{err}");
}

#[test]
fn too_deep_source_is_refused_at_the_culprit() {
    let source = format!("{TOOL}\n\ny = {}x\n", "-".repeat(N));
    let err = derive(&source, &opts("tool")).unwrap_err();
    let d = &err.diagnostics()[0];
    assert_eq!(d.code, Code::SourceTooComplex);
    assert_eq!(d.line, 10, "{d:?}");
    assert!(
        d.message
            .contains(&format!("more than {MAX_SYNTAX_DEPTH} levels")),
        "{}",
        d.message
    );
}

#[test]
fn deep_but_sane_code_still_derives() {
    let sane = [
        format!("{TOOL}y = {}1{}\n", "(".repeat(50), ")".repeat(50)),
        format!("{TOOL}y = {}1{}\n", "[".repeat(50), "]".repeat(50)),
        format!(
            "{TOOL}def g(x):\n    if x == 0:\n        return 0\n{}",
            (1..300)
                .map(|i| format!("    elif x == {i}:\n        return {i}\n"))
                .collect::<String>()
        ),
        format!("{TOOL}y = 1{}\n", " + 1".repeat(2000)),
        format!("{TOOL}y = a{}\n", ".b".repeat(1000)),
        format!("{TOOL}y = {}x\n", "not ".repeat(1000)),
        format!("{TOOL}y = f\"{{{}x}}\"\n", "-".repeat(1000)),
        // Operators end at a comma: a table of negative numbers has one open at a time.
        format!("{TOOL}TABLE = [{}]\n", "-1.5, ".repeat(10_000)),
        format!(
            "{TOOL}HANDLERS = {{{}}}\n",
            (0..1000)
                .map(|i| format!("'k{i}': lambda v: -v, "))
                .collect::<String>()
        ),
        format!("{TOOL}y = {}0\n", "1 if x else ".repeat(300)),
        (0..90)
            .map(|i| format!("{}if x:\n", "    ".repeat(i)))
            .collect::<String>()
            + &"    ".repeat(90)
            + "pass\n"
            + TOOL,
    ];
    for source in &sane {
        assert_eq!(derive_ok(source).schema.name, "tool");
    }
}

/// Every spelling the parser might read by recursion, and some it reads by loops, each
/// repeated to fill the size cap, as a statement and as an operand.
const REPEATED: &[&str] = &[
    "-",
    "+",
    "~",
    "not ",
    "*",
    "**",
    "await ",
    "yield ",
    "yield from ",
    "lambda: ",
    "lambda a, b=1: ",
    "lambda *a: ",
    "x if y else ",
    "2 ** ",
    "-x ** ",
    "x := ",
    "(",
    "[",
    "{",
    "f'{",
    "f\"{x:{",
    "t'{",
    "rb'{",
    "@",
    "@d\n",
    "if x: ",
    "while x: ",
    "for x in y: ",
    "with x: ",
    "try: ",
    "class C: ",
    "def f(): ",
    "async def f(): ",
    "match x:\n case 1: ",
    "case 1: ",
    "else: ",
    "elif x: ",
    "except: ",
    "finally: ",
    "x.",
    "x[0]",
    "x()",
    "1 + ",
    "a and ",
    "a < ",
    "return ",
    "del ",
    "assert ",
    "raise ",
    "global x; ",
    "pass; ",
    "x = ",
    "x += ",
    "*a, ",
    "a, ",
    "print(x) if x else ",
    "\\\n",
    "import ",
    "from ",
    " ",
    "\t",
    "#",
    "'",
    "\"\"\"",
    "a not in ",
    "a is not ",
    "type X = ",
    "def f[T](): ",
    "\n ",
];

#[test]
fn any_spelling_repeated_to_the_size_cap_gets_a_schema_or_diagnostics() {
    let room = usize::try_from(MAX_SOURCE.as_u64()).unwrap() - TOOL.len() - 32;
    for piece in REPEATED {
        let many = piece.repeat(room / piece.len() - 8);
        for source in [format!("{TOOL}{many}x\n"), format!("{TOOL}y = {many}x\n")] {
            // A crash (a stack overflow) would end the whole test binary here.
            let derived = derive(&source, &opts("tool"));
            if let Err(e) = &derived {
                assert!(!e.diagnostics().is_empty(), "{piece:?}");
            }
        }
    }
}

#[test]
fn the_schema_command_refuses_hostile_sources_without_crashing() {
    let dir = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    for (i, (name, source, expect)) in hostile(N).into_iter().enumerate() {
        // One spelling of each kind is enough for the binary; the library test covers all.
        if i % 3 != 0 && expect != Expect::TooComplex {
            continue;
        }
        let path = dir.path().join("tool.py");
        std::fs::write(&path, &source).unwrap();
        let o = Command::new(env!("CARGO_BIN_EXE_warden"))
            .args(["schema", path.to_str().unwrap(), "--format", "openai"])
            .env("WARDEN_HOME", home.path())
            .env_remove("WARDEN_LOG")
            .output()
            .unwrap();
        let stderr = cut(&String::from_utf8_lossy(&o.stderr));
        let code = o.status.code();
        match expect {
            Expect::Schema => assert_eq!(code, Some(0), "{name}: {stderr}"),
            Expect::AnyError => assert_eq!(code, Some(2), "{name}: {stderr}"),
            Expect::TooComplex => {
                assert_eq!(code, Some(2), "{name}: {stderr}");
                assert!(stderr.contains("source-too-complex"), "{name}: {stderr}");
            }
        }
    }
}

#[test]
fn a_diagnostic_on_a_long_line_quotes_a_window_of_it() {
    let source = format!("{TOOL}y = {}x\n", "-".repeat(N));
    let err = derive(&source, &opts("tool")).unwrap_err();
    let text = err.diagnostics()[0].render(&source, "tool.py");
    assert!(text.len() < 1000, "{}", cut(&text));
    assert!(
        text.contains("| ...---") && text.contains("---...\n"),
        "{text}"
    );
}

#[test]
fn a_docstring_type_nested_past_the_bound_is_any_value_never_a_crash() {
    // Five times the depth bound, in a file under the size bound.
    let n = 5 * MAX_SYNTAX_DEPTH;
    let deep = format!("list{}{}", "[list".repeat(n), "]".repeat(n));
    let braces = "{".repeat(n);
    for (style, doc) in [
        (
            "numpy",
            format!(
                "Deep.\n\n    Parameters\n    ----------\n    q : {deep}\n        Q.\n\n    Returns\n    -------\n    {deep}\n    "
            ),
        ),
        (
            "google",
            format!(
                "Deep.\n\n    Args:\n        q ({deep}): Q.\n\n    Returns:\n        {braces}: x\n    "
            ),
        ),
    ] {
        let source = format!("def tool(q):\n    \"\"\"{doc}\"\"\"\n    return q\n");
        let derived = derive_ok(&source);
        let schema = serde_json::to_value(&derived.schema).unwrap();
        let q = &schema["parameters"]["properties"]["q"];
        assert!(
            q.is_object() && q.get("type").is_none(),
            "{style}: {schema}"
        );
        assert!(schema["returns"].get("type").is_none(), "{style}: {schema}");
    }
}
