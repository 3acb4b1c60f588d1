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
