//! Parsing (once, behind the checks of [`guard`]) and the module-level facts the type mapping
//! needs: imports and their aliases, classes defined in the file, top-level functions.

use std::collections::{HashMap, HashSet};

use rustpython_parser::ast::{self, Constant, Expr, Ranged, Stmt};
use rustpython_parser::lexer::{LexResult, lex};
use rustpython_parser::{Mode, parse_tokens};

use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::guard::{self, TooComplex};

/// Parses `source` as a module behind the checks of [`guard`]: the size cap and CPython's
/// nesting limits before parsing, the depth of the tree after. Call it on the analysis thread
/// ([`guard::on_analysis_stack`]): the tree it returns must be dropped there too.
pub(crate) fn parse(source: &str, index: &LineIndex<'_>) -> Result<Vec<Stmt>, Diagnostic> {
    let too_complex = |refusal: TooComplex| {
        let offset = refusal.offset;
        index.diag(
            Severity::Error,
            Code::SourceTooComplex,
            (offset, offset + 1),
            format!(
                "the file is too complex to analyse safely: {}",
                refusal.what
            ),
            Some("split the expression or the file into smaller pieces".into()),
        )
    };
    if source.len() as u64 > guard::MAX_SOURCE.as_u64() {
        return Err(too_complex(TooComplex {
            offset: 0,
            what: format!(
                "it is {} bytes, more than {} bytes",
                source.len(),
                guard::MAX_SOURCE.as_u64()
            ),
        }));
    }
    let tokens = tokens(source, Mode::Module);
    guard::lexical_nesting(&tokens).map_err(too_complex)?;
    match parse_tokens(tokens, Mode::Module, "<tool>") {
        Ok(ast::Mod::Module(module)) => {
            guard::module_depth(&module.body).map_err(too_complex)?;
            Ok(module.body)
        }
        Ok(_) => Ok(Vec::new()),
        Err(err) => {
            let offset = usize::from(err.offset);
            let message = lower_first(&err.error.to_string());
            Err(index.diag(
                Severity::Error,
                Code::SyntaxError,
                (offset, offset + 1),
                format!("the file is not valid Python: {message}"),
                Some("fix the syntax; `python -m py_compile FILE` shows the same problem".into()),
            ))
        }
    }
}

/// Parses the text of a string annotation (`"Optional[Item]"`) behind the same checks as
/// [`parse`]; `None` when it is not a valid expression or too complex.
pub(crate) fn parse_annotation(text: &str) -> Option<Expr> {
    let tokens = tokens(text, Mode::Expression);
    guard::lexical_nesting(&tokens).ok()?;
    match parse_tokens(tokens, Mode::Expression, "<annotation>") {
        Ok(ast::Mod::Expression(e)) => {
            guard::expression_depth(&e.body).ok()?;
            Some(*e.body)
        }
        _ => None,
    }
}

/// The tokens of `source`, up to and including the first lexical error.
fn tokens(source: &str, mode: Mode) -> Vec<LexResult> {
    // The lexer may repeat an error forever: stop at the first one (the parser reports it).
    let mut tokens: Vec<LexResult> = Vec::new();
    for t in lex(source, mode) {
        let failed = t.is_err();
        tokens.push(t);
        if failed {
            break;
        }
    }
    tokens
}

fn lower_first(s: &str) -> String {
    let mut chars = s.chars();
    match chars.next() {
        Some(c) => c.to_lowercase().chain(chars).collect(),
        None => String::new(),
    }
}

/// Byte range of a node.
pub(crate) fn span<T: Ranged>(node: &T) -> (usize, usize) {
    let r = node.range();
    (usize::from(r.start()), usize::from(r.end()))
}

/// What kind of class a top-level class is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ClassKind {
    /// `enum.Enum` (and `IntEnum`, `StrEnum`, `Flag`) subclass.
    Enum,
    /// `typing.TypedDict` subclass.
    TypedDict,
    /// `@dataclass` class.
    Dataclass,
    /// Pydantic `BaseModel` subclass.
    Pydantic,
    /// Anything else.
    Plain,
}

