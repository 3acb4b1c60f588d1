//! Field-list docstrings: Sphinx/reST (`:param x:`, `:type x:`, `:returns:`,
//! `:rtype:`) and Epydoc (`@param x:`, `@type x:`, `@return:`).

use super::{Docstring, ParamDoc, description, join_desc};

pub(super) fn is_sphinx_field(line: &str) -> bool {
    let t = line.trim_start();
    [
        ":param",
        ":parameter",
        ":arg",
        ":argument",
        ":key",
        ":keyword",
        ":type",
        ":returns",
        ":return",
        ":rtype",
        ":raises",
        ":raise",
        ":except",
        ":exception",
        ":yields",
        ":yield",
        ":ivar",
        ":var",
        ":cvar",
    ]
    .iter()
    .any(|p| t.starts_with(p) && t[p.len()..].starts_with([' ', ':']))
}

/// Sphinx's fields that name a parameter (or, in a class docstring, an attribute).
const SPHINX_PARAMS: &[&str] = &[
    "param",
    "parameter",
    "arg",
    "argument",
    "key",
    "keyword",
    "ivar",
    "var",
];

/// Sphinx's fields that describe the return value.
const SPHINX_RETURNS: &[&str] = &["returns", "return", "yields", "yield"];

/// A documented parameter `name` (`*args` and `**kwargs` without their stars).
fn param(doc: &mut Docstring, name: &str, description: String) {
    doc.params.push(ParamDoc {
        name: name.trim_start_matches('*').to_string(),
        description,
    });
}

/// The fields both styles share, by their words: a parameter's type (`type x`), the
/// return value's type (`rtype`) and its description (one of `returns`); the first of
/// each wins. Any other field is ignored.
fn typed_or_returned(doc: &mut Docstring, words: &[&str], description: String, returns: &[&str]) {
    match words {
        ["type", name] => doc.typed(name, &description),
        ["rtype"] if doc.returns_type.is_none() => {
            doc.returns_type = Some(description.trim().to_string());
        }
        [kind] if returns.contains(kind) && doc.returns.is_none() && !description.is_empty() => {
            doc.returns = Some(description);
        }
        _ => {}
    }
}

pub(super) fn parse_sphinx(lines: &[String]) -> Docstring {
    let mut doc = Docstring::default();
    let first = lines
        .iter()
        .position(|l| is_sphinx_field(l))
        .unwrap_or(lines.len());
    doc.description = description(lines.get(..first).unwrap_or(&[]));
    let mut fields: Vec<(String, Vec<String>)> = Vec::new();
    for line in lines.get(first..).unwrap_or(&[]) {
        if is_sphinx_field(line) {
            fields.push((line.trim().to_string(), Vec::new()));
        } else if let Some(last) = fields.last_mut() {
            last.1.push(line.clone());
        }
    }
    for (head, rest) in fields {
        let Some(inner) = head.strip_prefix(':') else {
            continue;
        };
        let Some((field, desc)) = inner.split_once(':') else {
            continue;
        };
        let words: Vec<&str> = field.split_whitespace().collect();
        let description = join_desc(desc, &rest);
        match words.as_slice() {
            [kind, .., name] if SPHINX_PARAMS.contains(kind) => {
                // `:param int x:` gives the type inline.
                if let [_, ty @ .., _] = words.as_slice() {
                    doc.typed(name, &ty.join(" "));
                }
                param(&mut doc, name, description);
            }
            other => typed_or_returned(&mut doc, other, description, SPHINX_RETURNS),
        }
    }
    doc
}

/// Epydoc's fields that name a parameter (or, in a class docstring, an attribute).
const EPYDOC_PARAMS: &[&str] = &[
    "param",
    "parameter",
    "arg",
    "argument",
    "keyword",
    "kwarg",
    "kwparam",
    "ivar",
    "var",
];
const EPYDOC_RETURNS: &[&str] = &["return", "returns", "yield"];

/// The field name of an Epydoc field line (`@param x: ...` -> `param`): a line that starts
/// with `@` at the docstring's margin, as `docstring_parser` reads them.
fn epydoc_field(line: &str) -> Option<&str> {
    let rest = line.strip_prefix('@')?;
    let end = rest
        .find(|c: char| c.is_whitespace() || c == ':')
        .unwrap_or(rest.len());
    let name = &rest[..end];
    (!name.is_empty() && rest[end..].contains(':')).then_some(name)
}

pub(super) fn is_epydoc_field(line: &str) -> bool {
    epydoc_field(line).is_some_and(|f| {
        EPYDOC_PARAMS.contains(&f)
            || EPYDOC_RETURNS.contains(&f)
            || ["type", "rtype", "ytype", "raise", "raises"].contains(&f)
    })
}

pub(super) fn parse_epydoc(lines: &[String]) -> Docstring {
    let mut doc = Docstring::default();
    // Any `@word ...:` line starts a field, known or not (`@note:`, `@see:`), so that its
    // text does not run into the field before it.
    let starts = |l: &String| epydoc_field(l).is_some();
    let first = lines.iter().position(starts).unwrap_or(lines.len());
    doc.description = description(lines.get(..first).unwrap_or(&[]));
    let mut fields: Vec<(String, Vec<String>)> = Vec::new();
    for line in lines.get(first..).unwrap_or(&[]) {
        if starts(line) {
            fields.push((line.clone(), Vec::new()));
        } else if let Some(last) = fields.last_mut() {
            last.1.push(line.clone());
        }
    }
    for (head, rest) in fields {
        let Some((field, desc)) = head.strip_prefix('@').and_then(|h| h.split_once(':')) else {
            continue;
        };
        let words: Vec<&str> = field.split_whitespace().collect();
        let description = join_desc(desc, &rest);
        match words.as_slice() {
            [kind, name] if EPYDOC_PARAMS.contains(kind) => param(&mut doc, name, description),
            other => typed_or_returned(&mut doc, other, description, EPYDOC_RETURNS),
        }
    }
    doc
}
