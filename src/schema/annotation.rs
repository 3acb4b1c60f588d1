//! Python annotations -> JSON Schema.
//!
//! Names are resolved through the file's imports (`import typing as t` makes `t.List` mean
//! `typing.List`); classes defined in the file become `$defs` entries referenced by `$ref`.
//! The leaf mappings (literals, tuples, built-in names, nullability) are in [`leaves`].

mod leaves;

use std::collections::HashSet;

use ruff_python_ast::{self as ast, Expr, Operator};
use serde_json::{Map, Value, json};

use super::diagnostic::{Code, Diagnostic, LineIndex, Severity};
use super::models;
use super::source::{Module, Resolved, span};

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
        if self.module.class_kind(class) != super::source::ClassKind::Enum {
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
        let (inner, description, constraints) = self.unwrap_annotated(expr, 0)?;
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
        })
    }

    /// `Annotated[T, meta...]` -> (T, description, constraints); anything else unchanged.
    pub(crate) fn unwrap_annotated<'e>(
        &mut self,
        expr: &'e Expr,
        depth: u32,
    ) -> Option<(&'e Expr, Option<String>, Map<String, Value>)> {
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
            let (mut desc, mut constraints) = (None, Map::new());
            for m in meta {
                match m {
                    Expr::StringLiteral(s) => desc = Some(s.value.to_str().to_string()),
                    Expr::Call(call) => {
                        let field = models::field_call(self, call);
                        if field.description.is_some() {
                            desc = field.description;
                        }
                        constraints.extend(field.constraints);
                    }
                    _ => {}
                }
            }
            if depth < MAX_DEPTH {
                let (inner, d2, c2) = self.unwrap_annotated(first, depth + 1)?;
                constraints.extend(c2);
                return Some((inner, desc.or(d2), constraints));
            }
            return Some((first, desc, constraints));
        }
        Some((expr, None, Map::new()))
    }

    /// The qualified name of a name expression, if imported or built in.
    pub(crate) fn qualified(&self, expr: &Expr) -> Option<String> {
        match self.module.resolve(expr)? {
            Resolved::Qualified(q) | Resolved::Unimported(q) => Some(q),
            _ => None,
        }
    }

    /// Flattens `A | B | None` and `Union[A, B]` / `Optional[A]` into members.
    fn union_members<'e>(
        &mut self,
        expr: &'e Expr,
        out: &mut Members<'e>,
        depth: u32,
    ) -> Option<()> {
        if self.too_deep(expr, depth) {
            return None;
        }
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
            Expr::Name(_) | Expr::Attribute(_) => self.name(expr),
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

    fn name(&mut self, expr: &Expr) -> Option<Value> {
        match self.module.resolve(expr) {
            Some(Resolved::Local(class)) => self.local_class(expr, class),
            Some(Resolved::Qualified(q)) => self.qualified_type(expr, &q),
            Some(Resolved::Unimported(q)) => {
                self.unimported(expr, &q);
                self.qualified_type(expr, &q)
            }
            Some(Resolved::Unknown(n)) => {
                self.report(
                    Code::UnknownType,
                    expr,
                    format!("unknown type `{n}`"),
                    Some("import it, or define it in this file as an Enum, TypedDict, dataclass or pydantic model"),
                );
                None
            }
            None => None,
        }
    }

    fn unimported(&mut self, expr: &Expr, q: &str) {
        let short = q.rsplit('.').next().unwrap_or(q);
        self.warn(
            Code::UnimportedName,
            expr,
            format!("`{short}` is used without an import; assuming `{q}`"),
            Some(&format!("add `from typing import {short}`")),
        );
    }

    fn qualified_type(&mut self, expr: &Expr, q: &str) -> Option<Value> {
        if let Some(s) = simple_type(q) {
            return Some(s);
        }
        let short = q.rsplit('.').next().unwrap_or(q);
        let (code, message, hint) = match q {
            "typing.Optional" | "typing.Union" | "typing.Literal" | "typing.Annotated" => (
                Code::InvalidAnnotation,
                format!("`{short}` needs type arguments"),
                format!("write `{short}[...]`"),
            ),
            _ => (
                Code::UnsupportedType,
                format!("`{q}` has no JSON Schema mapping"),
                "use str, int, float, bool, list, dict, Literal, an Enum, a TypedDict, a dataclass or a pydantic model defined in this file".to_string(),
            ),
        };
        self.report(code, expr, message, Some(&hint));
        None
    }

    /// A class defined in this file: its schema goes to `$defs` once.
    fn local_class(&mut self, expr: &Expr, class: &'a ast::StmtClassDef) -> Option<Value> {
        let name = class.name.to_string();
        let reference = json!({ "$ref": format!("#/$defs/{name}") });
        if self.defs.contains_key(&name) || self.building.contains(&name) {
            return Some(reference);
        }
        let kind = self.module.class_kind(class);
        if kind == super::source::ClassKind::Plain {
            self.report(
                Code::UnsupportedType,
                expr,
                format!("class `{name}` is not an Enum, TypedDict, dataclass or pydantic model"),
                Some("derive it from `enum.Enum`, `typing.TypedDict` or `pydantic.BaseModel`, or decorate it with `@dataclass`"),
            );
            return None;
        }
        self.building.insert(name.clone());
        self.defs.insert(name.clone(), Value::Null);
        let built = models::build(self, class, kind);
        self.building.remove(&name);
        match built {
            Some(schema) => {
                self.defs.insert(name, schema);
                Some(reference)
            }
            None => {
                self.defs.remove(&name);
                None
            }
        }
    }

    fn generic(&mut self, expr: &Expr, sub: &ast::ExprSubscript, depth: u32) -> Option<Value> {
        let args = slice_args(&sub.slice);
        let q = match self.module.resolve(&sub.value) {
            Some(Resolved::Qualified(q)) => q,
            Some(Resolved::Unimported(q)) => {
                self.unimported(&sub.value, &q);
                q
            }
            Some(Resolved::Unknown(n)) => {
                self.report(
                    Code::UnknownType,
                    &sub.value,
                    format!("unknown type `{n}`"),
                    Some("import it from `typing`"),
                );
                return None;
            }
            _ => {
                self.report(
                    Code::UnsupportedType,
                    expr,
                    "generic classes defined in this file are not supported".into(),
                    None,
                );
                return None;
            }
        };
        let short = q.rsplit('.').next().unwrap_or(&q).to_string();
        let arity = |this: &mut Self, n: usize| -> Option<()> {
            if args.len() == n {
                return Some(());
            }
            this.report(
                Code::InvalidAnnotation,
                expr,
                format!("`{short}` takes {n} type argument(s), got {}", args.len()),
                None,
            );
            None
        };
        match q.as_str() {
            "typing.Optional" | "typing.Union" => {
                let mut members = Members::default();
                self.union_members(expr, &mut members, depth)?;
                self.members_nullable(&members, depth)
            }
            "typing.Annotated" => {
                let (inner, desc, constraints) = self.unwrap_annotated(expr, depth)?;
                let mut schema = self.map(inner, depth + 1)?;
                models::apply_constraints(&mut schema, &constraints);
                if let (Some(d), Value::Object(o)) = (desc, &mut schema) {
                    o.insert("description".into(), Value::String(d));
                }
                Some(schema)
            }
            "typing.Literal" => self.literal(expr, &args),
            "builtins.list"
            | "typing.List"
            | "typing.Sequence"
            | "typing.MutableSequence"
            | "typing.Iterable"
            | "typing.Collection" => {
                arity(self, 1)?;
                let items = self.map(args[0], depth + 1)?;
                Some(json!({"type": "array", "items": items}))
            }
            "builtins.set" | "builtins.frozenset" | "typing.Set" | "typing.FrozenSet"
            | "typing.AbstractSet" | "typing.MutableSet" => {
                arity(self, 1)?;
                let items = self.map(args[0], depth + 1)?;
                Some(json!({"type": "array", "items": items, "uniqueItems": true}))
            }
            "builtins.tuple" | "typing.Tuple" => self.tuple(expr, &args, depth),
            "builtins.dict" | "typing.Dict" | "typing.Mapping" | "typing.MutableMapping" => {
                arity(self, 2)?;
                let key = self.map(args[0], depth + 1)?;
                if key.get("type") != Some(&json!("string")) || key.get("enum").is_some() {
                    self.report(
                        Code::UnsupportedType,
                        args[0],
                        "dictionary keys must be `str`: JSON object keys are strings".into(),
                        Some("use `dict[str, T]`, or a TypedDict / pydantic model for fixed keys"),
                    );
                    return None;
                }
                let value = self.map(args[1], depth + 1)?;
                if value.as_object().is_some_and(|o| o.is_empty()) {
                    Some(json!({"type": "object"}))
                } else {
                    Some(json!({"type": "object", "additionalProperties": value}))
                }
            }
            "typing.Required" | "typing.NotRequired" | "typing.ReadOnly" => {
                arity(self, 1)?;
                self.map(args[0], depth + 1)
            }
            _ => {
                self.report(
                    Code::UnsupportedType,
                    expr,
                    format!("`{q}[...]` has no JSON Schema mapping"),
                    Some("use list, set, tuple, dict, Optional, Union, Literal or Annotated"),
                );
                None
            }
        }
    }
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