/// A function definition, sync or async.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FunctionRef<'a> {
    pub name: &'a str,
    pub args: &'a ast::Arguments,
    pub body: &'a [Stmt],
    pub returns: Option<&'a Expr>,
    pub range: (usize, usize),
}

/// The facts about one module.
pub(crate) struct Module<'a> {
    /// Local alias -> fully qualified name (`t` -> `typing`, `Opt` -> `typing.Optional`).
    imports: HashMap<String, String>,
    /// Top-level classes by name.
    pub classes: HashMap<&'a str, &'a ast::StmtClassDef>,
    /// Top-level functions in source order.
    pub functions: Vec<FunctionRef<'a>>,
}

/// A resolved name in an annotation.
#[derive(Debug, Clone)]
pub(crate) enum Resolved<'a> {
    /// A qualified name such as `typing.Optional` or `builtins.int`.
    Qualified(String),
    /// A well-known name used without import (assumed qualified name).
    Unimported(String),
    /// A class defined in this file.
    Local(&'a ast::StmtClassDef),
    /// Nothing known by that name.
    Unknown(String),
}

const BUILTINS: &[&str] = &[
    "str",
    "int",
    "float",
    "bool",
    "bytes",
    "list",
    "dict",
    "set",
    "frozenset",
    "tuple",
    "object",
    "type",
    "bytearray",
    "complex",
];

const TYPING_NAMES: &[&str] = &[
    "Any",
    "Optional",
    "Union",
    "List",
    "Dict",
    "Set",
    "FrozenSet",
    "Tuple",
    "Sequence",
    "Mapping",
    "Literal",
    "Annotated",
];

impl<'a> Module<'a> {
    pub(crate) fn new(body: &'a [Stmt]) -> Self {
        let mut imports = HashMap::new();
        let mut classes = HashMap::new();
        let mut functions = Vec::new();
        for stmt in body {
            match stmt {
                Stmt::Import(import) => {
                    for alias in &import.names {
                        let full = alias.name.as_str();
                        match &alias.asname {
                            Some(asname) => imports.insert(asname.to_string(), full.to_string()),
                            None => {
                                let head = full.split('.').next().unwrap_or(full);
                                imports.insert(head.to_string(), head.to_string())
                            }
                        };
                    }
                }
                Stmt::ImportFrom(from) => {
                    let module = from.module.as_ref().map_or("", |m| m.as_str());
                    for alias in &from.names {
                        let local = alias.asname.as_ref().unwrap_or(&alias.name);
                        imports.insert(local.to_string(), format!("{module}.{}", alias.name));
                    }
                }
                Stmt::ClassDef(class) => {
                    classes.insert(class.name.as_str(), class);
                }
                Stmt::FunctionDef(f) => functions.push(FunctionRef {
                    name: f.name.as_str(),
                    args: &f.args,
                    body: &f.body,
                    returns: f.returns.as_deref(),
                    range: span(f),
                }),
                Stmt::AsyncFunctionDef(f) => functions.push(FunctionRef {
                    name: f.name.as_str(),
                    args: &f.args,
                    body: &f.body,
                    returns: f.returns.as_deref(),
                    range: span(f),
                }),
                _ => {}
            }
        }
        Module {
            imports,
            classes,
            functions,
        }
    }

