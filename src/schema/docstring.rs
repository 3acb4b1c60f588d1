//! Docstring parsing: Google (`Args:`), NumPy (underlined sections), Sphinx/reST (`:param x:`)
//! and Epydoc (`@param x:`), the four styles of the `docstring_parser` package Letta uses.
//!
//! The description follows Letta (which uses the `docstring_parser` package): the first line,
//! then a blank line and the rest of the text before the first section; a Google `Examples:`
//! section is appended to it.

mod fields;
mod types;

use std::collections::HashMap;

use fields::{is_epydoc_field, is_sphinx_field, parse_epydoc, parse_sphinx};
pub(crate) use types::type_expression;

/// A documented parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ParamDoc {
    pub name: String,
    pub description: String,
}

/// What a docstring says.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Docstring {
    /// Summary and body, without the parameter sections.
    pub description: Option<String>,
    /// Parameters (or attributes, for classes) in documented order.
    pub params: Vec<ParamDoc>,
    /// The `Returns` text.
    pub returns: Option<String>,
    /// The type the docstring gives the return value (`Returns:` then `int: ...`,
    /// `:rtype: int`, a NumPy `Returns` item), as written.
    pub returns_type: Option<String>,
    /// The type the docstring gives each parameter (`x (int): ...`, `x : int`,
    /// `:type x: int`), as written; the first one wins.
    types: HashMap<String, String>,
    /// Index in `params` of the first non-empty description of each name, so that looking up
    /// every parameter of a function (or field of a model) stays linear.
    described: HashMap<String, usize>,
}

impl Docstring {
    /// The description of parameter `name`, if documented and non-empty.
    pub(crate) fn param(&self, name: &str) -> Option<&str> {
        let i = *self.described.get(name)?;
        self.params.get(i).map(|p| p.description.as_str())
    }

    /// The type the docstring gives parameter `name`, as written.
    pub(crate) fn param_type(&self, name: &str) -> Option<&str> {
        self.types.get(name).map(String::as_str)
    }

    fn typed(&mut self, name: &str, ty: &str) {
        let ty = ty.trim();
        if !ty.is_empty() {
            self.types
                .entry(name.trim_start_matches('*').to_string())
                .or_insert_with(|| ty.to_string());
        }
    }

    fn index(mut self) -> Self {
        for (i, p) in self.params.iter().enumerate() {
            if !p.description.is_empty() {
                self.described.entry(p.name.clone()).or_insert(i);
            }
        }
        self
    }
}

const GOOGLE_PARAMS: &[&str] = &[
    "Args",
    "Arguments",
    "Parameters",
    "Params",
    "Keyword Args",
    "Keyword Arguments",
    "Other Parameters",
    "Attributes",
];
const GOOGLE_RETURNS: &[&str] = &["Returns", "Return", "Yields", "Yield"];
const GOOGLE_OTHER: &[&str] = &["Raises", "Exceptions", "Except"];
const GOOGLE_EXAMPLES: &[&str] = &["Example", "Examples"];

/// Parses a raw docstring (as written in the source, before dedenting).
pub(crate) fn parse(raw: &str) -> Docstring {
    let lines = cleandoc(raw);
    let doc = if lines.iter().any(|l| is_sphinx_field(l)) {
        parse_sphinx(&lines)
    } else if lines.iter().any(|l| is_epydoc_field(l)) {
        parse_epydoc(&lines)
    } else if lines
        .windows(2)
        .any(|w| is_underline(&w[1]) && !w[0].trim().is_empty())
    {
        parse_numpy(&lines)
    } else {
        parse_google(&lines)
    };
    doc.index()
}

/// `inspect.cleandoc`: tabs expanded, common indentation of lines after the first removed,
/// leading and trailing blank lines dropped.
pub(crate) fn cleandoc(raw: &str) -> Vec<String> {
    let lines: Vec<String> = raw
        .lines()
        .map(|l| l.replace('\t', "        ").trim_end().to_string())
        .collect();
    let margin = lines
        .iter()
        .skip(1)
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let mut out: Vec<String> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            if i == 0 {
                l.trim_start().to_string()
            } else {
                l.get(margin.min(l.len())..).unwrap_or("").to_string()
            }
        })
        .collect();
    while out.first().is_some_and(|l| l.trim().is_empty()) {
        out.remove(0);
    }
    while out.last().is_some_and(|l| l.trim().is_empty()) {
        out.pop();
    }
    out
}

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn dedent_join(lines: &[String]) -> String {
    let margin = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let joined: Vec<&str> = lines
        .iter()
        .map(|l| l.get(margin.min(l.len())..).unwrap_or(""))
        .collect();
    joined.join("\n").trim().to_string()
}

