//! Fuzzing the deriver: whatever the source, `derive`, `check`, `health` and every export
//! return (a schema or diagnostics) within a time bound, and never panic or overflow.
//!
//! Inputs are arbitrary text and bytes, Python generated from a small grammar (functions with
//! annotations, defaults and docstrings; Enum, TypedDict, dataclass and pydantic models;
//! f-strings; deep nesting; unicode), and the fixture files truncated and mutated.
//!
//! `cargo test` runs it for a few seconds. `make fuzz` (or `WARDEN_FUZZ_SECS=1800 cargo test
//! --test all schema::fuzz -- --nocapture`) runs it for longer; each case is then written to
//! `target/fuzz-schema-case.py` before it runs, so that a crash which kills the process (a
//! stack overflow aborts it) leaves its input behind.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use proptest::prelude::*;
use proptest::strategy::ValueTree;
use proptest::test_runner::{Config, TestRng, TestRunner};
use warden::schema::{Format, LettaExtras, check, derive, export, health};

use super::opts;

/// Longest one case may take (debug build, shared machine): far above the ~10 ms a case
/// takes, far below "stalls".
const CASE_BOUND: Duration = Duration::from_secs(20);

fn fixtures() -> Vec<String> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema");
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "py"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| std::fs::read_to_string(p).unwrap())
        .collect()
}

/// A type annotation.
fn annotation() -> impl Strategy<Value = String> {
    let leaf = prop_oneof![
        Just("int".to_string()),
        Just("str".to_string()),
        Just("float".to_string()),
        Just("bool".to_string()),
        Just("None".to_string()),
        Just("bytes".to_string()),
        Just("Any".to_string()),
        Just("datetime".to_string()),
        Just("UUID".to_string()),
        Just("dict".to_string()),
        Just("Unknown".to_string()),
        (0..4u8).prop_map(|i| format!("C{i}")),
        (0..4u8).prop_map(|i| format!("\"C{i}\"")),
        "[a-zA-Zé_][a-zA-Z0-9_ü]{0,6}",
        prop::collection::vec(
            prop_oneof![
                any::<i64>().prop_map(|i| i.to_string()),
                "[a-z ]{0,5}".prop_map(|s| format!("\"{s}\"")),
                Just("True".into()),
                Just("None".into()),
                Just("-1.5".into()),
                Just("b'x'".into())
            ],
            0..5
        )
        .prop_map(|vs| format!("Literal[{}]", vs.join(", "))),
    ];
    leaf.prop_recursive(6, 48, 4, |inner| {
        prop_oneof![
            inner.clone().prop_map(|t| format!("list[{t}]")),
            inner.clone().prop_map(|t| format!("List[{t}]")),
            inner.clone().prop_map(|t| format!("set[{t}]")),
            inner.clone().prop_map(|t| format!("dict[str, {t}]")),
            inner.clone().prop_map(|t| format!("dict[int, {t}]")),
            inner.clone().prop_map(|t| format!("Optional[{t}]")),
            inner.clone().prop_map(|t| format!("tuple[{t}, ...]")),
            inner.clone().prop_map(|t| format!("\"{t}\"")),
            inner
                .clone()
                .prop_map(|t| format!("Annotated[{t}, \"described\"]")),
            inner
                .clone()
                .prop_map(|t| format!("Annotated[{t}, Field(ge=1, description=\"d\")]")),
            (inner.clone(), inner.clone()).prop_map(|(a, b)| format!("{a} | {b}")),
            prop::collection::vec(inner.clone(), 0..4)
                .prop_map(|ts| format!("Union[{}]", ts.join(", "))),
            prop::collection::vec(inner, 0..4).prop_map(|ts| format!("tuple[{}]", ts.join(", "))),
        ]
    })
}

/// A default value, sometimes not a literal.
fn default() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("None".to_string()),
        any::<i32>().prop_map(|i| i.to_string()),
        "[a-z]{0,4}".prop_map(|s| format!("'{s}'")),
        Just("[1, 2]".to_string()),
        Just("{'a': -1}".to_string()),
        Just("C0.A".to_string()),
        Just("field(default_factory=list)".to_string()),
        Just("Field(default=3, description='x', le=10)".to_string()),
        Just("f()".to_string()),
    ]
}

