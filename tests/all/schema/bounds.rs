//! Deriving and exporting stay linear in the source: shapes that used to double per level or
//! grow quadratically, generated at size. Assertions are on size and structure, not time; a
//! regression shows as a test that never finishes.

use serde_json::Value;
use warden::schema::{
    Code, Format, LettaExtras, MAX_SCHEMA, check, derive, export, health, strict_variant,
};

use super::{derive_ok, opts};

const FORMATS: [Format; 5] = [
    Format::JsonSchema,
    Format::OpenAi,
    Format::Anthropic,
    Format::Mcp,
    Format::Letta,
];

/// `n` models, each holding two of the next: inlining them all doubles per level.
fn model_chain(n: usize, pydantic: bool) -> String {
    let mut src = String::from(
        "from dataclasses import dataclass\nfrom pydantic import BaseModel, Field\n\n",
    );
    for i in (0..n).rev() {
        let next = i + 1;
        src.push_str(&match (i == n - 1, pydantic) {
            (true, _) => format!("@dataclass\nclass D{i}:\n    x: int\n\n"),
            (false, false) => format!("@dataclass\nclass D{i}:\n    a: D{next}\n    b: D{next}\n\n"),
            (false, true) => format!(
                "class D{i}(BaseModel):\n    a: D{next} = Field(description=\"first\")\n    b: D{next} = Field(description=\"second\")\n\n"
            ),
        });
    }
    src + "def tool(d: D0) -> D0:\n    \"\"\"Tool.\n\n    Args:\n        d: the chain\n    \"\"\"\n    return d\n"
}

fn json_len(v: &Value) -> u64 {
    serde_json::to_string(v).unwrap().len() as u64
}

#[test]
fn a_chain_of_models_exports_within_the_size_cap_in_every_format() {
    for pydantic in [false, true] {
        for n in [2, 10, 18, 25, 40] {
            let src = model_chain(n, pydantic);
            let derived = derive_ok(&src);
            let letta = LettaExtras {
                source_code: src.clone(),
                ..LettaExtras::default()
            };
            for format in FORMATS {
                for strict in [false, true] {
                    // The deep chains have no strict variant (more than 10 levels of objects);
                    // finding that out must be as bounded as exporting.
                    let Ok(out) = export(&derived.schema, format, strict, &letta) else {
                        assert!(n > 9, "n={n} {format} strict={strict}");
                        continue;
                    };
                    let len = json_len(&out);
                    assert!(
                        len <= 2 * MAX_SCHEMA.as_u64() + src.len() as u64,
                        "n={n} pydantic={pydantic} {format} strict={strict}: {len} bytes"
                    );
                }
            }
            // Letta inlines while it can, and keeps `$ref`s past the budget.
            let out = export(&derived.schema, Format::Letta, false, &letta).unwrap();
            let parameters = &out["json_schema"]["parameters"];
            if n <= 10 {
                assert!(parameters.get("$defs").is_none(), "n={n}");
            }
            if n >= 25 {
                assert!(
                    parameters["$defs"]
                        .as_object()
                        .is_some_and(|d| !d.is_empty())
                );
            }
            let _ = health(&derived.schema);
            let _ = check(&src, &opts("tool"));
        }
    }
}

#[test]
fn a_small_chain_is_still_inlined_completely() {
    let derived = derive_ok(&model_chain(4, true));
    let out = export(
        &derived.schema,
        Format::Letta,
        false,
        &LettaExtras::default(),
    )
    .unwrap();
    let text = out["json_schema"].to_string();
    assert!(!text.contains("$ref"), "{text}");
    let strict = strict_variant(&derived.schema.parameters).unwrap();
    let d0 = &strict["$defs"]["D0"]["properties"]["a"];
    assert_eq!(d0["description"], "first");
    assert!(d0.get("$ref").is_none(), "{d0}");
}

