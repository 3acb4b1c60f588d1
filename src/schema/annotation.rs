//! Python annotations -> JSON Schema.
//!
//! Names are resolved through the file's imports (`import typing as t` makes `t.List` mean
//! `typing.List`); classes defined in the file become `$defs` entries referenced by `$ref`.
//! The leaf mappings (literals, tuples, built-in names, nullability) are in [`leaves`].

mod generic;
mod leaves;
mod names;

use std::collections::HashSet;

use ruff_python_ast::{self as ast, Expr, Operator};
use serde_json::{Map, Value, json};

use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::models;
use super::module::{ClassKind, Module, Resolved};
use super::source::span;

/// Deepest annotation nesting followed.
const MAX_DEPTH: u32 = 32;

/// The annotation of a function parameter, Optional-ness split off.
#[derive(Debug, Clone)]
pub(crate) struct ParamType {
    /// The schema of the non-`None` part.
    pub schema: Value,
    /// `Optional[T]`, `T | None`, `Union[..., None]`.
    pub optional: bool,
    /// From `Annotated[T, "text"]` or `Annotated[T, Field(description=...)]`.
    pub description: Option<String>,
    /// Whether `Annotated[T, Field(default=...)]` gives a default, which a plain call of
    /// the function does not apply.
    pub field_default: bool,
}

/// Maps annotations, collecting `$defs` and diagnostics.
pub(crate) struct Mapper<'a, 'm> {
    pub module: &'m Module<'a>,
    pub index: &'m LineIndex<'m>,
    pub diags: Vec<Diagnostic>,
    pub defs: Map<String, Value>,
    building: HashSet<String>,
    /// Severity of type problems (errors for parameters, warnings for the return type).
    pub severity: Severity,
    /// While inside a string forward reference: the span of that string.
    span_override: Option<(usize, usize)>,
    /// The class whose body is being read: its nested classes are in scope.
    scope: Option<&'a ast::StmtClassDef>,
    /// The `$defs` key of the class being built, which `Self` names.
    building_now: Option<String>,
    /// Type parameters in force and what each stands for, innermost last.
    bindings: Vec<(String, Value)>,
    /// The aliases being expanded, innermost last (a guard against `A = list[A]`).
    aliases_open: Vec<&'a str>,
}

impl<'a, 'm> Mapper<'a, 'm> {
    pub(crate) fn new(module: &'m Module<'a>, index: &'m LineIndex<'m>) -> Self {
        Mapper {
            module,
            index,
            diags: Vec::new(),
            defs: Map::new(),
            building: HashSet::new(),
            severity: Severity::Error,
            span_override: None,
            scope: None,
            building_now: None,
            bindings: Vec::new(),
            aliases_open: Vec::new(),
        }
    }

    pub(crate) fn at(&self, expr: &Expr) -> (usize, usize) {
        self.span_override.unwrap_or_else(|| span(expr))
    }

    /// Reports a problem at `expr` with the mapper's current severity.
    pub(crate) fn report(&mut self, code: Code, expr: &Expr, message: String, hint: Option<&str>) {
        let range = self.at(expr);
        let d = self.index.diag(
            self.severity,
            code,
            range,
            message,
            hint.map(str::to_string),
        );
        self.diags.push(d);
    }

    /// Reports a warning at `expr`, whatever the current severity.
    pub(crate) fn warn(&mut self, code: Code, expr: &Expr, message: String, hint: Option<&str>) {
        let range = self.at(expr);
        let d = self.index.diag(
            Severity::Warning,
            code,
            range,
            message,
            hint.map(str::to_string),
        );
        self.diags.push(d);
    }

