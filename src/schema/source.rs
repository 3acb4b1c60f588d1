//! Parsing (once, behind the checks of [`guard`]) and the module-level facts the type mapping
//! needs: imports and their aliases, classes defined in the file, top-level functions.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::{self as ast, AnyNodeRef, Expr, PythonVersion, Stmt};
use ruff_python_parser::{Mode, ParseOptions, parse_unchecked};
use ruff_text_size::Ranged;

use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::guard::{self, TooComplex};

/// The newest Python the parser knows: a tool may use any syntax CPython accepts.
const PYTHON: PythonVersion = PythonVersion::PY315;

/// Parses `source` as a module behind the checks of [`guard`]: the size cap and the nesting
/// bounds before parsing, the depth of the tree after. Call it on the analysis thread
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
    guard::lexical_nesting(source, Mode::Module).map_err(too_complex)?;
    let parsed = parse_unchecked(source, options(Mode::Module));
    // The parser reads past an error to find more; the first one is the one to fix.
    if let Some(err) = parsed.errors().first() {
        let offset = err.location.start().to_usize();
        let message = lower_first(&err.error.to_string());
        return Err(index.diag(
            Severity::Error,
            Code::SyntaxError,
            (offset, offset + 1),
            format!("the file is not valid Python: {message}"),
            Some("fix the syntax; `python -m py_compile FILE` shows the same problem".into()),
        ));
    }
    let body = match parsed.into_syntax() {
        ast::Mod::Module(module) => module.body,
        ast::Mod::Expression(_) => Vec::new(),
    };
    guard::syntax_depth(body.iter().map(AnyNodeRef::from)).map_err(too_complex)?;
    Ok(body)
}

/// Parses the text of a string annotation (`"Optional[Item]"`) behind the same checks as
/// [`parse`]; `None` when it is not a valid expression or too complex.
pub(crate) fn parse_annotation(text: &str) -> Option<Expr> {
    guard::lexical_nesting(text, Mode::Expression).ok()?;
    let parsed = parse_unchecked(text, options(Mode::Expression));
    if !parsed.errors().is_empty() {
        return None;
    }
    match parsed.into_syntax() {
        ast::Mod::Expression(e) => {
            guard::syntax_depth([AnyNodeRef::from(&*e.body)]).ok()?;
            Some(*e.body)
        }
        ast::Mod::Module(_) => None,
    }
}

fn options(mode: Mode) -> ParseOptions {
    ParseOptions::from(mode).with_target_version(PYTHON)
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
    (r.start().to_usize(), r.end().to_usize())
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
    pub args: &'a ast::Parameters,
    pub body: &'a [Stmt],
    pub returns: Option<&'a Expr>,
    pub range: (usize, usize),
}

impl<'a> FunctionRef<'a> {
    fn new(f: &'a ast::StmtFunctionDef) -> Self {
        FunctionRef {
            name: f.name.as_str(),
            args: &f.parameters,
            body: &f.body,
            returns: f.returns.as_deref(),
            range: span(f),
        }
    }
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
                Stmt::FunctionDef(f) => functions.push(FunctionRef::new(f)),
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
            let target = match &deco.expression {
                Expr::Call(call) => &*call.func,
                other => other,
            };
            if let Some(Resolved::Qualified(q)) = self.resolve(target)
                && (q == "dataclasses.dataclass" || q == "pydantic.dataclasses.dataclass")
            {
                return ClassKind::Dataclass;
            }
        }
        for base in class.bases() {
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
            .bases()
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
            Expr::StringLiteral(s) => Some(s.value.to_str()),
            _ => None,
        },
        _ => None,
    }
}