/// Letta's description: first line, blank line, the rest (trimmed).
fn description(lines: &[String]) -> Option<String> {
    let text = lines.join("\n");
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    match text.split_once('\n') {
        Some((short, long)) if !long.trim().is_empty() => {
            Some(format!("{}\n\n{}", short.trim(), long.trim()))
        }
        _ => Some(text.lines().next().unwrap_or("").trim().to_string()),
    }
}

fn with_extra(desc: Option<String>, extra: &str) -> Option<String> {
    let extra = extra.trim();
    match desc {
        _ if extra.is_empty() => desc,
        Some(d) => Some(format!("{d}\n\n{extra}")),
        None => Some(extra.to_string()),
    }
}

fn google_title(line: &str) -> Option<&str> {
    if indent(line) != 0 {
        return None;
    }
    let title = line.trim().strip_suffix(':')?;
    [GOOGLE_PARAMS, GOOGLE_RETURNS, GOOGLE_OTHER, GOOGLE_EXAMPLES]
        .iter()
        .flat_map(|s| s.iter())
        .find(|t| **t == title)
        .copied()
}

fn parse_google(lines: &[String]) -> Docstring {
    let mut doc = Docstring::default();
    let first = lines
        .iter()
        .position(|l| google_title(l).is_some())
        .unwrap_or(lines.len());
    let mut trailing: Vec<String> = Vec::new();
    let mut examples = String::new();
    let mut i = first;
    while i < lines.len() {
        let title = google_title(&lines[i]).unwrap_or("");
        let start = i + 1;
        let mut end = start;
        while end < lines.len() && google_title(&lines[end]).is_none() {
            if indent(&lines[end]) == 0 && !lines[end].trim().is_empty() {
                break;
            }
            end += 1;
        }
        let body = lines.get(start..end).unwrap_or(&[]);
        if GOOGLE_PARAMS.contains(&title) {
            for (param, ty) in google_items(body) {
                if let Some(ty) = ty {
                    doc.typed(&param.name, &ty);
                }
                doc.params.push(param);
            }
        } else if GOOGLE_RETURNS.contains(&title) && doc.returns.is_none() {
            (doc.returns, doc.returns_type) = google_returns(body);
        } else if GOOGLE_EXAMPLES.contains(&title) {
            examples = format!("{title}:\n{}", body.join("\n").trim_end());
        }
        i = end;
        while i < lines.len() && google_title(&lines[i]).is_none() {
            trailing.push(lines[i].clone());
            i += 1;
        }
    }
    let mut desc_lines = lines.get(..first).unwrap_or(&[]).to_vec();
    if trailing.iter().any(|l| !l.trim().is_empty()) {
        desc_lines.push(String::new());
        desc_lines.extend(trailing);
    }
    doc.description = with_extra(description(&desc_lines), &examples);
    doc
}

/// Splits an indented block into items: a line at the block's own indentation starts an item,
/// deeper lines continue it.
fn items(body: &[String]) -> Vec<(String, Vec<String>)> {
    let base = body
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| indent(l))
        .min()
        .unwrap_or(0);
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for line in body {
        if !line.trim().is_empty() && indent(line) <= base {
            out.push((line.trim().to_string(), Vec::new()));
        } else if let Some(last) = out.last_mut() {
            last.1.push(line.clone());
        }
    }
    out
}

/// The position of the first `:` outside brackets.
fn split_colon(s: &str) -> Option<(&str, &str)> {
    let mut depth = 0i32;
    for (i, c) in s.char_indices() {
        match c {
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            ':' if depth <= 0 => return Some((&s[..i], &s[i + 1..])),
            _ => {}
        }
    }
    None
}

fn join_desc(first: &str, rest: &[String]) -> String {
    let rest = dedent_join(rest);
    match (first.trim(), rest.is_empty()) {
        (f, true) => f.to_string(),
        ("", false) => rest,
        (f, false) => format!("{f}\n{rest}"),
    }
}

/// The items of a Google section, with the type in parentheses (`x (int): ...`).
fn google_items(body: &[String]) -> Vec<(ParamDoc, Option<String>)> {
    items(body)
        .into_iter()
        .filter_map(|(head, rest)| {
            let (left, desc) = split_colon(&head)?;
            let (name, ty) = match left.split_once('(') {
                Some((name, ty)) => (name, ty.rsplit_once(')').map(|(ty, _)| ty.to_string())),
                None => (left, None),
            };
            let name = name.trim().trim_start_matches('*');
            (!name.is_empty() && !name.contains(' ')).then(|| {
                let doc = ParamDoc {
                    name: name.to_string(),
                    description: join_desc(desc, &rest),
                };
                (doc, ty)
            })
        })
        .collect()
}