    /// The JSON value of a default: a literal, or a member of an Enum defined in this file.
    pub(crate) fn default_value(&self, expr: &Expr) -> Option<Value> {
        if let Some(v) = super::literal::literal(expr) {
            return Some(v);
        }
        let Expr::Attribute(attr) = expr else {
            return None;
        };
        let Some(Resolved::Local(class)) = self.module.resolve(&attr.value) else {
            return None;
        };
        if self.module.class_kind(class) != ClassKind::Enum {
            return None;
        }
        class.body.iter().find_map(|stmt| match stmt {
            ast::Stmt::Assign(a) => match a.targets.as_slice() {
                [Expr::Name(n)] if n.id.as_str() == attr.attr.as_str() => {
                    super::literal::literal(&a.value)
                }
                _ => None,
            },
            _ => None,
        })
    }

    /// A parameter annotation: `Annotated` and `Optional` are unwrapped at the top.
    pub(crate) fn param(&mut self, expr: &Expr) -> Option<ParamType> {
        self.param_depth(expr, 0)
    }

    fn param_depth(&mut self, expr: &Expr, depth: u32) -> Option<ParamType> {
        // A string annotation ("Optional[Item]") is parsed first, so Optional is seen inside it.
        if let Expr::StringLiteral(s) = expr
            && let text = s.value.to_str()
            && depth < 4
            && text.len() <= 1000
            && let Some(inner) = super::source::parse_annotation(text.trim())
        {
            let saved = self.span_override;
            self.span_override = Some(self.at(expr));
            let out = self.param_depth(&inner, depth + 1);
            self.span_override = saved;
            return out;
        }
        let expr = self.expand(expr);
        let Unwrapped {
            inner,
            description,
            constraints,
            default,
        } = self.unwrap_annotated(expr, 0)?;

        let mut members = Members::default();
        self.union_members(inner, &mut members, 0)?;
        let optional = members.none && !members.types.is_empty();
        let mut schema = if optional {
            self.union(&members.types, 1)?
        } else {
            self.map(inner, 1)?
        };
        models::apply_constraints(&mut schema, &constraints);
        Some(ParamType {
            schema,
            optional,
            description,
            field_default: default.is_some(),
        })
    }

    /// Maps a type a docstring gives in prose (`list of str`) with `map`, as if written at
    /// `at`: `None` when it is not a type this mapping knows. It reports nothing: the caller
    /// says where the type came from.
    pub(crate) fn map_doc_type<T>(
        &mut self,
        text: &str,
        at: (usize, usize),
        map: impl FnOnce(&mut Self, &Expr) -> Option<T>,
    ) -> Option<T> {
        let expr = super::source::parse_annotation(&super::docstring::type_expression(text))?;
        let saved = (self.span_override, self.severity, self.diags.len());
        self.span_override = Some(at);
        self.severity = Severity::Warning;
        let out = map(self, &expr);
        self.diags.truncate(saved.2);
        (self.span_override, self.severity) = (saved.0, saved.1);
        out
    }

