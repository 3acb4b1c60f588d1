//! The types docstrings give in prose (`int, optional`, `list of str`, `str or None`), as
//! Python annotation text, for parameters and return values without annotations.

/// A docstring's type, as written (`int, optional`, `list of str`, `str or None`,
/// `{'csv', 'json'}`), as Python annotation text (`int`, `list[str]`, `str | None`,
/// `Literal['csv', 'json']`); the annotation parser has the last word.
pub(crate) fn type_expression(text: &str) -> String {
    let text = text.trim();
    // NumPy's set of allowed values.
    if let Some(values) = text.strip_prefix('{').and_then(|t| t.strip_suffix('}')) {
        return format!("Literal[{values}]");
    }
    // `int, optional` and `int, default 3` describe the default, not the type.
    let kept: Vec<&str> = split_top(text, ',')
        .into_iter()
        .filter(|part| {
            let p = part.trim();
            !(p.starts_with("optional") || p.starts_with("default"))
        })
        .collect();
    let text = kept.join(",");
    let alternatives: Vec<String> = text.split(" or ").map(type_words).collect();
    alternatives.join(" | ")
}

/// One alternative of a docstring type: `list of str` -> `list[str]`, `string` -> `str`.
fn type_words(text: &str) -> String {
    let t = text.trim();
    for (container, of) in [
        ("list of ", "list"),
        ("sequence of ", "list"),
        ("iterable of ", "list"),
        ("set of ", "set"),
        ("tuple of ", "tuple"),
    ] {
        if let Some(item) = t.strip_prefix(container) {
            let item = type_words(item);
            return if of == "tuple" {
                format!("tuple[{item}, ...]")
            } else {
                format!("{of}[{item}]")
            };
        }
    }
    match t {
        "string" => "str".into(),
        "integer" => "int".into(),
        "boolean" => "bool".into(),
        "number" => "float".into(),
        "dictionary" | "mapping" => "dict".into(),
        other => other.into(),
    }
}

/// `text` split at `sep` outside brackets.
fn split_top(text: &str, sep: char) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in text.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            c if c == sep && depth == 0 => {
                out.push(&text[start..i]);
                start = i + c.len_utf8();
            }
            _ => {}
        }
    }
    out.push(&text[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::super::parse;
    use super::type_expression;

    #[test]
    fn prose_types_become_annotations() {
        for (prose, annotation) in [
            ("int", "int"),
            ("int, optional", "int"),
            ("int, default 10", "int"),
            ("Dict[str, int], optional", "Dict[str, int]"),
            ("list of str", "list[str]"),
            ("tuple of float", "tuple[float, ...]"),
            ("str or None", "str | None"),
            ("list of string or integer", "list[str] | int"),
            ("{'csv', 'json'}", "Literal['csv', 'json']"),
            ("boolean", "bool"),
        ] {
            assert_eq!(type_expression(prose), annotation, "{prose}");
        }
    }

    #[test]
    fn each_docstring_style_gives_parameter_and_return_types() {
        let google = parse(
            "Go.\n\nArgs:\n    x (int): a number\n    y: no type\n\nReturns:\n    list[str]: names\n",
        );
        assert_eq!(google.param_type("x"), Some("int"));
        assert_eq!(google.param_type("y"), None);
        assert_eq!(google.returns_type.as_deref(), Some("list[str]"));
        assert_eq!(google.returns.as_deref(), Some("names"));

        let numpy = parse(
            "Go.\n\nParameters\n----------\nx, y : float\n    numbers\n\nReturns\n-------\nbool\n    whether it worked\n",
        );
        assert_eq!(numpy.param_type("x"), Some("float"));
        assert_eq!(numpy.param_type("y"), Some("float"));
        assert_eq!(numpy.returns_type.as_deref(), Some("bool"));

        let sphinx =
            parse("Go.\n\n:param x: a number\n:type x: int\n:param str y: a name\n:rtype: dict\n");
        assert_eq!(sphinx.param_type("x"), Some("int"));
        assert_eq!(sphinx.param_type("y"), Some("str"));
        assert_eq!(sphinx.returns_type.as_deref(), Some("dict"));

        let epydoc = parse("Go.\n\n@param x: a number\n@type x: int\n@rtype: str\n");
        assert_eq!(epydoc.param_type("x"), Some("int"));
        assert_eq!(epydoc.returns_type.as_deref(), Some("str"));
    }

    #[test]
    fn a_returns_sentence_is_not_a_type() {
        let doc = parse("Go.\n\nReturns:\n    The number of rows written.\n");
        assert_eq!(doc.returns_type, None);
        for prose in [
            "Go.\n\nReturns:\n    The hits: sorted by score\n",
            "Go.\n\nReturns\n-------\nThe hits\n    sorted by score\n",
            "Go.\n\nReturns:\n    Dictionary mapping names to scores\n",
        ] {
            assert_eq!(parse(prose).returns_type, None, "{prose}");
        }
    }

    #[test]
    fn a_return_type_in_words_is_a_type_in_every_place_a_style_puts_one() {
        for (doc, ty) in [
            // NumPy: a type alone, with or without a description, or after a name.
            ("Go.\n\nReturns\n-------\nlist of str\n", "list of str"),
            (
                "Go.\n\nReturns\n-------\nlist of str\n    The hits.\n",
                "list of str",
            ),
            (
                "Go.\n\nReturns\n-------\nhits : list of str\n    The hits.\n",
                "list of str",
            ),
            ("Go.\n\nReturns\n-------\nstr or None\n", "str or None"),
            (
                "Go.\n\nReturns\n-------\n{'ok', 'failed'}\n",
                "{'ok', 'failed'}",
            ),
            // Google: before the colon, or the section's one line.
            (
                "Go.\n\nReturns:\n    list of str: the hits\n",
                "list of str",
            ),
            ("Go.\n\nReturns:\n    str or None\n", "str or None"),
        ] {
            assert_eq!(parse(doc).returns_type.as_deref(), Some(ty), "{doc}");
        }
    }
}