/// The text and the type of a Google `Returns:` section (`int: the count`).
fn google_returns(body: &[String]) -> (Option<String>, Option<String>) {
    let text = dedent_join(body);
    if text.is_empty() {
        return (None, None);
    }
    let (first, rest) = text.split_once('\n').unwrap_or((&text, ""));
    let (first, ty) = match split_colon(first) {
        Some((ty, desc)) if names_a_type(ty) => (desc.trim(), Some(ty.trim().to_string())),
        // A section of one word and nothing else (`Returns:` then `int`) names the type.
        _ if rest.trim().is_empty() && names_a_type(first) => {
            (first.trim(), Some(first.trim().to_string()))
        }
        _ => (first.trim(), None),
    };
    let rest = rest.trim();
    let text = if rest.is_empty() {
        first.to_string()
    } else if first.is_empty() {
        rest.to_string()
    } else {
        format!("{first}\n{rest}")
    };
    (Some(text), ty)
}

/// Whether a docstring's word reads as a type (`int`, `list[str]`, `Optional[int]`) rather
/// than prose.
fn looks_like_a_type(text: &str) -> bool {
    let t = text.trim();
    !t.is_empty()
        && !t.ends_with('.')
        && (!t.contains(' ') || t.contains('['))
        && t.chars().next().is_some_and(|c| c.is_alphabetic())
}

/// Whether a text where a docstring's style puts a type (a NumPy `Returns` item's head, a
/// Google `Returns:` line before its colon) is one: [`looks_like_a_type`], or a type in
/// the words docstrings use (`list of str`, `str or None`, `{'a', 'b'}`) that reads as an
/// annotation once written as one. Prose (`The hits`) does not.
fn names_a_type(text: &str) -> bool {
    let t = text.trim();
    looks_like_a_type(t)
        || (!t.ends_with('.')
            && t.chars()
                .next()
                .is_some_and(|c| c.is_alphabetic() || c == '{')
            && super::source::parse_annotation(&type_expression(t)).is_some())
}

fn is_underline(line: &str) -> bool {
    let t = line.trim();
    t.len() >= 3 && t.chars().all(|c| c == '-')
}

fn parse_numpy(lines: &[String]) -> Docstring {
    let mut doc = Docstring::default();
    let is_title =
        |i: usize| lines.get(i + 1).is_some_and(|n| is_underline(n)) && !lines[i].trim().is_empty();
    let first = (0..lines.len())
        .find(|&i| is_title(i))
        .unwrap_or(lines.len());
    doc.description = description(lines.get(..first).unwrap_or(&[]));
    let mut i = first;
    while i < lines.len() {
        let title = lines[i].trim().to_string();
        let start = i + 2;
        let mut end = start;
        while end < lines.len() && !is_title(end) {
            end += 1;
        }
        let body = lines.get(start.min(end)..end).unwrap_or(&[]);
        match title.as_str() {
            "Parameters" | "Other Parameters" | "Attributes" => {
                for (head, rest) in items(body) {
                    let (names, ty) = head.split_once(':').unwrap_or((&head, ""));
                    for name in names.split(',') {
                        let name = name.trim().trim_start_matches('*');
                        if !name.is_empty() && !name.contains(' ') {
                            doc.typed(name, ty);
                            doc.params.push(ParamDoc {
                                name: name.to_string(),
                                description: dedent_join(&rest),
                            });
                        }
                    }
                }
            }
            "Returns" | "Yields" if doc.returns.is_none() => {
                let listed = items(body);
                // `int` alone, or `count : int`, names the type of the (first) value.
                if let Some((head, _)) = listed.first() {
                    let ty = head.split_once(':').map_or(head.as_str(), |(_, ty)| ty);
                    if names_a_type(ty) {
                        doc.returns_type = Some(ty.trim().to_string());
                    }
                }
                // An item's description, else its head unless that is only a type.
                let texts: Vec<String> = listed
                    .into_iter()
                    .filter_map(|(head, rest)| {
                        let desc = dedent_join(&rest);
                        if !desc.is_empty() {
                            Some(desc)
                        } else if !head.contains(':') && names_a_type(&head) {
                            None
                        } else {
                            Some(head)
                        }
                    })
                    .collect();
                let joined = texts.join("\n");
                doc.returns = (!joined.is_empty()).then_some(joined);
            }
            _ => {}
        }
        i = end;
    }
    doc
}
