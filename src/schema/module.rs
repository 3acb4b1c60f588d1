//! The module-level facts the type mapping needs: imports and their aliases, the classes of
//! the file (nested ones too, `Tank.Shrimp`), type aliases (`type Num = ...`, `Num =
//! Annotated[...]`, `Num: TypeAlias = ...`), the top-level functions with their decorators,
//! and `__all__`. Names resolve as Python binds them at the top level; a class body sees its
//! own nested classes first.

use std::collections::{HashMap, HashSet};

use ruff_python_ast::{self as ast, Expr, Stmt};

use super::source::span;

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
    pub decorators: &'a [ast::Decorator],
    pub type_params: Option<&'a ast::TypeParams>,
    pub range: (usize, usize),
}

impl<'a> FunctionRef<'a> {
    pub(crate) fn new(f: &'a ast::StmtFunctionDef) -> Self {
        FunctionRef {
            name: f.name.as_str(),
            args: &f.parameters,
            body: &f.body,
            returns: f.returns.as_deref(),
            decorators: &f.decorator_list,
            type_params: f.type_params.as_deref(),
            range: span(f),
        }
    }
}

/// A type alias: what it stands for, and its type parameters (`type Pair[T] = ...`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Alias<'a> {
    pub name: &'a str,
    pub value: &'a Expr,
    pub params: Option<&'a ast::TypeParams>,
}

/// The facts about one module.
pub(crate) struct Module<'a> {
    /// Local alias -> fully qualified name (`t` -> `typing`, `Opt` -> `typing.Optional`).
    imports: HashMap<String, String>,
    /// Top-level classes by name.
    pub classes: HashMap<&'a str, &'a ast::StmtClassDef>,
    /// The classes nested in each class (by the address of the outer one), by name.
    nested: HashMap<*const ast::StmtClassDef, HashMap<&'a str, &'a ast::StmtClassDef>>,
    /// The `$defs` name of each class: its own name, or its dotted path when two classes of
    /// the file share a name.
    def_names: HashMap<*const ast::StmtClassDef, String>,
    /// Top-level type aliases by name.
    aliases: HashMap<&'a str, Alias<'a>>,
    /// Top-level functions in source order.
    pub functions: Vec<FunctionRef<'a>>,
    /// Top-level classes in source order (a name bound twice appears twice).
    pub class_order: Vec<&'a ast::StmtClassDef>,
    /// The names listed in `__all__`, when it is a literal list or tuple of strings.
    pub all: Option<Vec<&'a str>>,
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
    /// A type alias defined in this file.
    Alias(Alias<'a>),
    /// Nothing known by that name.
    Unknown(String),
}

