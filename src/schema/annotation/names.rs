//! Names in annotations: built-in and imported types, classes of the file (also generic
//! ones, `Page[int]`), type aliases (`type Num = ...`, `Num = Annotated[...]`), type
//! parameters (`def f[T: int](x: T)`, PEP 696 defaults, `TypeVar(...)`) and `Self`.

use ruff_python_ast::{self as ast, Expr};
use serde_json::{Value, json};

use super::{Mapper, simple_type, slice_args};
use crate::schema::diagnostic::Code;
use crate::schema::models;
use crate::schema::module::{Alias, ClassKind, Resolved};

/// Most aliases expanded inside one another (`A = B`, `B = list[C]`, ...).
const MAX_ALIASES: usize = 16;

impl<'a> Mapper<'a, '_> {
    /// A name, possibly dotted (`Tank.Shrimp`, `t.Any`).
    pub(super) fn name(&mut self, expr: &Expr, depth: u32) -> Option<Value> {
        if let Expr::Name(n) = expr
            && let Some(bound) = self.binding(n.id.as_str())
        {
            return Some(bound);
        }
        match self.module.resolve_in(expr, self.scope) {
            Some(Resolved::Local(class)) => self.local_class(expr, class, &[], depth),
            Some(Resolved::Alias(alias)) => self.alias(expr, alias, &[], depth),
            Some(Resolved::Qualified(q)) if q == "typing.Self" => self.self_type(expr),
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

    /// The schema a type parameter stands for, if `name` is one in force.
    fn binding(&self, name: &str) -> Option<Value> {
        self.bindings
            .iter()
            .rev()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.clone())
    }

    pub(super) fn unimported(&mut self, expr: &Expr, q: &str) {
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

    /// `Self` inside a model: the model being built.
    fn self_type(&mut self, expr: &Expr) -> Option<Value> {
        match &self.building_now {
            Some(key) => Some(json!({ "$ref": format!("#/$defs/{key}") })),
            None => {
                self.report(
                    Code::InvalidAnnotation,
                    expr,
                    "`Self` means the class it is written in, and this annotation is in no class"
                        .into(),
                    Some("name the class instead"),
                );
                None
            }
        }
    }

    /// A class defined in this file, with type arguments when generic (`Page[int]`): its
    /// schema goes to `$defs` once per set of arguments.
    pub(super) fn local_class(
        &mut self,
        expr: &Expr,
        class: &'a ast::StmtClassDef,
        args: &[&Expr],
        depth: u32,
    ) -> Option<Value> {
        let params = self.class_params(class);
        let mut key = self.module.def_name(class);
        if !args.is_empty() {
            // Pydantic's own naming of a parametrized model: `Page[int]` is `Page_int_`.
            let inside: Vec<String> = args.iter().map(|a| spelling(a, 0)).collect();
            key = format!("{key}_{}_", sanitize(&inside.join(",")));
        }
        let reference = json!({ "$ref": format!("#/$defs/{key}") });
        if self.defs.contains_key(&key) || self.building.contains(&key) {
            return Some(reference);
        }
        let kind = self.module.class_kind(class);
        if kind == ClassKind::Plain {
            self.report(
                Code::UnsupportedType,
                expr,
                format!("class `{}` is not an Enum, TypedDict, dataclass or pydantic model", class.name),
                Some("derive it from `enum.Enum`, `typing.TypedDict` or `pydantic.BaseModel`, or decorate it with `@dataclass`"),
            );
            return None;
        }
        let bindings = self.bind_params(expr, &params, args, depth)?;
        self.building.insert(key.clone());
        self.defs.insert(key.clone(), Value::Null);
        // The class body sees its own type parameters and nested classes, not the caller's.
        let saved = (
            std::mem::replace(&mut self.bindings, bindings),
            self.scope.replace(class),
            self.building_now.replace(key.clone()),
        );
        let built = models::build(self, class, kind);
        (self.bindings, self.scope, self.building_now) = saved;
        self.building.remove(&key);
        match built {
            Some(schema) => {
                self.defs.insert(key, schema);
                Some(reference)
            }
            None => {
                self.defs.remove(&key);
                None
            }
        }
    }

    /// The type parameters of a class: `class Page[T]:` or `class Page(BaseModel, Generic[T])`.
    fn class_params(&self, class: &'a ast::StmtClassDef) -> Vec<Param<'a>> {
        if let Some(params) = class.type_params.as_deref() {
            return params.iter().map(Param::Pep695).collect();
        }
        class
            .bases()
            .iter()
            .filter_map(|b| match b {
                Expr::Subscript(s)
                    if self.qualified(&s.value).as_deref() == Some("typing.Generic") =>
                {
                    Some(slice_args(&s.slice))
                }
                _ => None,
            })
            .flatten()
            .filter_map(|e| match e {
                Expr::Name(n) => Some(Param::Old(n.id.as_str())),
                _ => None,
            })
            .collect()
    }

    /// A type alias, with type arguments when generic (`Pair[int]`).
    pub(super) fn alias(
        &mut self,
        expr: &Expr,
        alias: Alias<'a>,
        args: &[&Expr],
        depth: u32,
    ) -> Option<Value> {
        if self.aliases_open.contains(&alias.name) || self.aliases_open.len() >= MAX_ALIASES {
            self.report(
                Code::UnsupportedType,
                expr,
                format!("type alias `{}` refers to itself", alias.name),
                Some("recursive aliases are not supported: use a pydantic model or a TypedDict, which may refer to itself"),
            );
            return None;
        }
        if let Expr::Call(call) = alias.value {
            return self.type_var(call, depth);
        }
        let params: Vec<Param<'a>> = alias
            .params
            .map(|ps| ps.iter().map(Param::Pep695).collect())
            .unwrap_or_default();
        if params.is_empty() && !args.is_empty() {
            self.report(
                Code::InvalidAnnotation,
                expr,
                format!("type alias `{}` takes no type arguments", alias.name),
                None,
            );
            return None;
        }
        let bindings = self.bind_params(expr, &params, args, depth)?;
        let pushed = bindings.len();
        self.bindings.extend(bindings);
        self.aliases_open.push(alias.name);
        let out = self.map(alias.value, depth + 1);
        self.aliases_open.pop();
        self.bindings.truncate(self.bindings.len() - pushed);
        out
    }

    /// What each parameter stands for: its argument, else its default (PEP 696), else its
    /// bound or constraints, else any value.
    fn bind_params(
        &mut self,
        expr: &Expr,
        params: &[Param<'a>],
        args: &[&Expr],
        depth: u32,
    ) -> Option<Vec<(String, Value)>> {
        if args.len() > params.len() {
            self.report(
                Code::InvalidAnnotation,
                expr,
                format!(
                    "{} type argument(s) given, but it takes {}",
                    args.len(),
                    params.len()
                ),
                None,
            );
            return None;
        }
        let mut out = Vec::new();
        for (i, param) in params.iter().enumerate() {
            let schema = match args.get(i) {
                Some(arg) => self.map(arg, depth + 1)?,
                None => self.param_default(param, depth)?,
            };
            out.push((param.name().to_string(), schema));
        }
        Some(out)
    }

    fn param_default(&mut self, param: &Param<'a>, depth: u32) -> Option<Value> {
        match param {
            Param::Pep695(ast::TypeParam::TypeVar(v)) => {
                self.bound(v.default.as_deref(), v.bound.as_deref(), depth)
            }
            Param::Pep695(_) => Some(json!({})),
            Param::Old(name) => match self.module.alias(name) {
                Some(Alias {
                    value: Expr::Call(call),
                    ..
                }) => self.type_var(call, depth),
                _ => Some(json!({})),
            },
        }
    }

    /// `TypeVar("T", int, str)`, `TypeVar("T", bound=int)`, `TypeVar("T", default=int)`.
    fn type_var(&mut self, call: &ast::ExprCall, depth: u32) -> Option<Value> {
        let keyword = |name: &str| {
            call.arguments
                .keywords
                .iter()
                .find(|k| k.arg.as_ref().is_some_and(|a| a.as_str() == name))
                .map(|k| &k.value)
        };
        let constraints: Vec<&Expr> = call.arguments.args.iter().skip(1).collect();
        if !constraints.is_empty() && keyword("default").is_none() {
            return self.union(&constraints, depth);
        }
        self.bound(keyword("default"), keyword("bound"), depth)
    }

    /// A type variable's schema: its default, else its bound (a tuple of constraints is a
    /// union), else any JSON value.
    fn bound(&mut self, default: Option<&Expr>, bound: Option<&Expr>, depth: u32) -> Option<Value> {
        match (default, bound) {
            (Some(d), _) => self.map(d, depth + 1),
            (None, Some(Expr::Tuple(t))) => {
                let constraints: Vec<&Expr> = t.elts.iter().collect();
                self.union(&constraints, depth)
            }
            (None, Some(b)) => self.map(b, depth + 1),
            (None, None) => Some(json!({})),
        }
    }

    /// The type parameters of a function (`def f[T: int](x: T)`), in force for its
    /// parameters and return type.
    pub(crate) fn function_params(&mut self, params: &'a ast::TypeParams) {
        let params: Vec<Param<'a>> = params.iter().map(Param::Pep695).collect();
        let mut bindings = Vec::new();
        for param in &params {
            let schema = self.param_default(param, 0).unwrap_or_else(|| json!({}));
            bindings.push((param.name().to_string(), schema));
        }
        self.bindings = bindings;
    }
}

/// A type parameter: PEP 695 (`[T: int = str]`) or an old-style `TypeVar` named in
/// `Generic[T]`.
enum Param<'a> {
    Pep695(&'a ast::TypeParam),
    Old(&'a str),
}

impl Param<'_> {
    fn name(&self) -> &str {
        match self {
            Param::Pep695(p) => p.name().as_str(),
            Param::Old(name) => name,
        }
    }
}

/// How a type argument is spelled, for a `$defs` key (`list[str]`); `_` past a few levels.
fn spelling(expr: &Expr, depth: u32) -> String {
    if depth > 4 {
        return "_".into();
    }
    match expr {
        Expr::Name(n) => n.id.to_string(),
        Expr::Attribute(a) => a.attr.to_string(),
        Expr::StringLiteral(s) => s.value.to_str().to_string(),
        Expr::NoneLiteral(_) => "None".into(),
        Expr::Subscript(s) => {
            let inner: Vec<String> = slice_args(&s.slice)
                .iter()
                .map(|a| spelling(a, depth + 1))
                .collect();
            format!("{}[{}]", spelling(&s.value, depth + 1), inner.join(","))
        }
        _ => "_".into(),
    }
}

/// `int,list[str]` -> `int_list_str_`: a `$defs` key from type arguments' spelling.
fn sanitize(text: &str) -> String {
    text.chars()
        .filter(|c| !c.is_whitespace())
        .map(|c| {
            if c.is_alphanumeric() || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}