    /// `Annotated[T, meta...]` -> (T, description, constraints); anything else unchanged.
    pub(crate) fn unwrap_annotated<'e>(
        &mut self,
        expr: &'e Expr,
        depth: u32,
    ) -> Option<Unwrapped<'e>>
    where
        'a: 'e,
    {
        let expr = self.expand(expr);
        if let Expr::Subscript(sub) = expr
            && self.qualified(&sub.value).as_deref() == Some("typing.Annotated")
        {
            let args = slice_args(&sub.slice);
            let Some((first, meta)) = args.split_first() else {
                self.report(
                    Code::InvalidAnnotation,
                    expr,
                    "`Annotated` needs a type and metadata".into(),
                    None,
                );
                return None;
            };
            let mut out = Unwrapped {
                inner: first,
                description: None,
                constraints: Map::new(),
                default: None,
            };
            for m in meta {
                match m {
                    Expr::StringLiteral(s) => {
                        out.description = Some(s.value.to_str().to_string());
                    }
                    Expr::Call(call) => {
                        let field = models::field_call(self, call);
                        if field.description.is_some() {
                            out.description = field.description;
                        }
                        if field.has_default {
                            out.default = Some(field.default);
                        }
                        out.constraints.extend(field.constraints);
                    }
                    _ => {}
                }
            }
            if depth < MAX_DEPTH {
                let inner = self.unwrap_annotated(first, depth + 1)?;
                out.inner = inner.inner;
                out.constraints.extend(inner.constraints);
                out.description = out.description.or(inner.description);
                out.default = out.default.or(inner.default);
            }
            return Some(out);
        }
        Some(Unwrapped {
            inner: expr,
            description: None,
            constraints: Map::new(),
            default: None,
        })
    }

    /// What a name stands for when it names a type alias without type parameters (`Opt =
    /// Optional[int]`), followed through aliases of aliases, so that `Optional` and
    /// `Annotated` are seen through it; anything else unchanged.
    fn expand<'e>(&self, expr: &'e Expr) -> &'e Expr
    where
        'a: 'e,
    {
        let mut expr = expr;
        for _ in 0..8 {
            if matches!(expr, Expr::Name(n) if self.bindings.iter().any(|(b, _)| b == n.id.as_str()))
            {
                break;
            }
            match self.module.resolve_in(expr, self.scope) {
                Some(Resolved::Alias(alias))
                    if alias.params.is_none()
                        && !alias.value.is_call_expr()
                        && !self.aliases_open.contains(&alias.name) =>
                {
                    expr = alias.value;
                }
                _ => break,
            }
        }
        expr
    }

    /// The qualified name of a name expression, if imported or built in.
    pub(crate) fn qualified(&self, expr: &Expr) -> Option<String> {
        match self.module.resolve(expr)? {
            Resolved::Qualified(q) | Resolved::Unimported(q) => Some(q),
            _ => None,
        }
    }

    /// Flattens `A | B | None` and `Union[A, B]` / `Optional[A]` into members.
    fn union_members<'e>(&mut self, expr: &'e Expr, out: &mut Members<'e>, depth: u32) -> Option<()>
    where
        'a: 'e,
    {
        if self.too_deep(expr, depth) {
            return None;
        }
        let expr = self.expand(expr);
        match expr {
            Expr::BinOp(b) if b.op == Operator::BitOr => {
                self.union_members(&b.left, out, depth + 1)?;
                self.union_members(&b.right, out, depth + 1)
            }
            Expr::Subscript(sub) => match self.qualified(&sub.value).as_deref() {
                Some("typing.Union") => {
                    for a in slice_args(&sub.slice) {
                        self.union_members(a, out, depth + 1)?;
                    }
                    Some(())
                }
                Some("typing.Optional") => {
                    let args = slice_args(&sub.slice);
                    if args.len() != 1 {
                        self.report(
                            Code::InvalidAnnotation,
                            expr,
                            format!("`Optional` takes one type, got {}", args.len()),
                            Some("write `Optional[T]`, or `Union[A, B, None]` for several types"),
                        );
                        return None;
                    }
                    out.types.extend(args);
                    out.none = true;
                    Some(())
                }
                _ => {
                    out.types.push(expr);
                    Some(())
                }
            },
            Expr::NoneLiteral(_) => {
                out.none = true;
                Some(())
            }
            _ => {
                out.types.push(expr);
                Some(())
            }
        }
    }

    fn union(&mut self, members: &[&Expr], depth: u32) -> Option<Value> {
        let schemas: Vec<Value> = members
            .iter()
            .map(|m| self.map(m, depth + 1))
            .collect::<Vec<_>>()
            .into_iter()
            .collect::<Option<_>>()?;
        let mut unique: Vec<Value> = Vec::new();
        let mut seen = HashSet::new();
        for s in schemas {
            // Keyed by the JSON text: a long union stays linear to deduplicate.
            if seen.insert(s.to_string()) {
                unique.push(s);
            }
        }
        match unique.len() {
            1 => unique.pop(),
            _ => Some(json!({ "anyOf": unique })),
        }
    }

    /// Whether `expr` at `depth` passes [`MAX_DEPTH`]; if so, it is reported.
    fn too_deep(&mut self, expr: &Expr, depth: u32) -> bool {
        if depth <= MAX_DEPTH {
            return false;
        }
        self.report(
            Code::InvalidAnnotation,
            expr,
            "the annotation nests too deeply".into(),
            None,
        );
        true
    }

    /// Maps any annotation (Optional becomes nullable).
    pub(crate) fn map(&mut self, expr: &Expr, depth: u32) -> Option<Value> {
        if self.too_deep(expr, depth) {
            return None;
        }
        match expr {
            Expr::NoneLiteral(_) => Some(json!({"type": "null"})),
            Expr::StringLiteral(s) => self.forward_ref(expr, s.value.to_str(), depth),
            Expr::BooleanLiteral(_)
            | Expr::NumberLiteral(_)
            | Expr::BytesLiteral(_)
            | Expr::EllipsisLiteral(_) => {
                self.report(
                    Code::InvalidAnnotation,
                    expr,
                    "a constant is not a type".into(),
                    None,
                );
                None
            }
            Expr::Name(_) | Expr::Attribute(_) => self.name(expr, depth),
            Expr::Subscript(sub) => self.generic(expr, sub, depth),
            Expr::BinOp(b) if b.op == Operator::BitOr => {
                let mut members = Members::default();
                self.union_members(expr, &mut members, depth)?;
                self.members_nullable(&members, depth)
            }
            _ => {
                self.report(
                    Code::UnsupportedType,
                    expr,
                    "this expression is not a type annotation".into(),
                    Some("use a type such as `str`, `list[int]` or a class defined in this file"),
                );
                None
            }
        }
    }

    fn members_nullable(&mut self, members: &Members<'_>, depth: u32) -> Option<Value> {
        if members.types.is_empty() {
            return Some(json!({"type": "null"}));
        }
        let schema = self.union(&members.types, depth)?;
        Some(if members.none {
            nullable(schema)
        } else {
            schema
        })
    }

    fn forward_ref(&mut self, expr: &Expr, text: &str, depth: u32) -> Option<Value> {
        if text.len() > 1000 {
            self.report(
                Code::InvalidAnnotation,
                expr,
                "the forward reference is too long".into(),
                None,
            );
            return None;
        }
        let inner = match super::source::parse_annotation(text.trim()) {
            Some(inner) => inner,
            None => {
                self.report(
                    Code::InvalidAnnotation,
                    expr,
                    format!("the forward reference \"{text}\" is not a valid type expression"),
                    None,
                );
                return None;
            }
        };
        let saved = self.span_override;
        self.span_override = Some(self.at(expr));
        let out = self.map(&inner, depth + 1);
        self.span_override = saved;
        out
    }
}

/// An annotation with its `Annotated[...]` metadata taken off.
pub(crate) struct Unwrapped<'e> {
    /// The type.
    pub inner: &'e Expr,
    /// From a string or `Field(description=...)`.
    pub description: Option<String>,
    /// From `Field(ge=..., ...)`, as JSON Schema keywords.
    pub constraints: Map<String, Value>,
    /// From `Field(default=...)` or `Field(default_factory=...)`: `Some(None)` when the
    /// default is not a literal.
    pub default: Option<Option<Value>>,
}

/// The members of a union: its types, and whether `None` is among them.
#[derive(Default)]
struct Members<'e> {
    types: Vec<&'e Expr>,
    none: bool,
}

/// The arguments of a subscript: `X[a, b]` -> `[a, b]`; `X[a]` -> `[a]`.
pub(crate) fn slice_args(slice: &Expr) -> Vec<&Expr> {
    match slice {
        Expr::Tuple(t) => t.elts.iter().collect(),
        other => vec![other],
    }
}

pub(crate) use leaves::{nullable, simple_type};