/// Deepest class nesting indexed (`class A: class B: ...`): far past what models use.
const MAX_NESTED: u32 = 16;

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
        let mut module = Module {
            imports: HashMap::new(),
            classes: HashMap::new(),
            nested: HashMap::new(),
            def_names: HashMap::new(),
            aliases: HashMap::new(),
            functions: Vec::new(),
            class_order: Vec::new(),
            all: None,
        };
        for stmt in body {
            module.bind(stmt);
        }
        module.name_defs();
        module
    }

    /// Records what one top-level statement binds; a later binding of a name replaces an
    /// earlier one, as in Python.
    fn bind(&mut self, stmt: &'a Stmt) {
        match stmt {
            Stmt::Import(import) => {
                for alias in &import.names {
                    let full = alias.name.as_str();
                    let (local, target) = match &alias.asname {
                        Some(asname) => (asname.as_str(), full),
                        None => {
                            let head = full.split('.').next().unwrap_or(full);
                            (head, head)
                        }
                    };
                    self.forget(local);
                    self.imports.insert(local.to_string(), target.to_string());
                }
            }
            Stmt::ImportFrom(from) => {
                let module = from.module.as_ref().map_or("", |m| m.as_str());
                for alias in &from.names {
                    let local = alias.asname.as_ref().unwrap_or(&alias.name).as_str();
                    self.forget(local);
                    self.imports
                        .insert(local.to_string(), format!("{module}.{}", alias.name));
                }
            }
            Stmt::ClassDef(class) => {
                self.forget(class.name.as_str());
                self.classes.insert(class.name.as_str(), class);
                self.class_order.push(class);
                self.index_nested(class, 0);
            }
            Stmt::FunctionDef(f) => self.functions.push(FunctionRef::new(f)),
            Stmt::TypeAlias(t) => {
                if let Expr::Name(n) = &*t.name {
                    self.bind_alias(n.id.as_str(), &t.value, t.type_params.as_deref());
                }
            }
            Stmt::AnnAssign(a) => {
                if let (Expr::Name(n), Some(value)) = (&*a.target, &a.value)
                    && self.is_type_alias_annotation(&a.annotation)
                {
                    self.bind_alias(n.id.as_str(), value, None);
                }
            }
            Stmt::Assign(a) => match a.targets.as_slice() {
                [Expr::Name(n)] if n.id.as_str() == "__all__" => {
                    self.all = string_list(&a.value);
                }
                [Expr::Name(n)] if looks_like_a_type(&a.value) => {
                    self.bind_alias(n.id.as_str(), &a.value, None);
                }
                _ => {}
            },
            _ => {}
        }
    }

    fn bind_alias(&mut self, name: &'a str, value: &'a Expr, params: Option<&'a ast::TypeParams>) {
        self.forget(name);
        self.aliases.insert(
            name,
            Alias {
                name,
                value,
                params,
            },
        );
    }

    /// Drops what `name` meant before it is bound again.
    fn forget(&mut self, name: &str) {
        self.imports.remove(name);
        self.classes.remove(name);
        self.aliases.remove(name);
    }

    fn is_type_alias_annotation(&self, annotation: &Expr) -> bool {
        matches!(
            self.resolve(annotation),
            Some(Resolved::Qualified(q) | Resolved::Unimported(q)) if q == "typing.TypeAlias"
        )
    }

    fn index_nested(&mut self, class: &'a ast::StmtClassDef, depth: u32) {
        if depth > MAX_NESTED {
            return;
        }
        for stmt in &class.body {
            if let Stmt::ClassDef(inner) = stmt {
                self.nested
                    .entry(std::ptr::from_ref(class))
                    .or_default()
                    .insert(inner.name.as_str(), inner);
                self.index_nested(inner, depth + 1);
            }
        }
    }

    /// Names every reachable class for `$defs`: its own name, unless another class of the
    /// file has the same one; then the dotted path from the top level (`Tank.Shrimp`).
    fn name_defs(&mut self) {
        let mut paths: Vec<(*const ast::StmtClassDef, &'a str, String)> = Vec::new();
        let mut queue: Vec<(&'a ast::StmtClassDef, String, u32)> = self
            .classes
            .values()
            .map(|c| (*c, c.name.to_string(), 0))
            .collect();
        while let Some((class, path, depth)) = queue.pop() {
            let ptr = std::ptr::from_ref(class);
            paths.push((ptr, class.name.as_str(), path.clone()));
            if depth < MAX_NESTED
                && let Some(inner) = self.nested.get(&ptr)
            {
                for c in inner.values() {
                    queue.push((c, format!("{path}.{}", c.name), depth + 1));
                }
            }
        }
        let mut count: HashMap<&str, usize> = HashMap::new();
        for (_, name, _) in &paths {
            *count.entry(name).or_default() += 1;
        }
        for (ptr, name, path) in paths {
            let unique = count.get(name).is_some_and(|n| *n == 1);
            self.def_names
                .insert(ptr, if unique { name.to_string() } else { path });
        }
    }

    /// The `$defs` name of a class of this file.
    pub(crate) fn def_name(&self, class: &ast::StmtClassDef) -> String {
        self.def_names
            .get(&std::ptr::from_ref(class))
            .cloned()
            .unwrap_or_else(|| class.name.to_string())
    }

    /// Resolves a `Name` or dotted `Attribute` chain at the top level.
    pub(crate) fn resolve(&self, expr: &Expr) -> Option<Resolved<'a>> {
        self.resolve_in(expr, None)
    }

    /// Resolves a `Name` or dotted `Attribute` chain as seen from the body of `scope` (its
    /// nested classes first), or from the top level.
    pub(crate) fn resolve_in(
        &self,
        expr: &Expr,
        scope: Option<&ast::StmtClassDef>,
    ) -> Option<Resolved<'a>> {
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
        let in_scope = scope.and_then(|s| self.nested_class(s, head));
        if in_scope.is_none()
            && let Some(full) = self.imports.get(*head)
        {
            let tail: String = rest.iter().map(|p| format!(".{p}")).collect();
            return Some(Resolved::Qualified(normalize(&format!("{full}{tail}"))));
        }
        if let Some(mut class) = in_scope.or_else(|| self.classes.get(head).copied()) {
            // `Tank.Shrimp`: a class nested in a class of this file.
            for part in rest {
                match self.nested_class(class, part) {
                    Some(inner) => class = inner,
                    None => return Some(Resolved::Unknown(parts.join("."))),
                }
            }
            return Some(Resolved::Local(class));
        }
        if rest.is_empty() {
            if let Some(alias) = self.aliases.get(head) {
                return Some(Resolved::Alias(*alias));
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

    /// The type alias bound to `name` at the top level.
    pub(crate) fn alias(&self, name: &str) -> Option<Alias<'a>> {
        self.aliases.get(name).copied()
    }

    fn nested_class(&self, class: &ast::StmtClassDef, name: &str) -> Option<&'a ast::StmtClassDef> {
        self.nested
            .get(&std::ptr::from_ref(class))
            .and_then(|inner| inner.get(name).copied())
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

/// Whether the value of `X = value` can be a type alias: a subscript (`Annotated[...]`,
/// `list[int]`), a union (`int | None`) or a `TypeVar(...)`. A bare name (`X = int`) is
/// too, when it is used as an annotation; constants (`X = 3`) are not.
fn looks_like_a_type(value: &Expr) -> bool {
    match value {
        Expr::Subscript(_) | Expr::Name(_) | Expr::Attribute(_) => true,
        Expr::BinOp(b) => b.op == ast::Operator::BitOr,
        Expr::Call(c) => {
            matches!(&*c.func, Expr::Name(n) if n.id.as_str() == "TypeVar")
                || matches!(&*c.func, Expr::Attribute(a) if a.attr.as_str() == "TypeVar")
        }
        _ => false,
    }
}

/// The strings of a literal list or tuple (`__all__ = ["tool"]`).
fn string_list(value: &Expr) -> Option<Vec<&str>> {
    let elts = match value {
        Expr::List(l) => &l.elts,
        Expr::Tuple(t) => &t.elts,
        _ => return None,
    };
    elts.iter()
        .map(|e| match e {
            Expr::StringLiteral(s) => Some(s.value.to_str()),
            _ => None,
        })
        .collect()
}