    /// Resolves a `Name` or dotted `Attribute` chain.
    pub(crate) fn resolve(&self, expr: &Expr) -> Option<Resolved<'a>> {
        let mut parts = Vec::new();
        let mut cur = expr;
        loop {
            match cur {
                Expr::Name(n) => {
                    parts.push(n.id.as_str());
                    break;
                }
                Expr::Attribute(a) => {
                    parts.push(a.attr.as_str());
                    cur = &a.value;
                }
                _ => return None,
            }
            if parts.len() > 16 {
                return None;
            }
        }
        parts.reverse();
        let (head, rest) = parts.split_first()?;
        let tail: String = rest.iter().map(|p| format!(".{p}")).collect();
        if let Some(full) = self.imports.get(*head) {
            return Some(Resolved::Qualified(normalize(&format!("{full}{tail}"))));
        }
        if rest.is_empty() {
            if let Some(class) = self.classes.get(head) {
                return Some(Resolved::Local(class));
            }
            if BUILTINS.contains(head) {
                return Some(Resolved::Qualified(format!("builtins.{head}")));
            }
            if TYPING_NAMES.contains(head) {
                return Some(Resolved::Unimported(format!("typing.{head}")));
            }
        }
        Some(Resolved::Unknown(parts.join(".")))
    }

    /// The kind of a top-level class, following bases defined in the same file (nearest
    /// first, each class once, so that deep diamonds of bases cost linear time).
    pub(crate) fn class_kind(&self, class: &ast::StmtClassDef) -> ClassKind {
        let mut seen = HashSet::new();
        self.class_kind_depth(class, 0, &mut seen)
    }

    fn class_kind_depth(
        &self,
        class: &ast::StmtClassDef,
        depth: u32,
        seen: &mut HashSet<*const ast::StmtClassDef>,
    ) -> ClassKind {
        if depth > 32 || !seen.insert(std::ptr::from_ref(class)) {
            return ClassKind::Plain;
        }
        for deco in &class.decorator_list {
            let target = match deco {
                Expr::Call(call) => &*call.func,
                other => other,
            };
            if let Some(Resolved::Qualified(q)) = self.resolve(target)
                && (q == "dataclasses.dataclass" || q == "pydantic.dataclasses.dataclass")
            {
                return ClassKind::Dataclass;
            }
        }
        for base in &class.bases {
            match self.resolve(base) {
                Some(Resolved::Qualified(q)) => match q.as_str() {
                    "pydantic.BaseModel" | "pydantic.main.BaseModel" => return ClassKind::Pydantic,
                    "typing.TypedDict" => return ClassKind::TypedDict,
                    // Fields with defaults, built by keyword: a dataclass's shape.
                    "typing.NamedTuple" => return ClassKind::Dataclass,
                    "enum.Enum" | "enum.IntEnum" | "enum.StrEnum" => return ClassKind::Enum,
                    _ => {}
                },
                Some(Resolved::Local(parent)) => {
                    let kind = self.class_kind_depth(parent, depth + 1, seen);
                    if kind != ClassKind::Plain {
                        return kind;
                    }
                }
                _ => {}
            }
        }
        ClassKind::Plain
    }

    /// The local base classes of `class` (for inherited fields), nearest last.
    pub(crate) fn local_bases(&self, class: &ast::StmtClassDef) -> Vec<&'a ast::StmtClassDef> {
        class
            .bases
            .iter()
            .filter_map(|b| match self.resolve(b) {
                Some(Resolved::Local(parent)) if !std::ptr::eq(parent, class) => Some(parent),
                _ => None,
            })
            .collect()
    }
}

/// Maps `typing_extensions.X`, `collections.abc.X` and friends onto one spelling.
fn normalize(q: &str) -> String {
    if let Some(rest) = q.strip_prefix("typing_extensions.") {
        return format!("typing.{rest}");
    }
    if let Some(rest) = q.strip_prefix("collections.abc.") {
        return format!("typing.{rest}");
    }
    if let Some(rest) = q.strip_prefix("builtins.") {
        return format!("builtins.{rest}");
    }
    q.to_string()
}

/// The docstring of a body, if its first statement is a string literal.
pub(crate) fn docstring(body: &[Stmt]) -> Option<&str> {
    match body.first()? {
        Stmt::Expr(e) => match &*e.value {
            Expr::Constant(c) => match &c.value {
                Constant::Str(s) => Some(s.as_str()),
                _ => None,
            },
            _ => None,
        },
        _ => None,
    }
}
