use proptest::prelude::*;
use warden::schema::{Format, LettaExtras, check, derive, export};

use super::opts;

const VALID: &str = include_str!("../../fixtures/schema/pydantic_nested.py");

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_text_never_panics(text in "\\PC{0,300}") {
        let _ = derive(&text, &opts("tool"));
        let _ = check(&text, &opts("tool"));
    }

    #[test]
    fn mutated_tool_file_never_panics(
        edits in proptest::collection::vec((0usize..4000, 0usize..8, "[\\[\\](){}:,=|\"'\\n a-zA-Z_0-9.*-]{0,6}"), 1..6)
    ) {
        let mut text = VALID.to_string();
        for (pos, del, insert) in edits {
            let mut at = pos % (text.len() + 1);
            while !text.is_char_boundary(at) { at -= 1; }
            let mut end = (at + del).min(text.len());
            while !text.is_char_boundary(end) { end -= 1; }
            text.replace_range(at..end.max(at), &insert);
        }
        if let Ok(d) = derive(&text, &opts("pydantic_nested")) {
            for f in [Format::JsonSchema, Format::OpenAi, Format::Anthropic, Format::Mcp, Format::Letta] {
                let _ = export(&d.schema, f, false, &LettaExtras::default());
                let _ = export(&d.schema, f, true, &LettaExtras::default());
            }
        }
        let _ = check(&text, &opts("pydantic_nested"));
    }
}