/// Statements that nest: depth sometimes past the bound.
fn nesting() -> impl Strategy<Value = String> {
    (0usize..6, 1usize..6000).prop_map(|(kind, n)| match kind {
        0 => format!("y = {}x\n", "-".repeat(n)),
        1 => format!("y = f\"{{{}x}}\"\n", "~".repeat(n)),
        2 => format!("y = 1{}\n", "+1".repeat(n)),
        3 => format!(
            "if x:\n    pass\n{}",
            "elif x:\n    pass\n".repeat(n.min(4500))
        ),
        4 => format!("y = {}1\n", "lambda: ".repeat(n.min(4500))),
        _ => format!("y = {}0{}\n", "[".repeat(n % 260), "]".repeat(n % 260)),
    })
}

fn class() -> impl Strategy<Value = String> {
    (
        0..4u8,
        0usize..5,
        prop::collection::vec(
            (
                "[a-z][a-z0-9_]{0,5}",
                annotation(),
                prop::option::of(default()),
            ),
            0..5,
        ),
        prop::option::of("[ -~é]{0,30}"),
    )
        .prop_map(|(i, kind, fields, doc)| {
            let head = match kind {
                0 => format!("@dataclass\nclass C{i}:\n"),
                1 => format!("class C{i}(TypedDict, total=False):\n"),
                2 => format!("class C{i}(BaseModel):\n"),
                3 => format!("class C{i}(Enum):\n    A = 1\n    B = 'b'\n"),
                _ => format!("class C{i}(C{}, C{}):\n", (i + 1) % 4, (i + 2) % 4),
            };
            let mut out = head;
            if let Some(d) = doc {
                out.push_str(&format!(
                    "    \"\"\"{d}\n\n    Attributes:\n        a: x\n    \"\"\"\n"
                ));
            }
            for (name, ty, def) in fields {
                match def {
                    Some(d) => out.push_str(&format!("    {name}: {ty} = {d}\n")),
                    None => out.push_str(&format!("    {name}: {ty}\n")),
                }
            }
            out + "    pass\n"
        })
}

fn function() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(
            ("[a-z_][a-z0-9_]{0,5}", prop::option::weighted(0.95, annotation()), prop::option::weighted(0.3, default())),
            0..6,
        ),
        prop::option::of(annotation()),
        0usize..4,
        any::<bool>(),
    )
        .prop_map(|(params, returns, style, is_async)| {
            let sig: Vec<String> = params
                .iter()
                .map(|(n, t, d)| {
                    let mut p = n.clone();
                    if let Some(t) = t {
                        p.push_str(&format!(": {t}"));
                    }
                    if let Some(d) = d {
                        p.push_str(&format!(" = {d}"));
                    }
                    p
                })
                .collect();
            let doc = match style {
                0 => format!(
                    "Args:\n{}",
                    params.iter().map(|(n, ..)| format!("        {n}: about {n}\n")).collect::<String>()
                ),
                1 => format!(
                    "Parameters\n    ----------\n{}",
                    params.iter().map(|(n, ..)| format!("    {n} : int\n        about\n")).collect::<String>()
                ),
                2 => params.iter().map(|(n, ..)| format!(":param {n}: about\n    ")).collect(),
                _ => String::new(),
            };
            let ret = returns.map(|r| format!(" -> {r}")).unwrap_or_default();
            let kw = if is_async { "async def" } else { "def" };
            format!(
                "{kw} tool({}){ret}:\n    \"\"\"Summary ü.\n\n    {doc}\n    \"\"\"\n    return f\"{{x!r:>{{w}}}}\"\n",
                sig.join(", ")
            )
        })
}

/// A module from the grammar, then sometimes truncated.
fn module() -> impl Strategy<Value = String> {
    (
        prop::collection::vec(class(), 0..4),
        prop::option::weighted(0.3, nesting()),
        function(),
        prop::option::weighted(0.15, any::<prop::sample::Index>()),
    )
        .prop_map(|(classes, nests, f, cut)| {
            let mut src = String::from(
                "from __future__ import annotations\nfrom dataclasses import dataclass, field\nfrom enum import Enum\nfrom typing import Any, Annotated, List, Literal, Optional, TypedDict, Union\nfrom pydantic import BaseModel, Field\nfrom datetime import datetime\nfrom uuid import UUID\n",
            );
            for c in classes {
                src.push_str(&c);
            }
            if let Some(n) = nests {
                src.push_str(&n);
            }
            src.push_str(&f);
            if let Some(cut) = cut {
                let mut at = cut.index(src.len() + 1);
                while !src.is_char_boundary(at) {
                    at -= 1;
                }
                src.truncate(at);
            }
            src
        })
}