#[test]
fn strict_mode_keeps_described_refs_past_the_budget() {
    // Strict-compliant (9 levels of models, 2,600 properties) but 256 inlined copies of a
    // model with long descriptions pass the budget: the rest of the described `$ref`s
    // become `anyOf`.
    let mut src = String::from("from pydantic import BaseModel, Field\n\n");
    let long = "x".repeat(3000);
    let wide: String = (0..10)
        .map(|i| format!("    f{i}: int = Field(description=\"{long}\")\n"))
        .collect();
    src.push_str(&format!("class D8(BaseModel):\n{wide}\n"));
    for i in (0..8).rev() {
        let next = i + 1;
        src.push_str(&format!(
            "class D{i}(BaseModel):\n    a: D{next} = Field(description=\"first\")\n    b: D{next} = Field(description=\"second\")\n\n"
        ));
    }
    src.push_str("def tool(d: D0) -> None:\n    \"\"\"Tool.\n\n    Args:\n        d: the chain\n    \"\"\"\n");
    let derived = derive_ok(&src);
    let strict = strict_variant(&derived.schema.parameters).unwrap();
    assert!(json_len(&strict) <= 2 * MAX_SCHEMA.as_u64());
    assert!(
        strict
            .to_string()
            .contains(r##""anyOf":[{"$ref":"#/$defs/"##)
    );
    let out = export(
        &derived.schema,
        Format::OpenAi,
        true,
        &LettaExtras::default(),
    )
    .unwrap();
    assert_eq!(out["function"]["strict"], true);
}

/// Sources that were quadratic (or exponential) to derive, at a size where that showed.
fn wide_sources() -> Vec<(&'static str, String)> {
    let doc = |names: &mut dyn Iterator<Item = String>| -> String {
        names
            .map(|n| format!("        {n}: documented\n"))
            .collect()
    };
    vec![
        (
            "many parameters",
            format!(
                "def tool({}) -> None:\n    \"\"\"Tool.\n\n    Args:\n{}    \"\"\"\n",
                (0..10_000)
                    .map(|i| format!("p{i}: int"))
                    .collect::<Vec<_>>()
                    .join(", "),
                doc(&mut (0..10_000).map(|i| format!("p{i}")))
            ),
        ),
        (
            "huge Literal",
            format!(
                "from typing import Literal\ndef tool(x: Literal[{}]) -> None:\n    pass\n",
                (0..40_000)
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        (
            "long union",
            format!(
                "from typing import Literal, Union\ndef tool(x: Union[{}]) -> None:\n    pass\n",
                (0..10_000)
                    .map(|i| format!("Literal[{i}]"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
        ),
        (
            "model with many fields",
            format!(
                "from dataclasses import dataclass\n@dataclass\nclass M:\n{}def tool(m: M) -> None:\n    pass\n",
                (0..10_000)
                    .map(|i| format!("    f{i}: int\n"))
                    .collect::<String>()
            ),
        ),
        (
            "many models",
            "from pydantic import BaseModel\n".to_string()
                + &(0..3_000)
                    .map(|i| format!("class M{i}(BaseModel):\n    x: int\n"))
                    .collect::<String>()
                + &format!(
                    "def tool({}) -> None:\n    pass\n",
                    (0..3_000)
                        .map(|i| format!("m{i}: M{i}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
        ),
        (
            "diamond of dataclasses",
            "from dataclasses import dataclass\n@dataclass\nclass C0:\n    x: int\n".to_string()
                + &(1..40)
                    .map(|i| {
                        format!(
                            "@dataclass\nclass C{i}(C{}, C{}):\n    y{i}: int\n",
                            i - 1,
                            i - 1
                        )
                    })
                    .collect::<String>()
                + "def tool(c: C39) -> None:\n    pass\n",
        ),
        (
            "diamond of plain classes",
            "class C0:\n    pass\n".to_string()
                + &(1..40)
                    .map(|i| format!("class C{i}(C{}, C{}):\n    pass\n", i - 1, i - 1))
                    .collect::<String>()
                + "def tool(c: C39) -> None:\n    pass\n",
        ),
        (
            "many functions",
            (0..20_000)
                .map(|i| format!("def f{i}(x: int):\n    pass\n"))
                .collect(),
        ),
    ]
}

#[test]
fn wide_sources_derive_in_linear_time() {
    for (name, src) in wide_sources() {
        let derived = derive(&src, &opts("tool"));
        match name {
            "diamond of plain classes" | "many functions" => {
                let err = derived.unwrap_err();
                let d = &err.diagnostics()[0];
                assert!(d.message.len() < 2000, "{name}: {}", d.message);
            }
            _ => {
                let derived = derived.unwrap_or_else(|e| panic!("{name}: {e}"));
                for format in FORMATS {
                    let _ = export(&derived.schema, format, true, &LettaExtras::default());
                    let out =
                        export(&derived.schema, format, false, &LettaExtras::default()).unwrap();
                    assert!(json_len(&out) <= 2 * MAX_SCHEMA.as_u64(), "{name} {format}");
                }
            }
        }
        let _ = check(&src, &opts("tool"));
    }
}

#[test]
fn a_schema_past_the_cap_is_an_error() {
    let params: Vec<String> = (0..30_000)
        .map(|i| format!("p{i}: list[list[int]]"))
        .collect();
    let src = format!("def tool({}) -> None:\n    pass\n", params.join(", "));
    let err = derive(&src, &opts("tool")).unwrap_err();
    let d = err
        .diagnostics()
        .iter()
        .find(|d| d.code == Code::SchemaTooLarge)
        .unwrap_or_else(|| panic!("{:?}", &err.diagnostics()[..1]));
    assert_eq!((d.line, d.column), (1, 1));
    assert!(d.message.contains("bytes"), "{}", d.message);
}
