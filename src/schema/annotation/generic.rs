//! Subscripted annotations: `list[T]`, `dict[str, T]`, `Optional`, `Union`, `Literal`,
//! `Annotated`, and the generic classes and aliases of the file (through [`names`](super::names)).

use ruff_python_ast::{self as ast, Expr};
use serde_json::{Value, json};

use super::{Mapper, Members, slice_args};
use crate::schema::diagnostic::Code;
use crate::schema::models;
use crate::schema::module::Resolved;

impl Mapper<'_, '_> {
    pub(super) fn generic(
        &mut self,
        expr: &Expr,
        sub: &ast::ExprSubscript,
        depth: u32,
    ) -> Option<Value> {
        let args = slice_args(&sub.slice);
        let q = match self.module.resolve_in(&sub.value, self.scope) {
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
            Some(Resolved::Local(class)) => return self.local_class(expr, class, &args, depth),
            Some(Resolved::Alias(alias)) => return self.alias(expr, alias, &args, depth),
            None => {
                self.report(
                    Code::UnsupportedType,
                    expr,
                    "this expression is not a type annotation".into(),
                    Some("use a type such as `list[int]`"),
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
                let super::Unwrapped {
                    inner,
                    description: desc,
                    constraints,
                    ..
                } = self.unwrap_annotated(expr, depth)?;
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