/// A fixture file with a few random edits.
fn mutated(corpus: Vec<String>) -> impl Strategy<Value = String> {
    (
        prop::sample::select(corpus),
        prop::collection::vec(
            (
                any::<prop::sample::Index>(),
                0usize..12,
                "[\\[\\](){}:,=|\"'\\n\\t a-zA-Z_0-9.*@#\\\\-]{0,8}|\\PC{0,3}",
            ),
            1..8,
        ),
    )
        .prop_map(|(mut text, edits)| {
            for (pos, del, insert) in edits {
                let mut at = pos.index(text.len() + 1);
                while !text.is_char_boundary(at) {
                    at -= 1;
                }
                let mut end = (at + del).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                text.replace_range(at..end.max(at), &insert);
            }
            text
        })
}

fn input() -> impl Strategy<Value = String> {
    prop_oneof![
        1 => "\\PC{0,400}",
        1 => prop::collection::vec(any::<u8>(), 0..400)
            .prop_map(|b| String::from_utf8_lossy(&b).into_owned()),
        4 => module(),
        3 => mutated(fixtures()),
    ]
}

/// Runs every entry point of `schema` on `source`; panics propagate. True when a schema was
/// derived (the share of those says whether the grammar reaches past the parser).
fn exercise(source: &str) -> bool {
    let o = opts("tool");
    let derived = derive(source, &o);
    if let Ok(d) = &derived {
        let _ = health(&d.schema);
        let letta = LettaExtras {
            source_code: source.to_string(),
            ..LettaExtras::default()
        };
        for f in [
            Format::JsonSchema,
            Format::OpenAi,
            Format::Anthropic,
            Format::Mcp,
            Format::Letta,
        ] {
            let _ = export(&d.schema, f, false, &letta);
            let _ = export(&d.schema, f, true, &letta);
        }
        let _ = warden::schema::ArgumentValidator::new(&d.schema);
    }
    let _ = check(source, &o);
    derived.is_ok()
}

#[test]
fn fuzz_derive_never_panics_or_stalls() {
    let long = std::env::var("WARDEN_FUZZ_SECS")
        .ok()
        .and_then(|s| s.parse::<u64>().ok());
    let budget = Duration::from_secs(long.unwrap_or(3));
    // A fresh seed each run, printed so that a failure can be replayed.
    let seed: u64 = std::env::var("WARDEN_FUZZ_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        });
    let mut seed_bytes = [0u8; 32];
    seed_bytes[..8].copy_from_slice(&seed.to_le_bytes());
    let mut runner = TestRunner::new_with_rng(
        Config::default(),
        TestRng::from_seed(proptest::test_runner::RngAlgorithm::ChaCha, &seed_bytes),
    );
    let case_file = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/fuzz-schema-case.py");
    if long.is_some()
        && let Some(dir) = case_file.parent()
    {
        std::fs::create_dir_all(dir).unwrap();
    }
    let strategy = input();
    let start = Instant::now();
    let (mut cases, mut derived, mut slowest, mut bytes) = (0u64, 0u64, Duration::ZERO, 0usize);
    let mut last_report = Instant::now();
    eprintln!("fuzz: seed {seed}, running for {budget:?}");
    while start.elapsed() < budget {
        let source = strategy.new_tree(&mut runner).unwrap().current();
        if long.is_some() {
            // Left behind if the process dies on this case.
            let _ = std::fs::write(&case_file, &source);
        }
        let t = Instant::now();
        let outcome = catch_unwind(AssertUnwindSafe(|| exercise(&source)));
        let took = t.elapsed();
        if outcome.as_ref().is_ok_and(|ok| *ok) {
            derived += 1;
        }
        if outcome.is_err() || took > CASE_BOUND {
            let kept = std::env::temp_dir().join(format!("fuzz-schema-failure-{seed}-{cases}.py"));
            let _ = std::fs::write(&kept, &source);
            panic!(
                "case {cases} (seed {seed}) {} after {took:?}; input saved to {}",
                if outcome.is_err() {
                    "panicked"
                } else {
                    "stalled"
                },
                kept.display()
            );
        }
        cases += 1;
        bytes += source.len();
        slowest = slowest.max(took);
        if last_report.elapsed() > Duration::from_secs(60) {
            eprintln!(
                "fuzz: {cases} cases ({derived} derived) in {:?}, slowest {slowest:?}",
                start.elapsed()
            );
            last_report = Instant::now();
        }
    }
    eprintln!(
        "fuzz: done: seed {seed}, {cases} cases ({derived} derived a schema, {bytes} bytes of source) in {:?}, slowest case {slowest:?}",
        start.elapsed()
    );
    assert!(cases > 0);
}
