//! The leaf mappings of annotations: `Literal[...]`, tuples, built-in names, and nullability.

use std::collections::HashSet;

use ruff_python_ast::Expr;
use serde_json::{Value, json};

use super::{Mapper, slice_args};
use crate::schema::diagnostic::Code;
use crate::schema::literal::{literal, values_enum};

impl Mapper<'_, '_> {
    pub(crate) fn tuple(&mut self, expr: &Expr, args: &[&Expr], depth: u32) -> Option<Value> {
        if let [item, Expr::EllipsisLiteral(_)] = args {
            let items = self.map(item, depth + 1)?;
            return Some(json!({"type": "array", "items": items}));
        }
        if args.iter().any(|a| a.is_ellipsis_literal_expr()) {
            self.report(
                Code::InvalidAnnotation,
                expr,
                "`...` is only allowed as `tuple[T, ...]`".into(),
                None,
            );
            return None;
        }
        let mut prefix = Vec::new();
        for a in args {
            prefix.push(self.map(a, depth + 1)?);
        }
        let n = prefix.len();
        Some(json!({"type": "array", "prefixItems": prefix, "minItems": n, "maxItems": n}))
    }

    pub(crate) fn literal(&mut self, expr: &Expr, args: &[&Expr]) -> Option<Value> {
        let mut values = Vec::new();
        // Keyed by the JSON text: a Literal of many values stays linear to deduplicate.
        let mut seen = HashSet::new();
        for a in args {
            let v = match a {
                Expr::NoneLiteral(_)
                | Expr::BooleanLiteral(_)
                | Expr::StringLiteral(_)
                | Expr::NumberLiteral(_)
                | Expr::UnaryOp(_) => literal(a),
                Expr::Subscript(s)
                    if self.qualified(&s.value).as_deref() == Some("typing.Literal") =>
                {
                    let nested = self.literal(a, &slice_args(&s.slice))?;
                    if let Some(Value::Array(vs)) = nested.get("enum") {
                        values.extend(vs.iter().filter(|v| seen.insert(v.to_string())).cloned());
                    }
                    continue;
                }
                _ => None,
            };
            match v {
                Some(v) => {
                    if seen.insert(v.to_string()) {
                        values.push(v);
                    }
                }
                None => {
                    self.report(
                        Code::UnsupportedType,
                        a,
                        "`Literal` values must be str, int, float, bool or None literals".into(),
                        None,
                    );
                    return None;
                }
            }
        }
        if values.is_empty() {
            self.report(
                Code::InvalidAnnotation,
                expr,
                "`Literal` needs at least one value".into(),
                None,
            );
            return None;
        }
        Some(values_enum(values))
    }
}

/// Schemas of non-generic names.
pub(crate) fn simple_type(q: &str) -> Option<Value> {
    Some(match q {
        "builtins.str" => json!({"type": "string"}),
        "builtins.int" => json!({"type": "integer"}),
        "builtins.float" => json!({"type": "number"}),
        "builtins.bool" => json!({"type": "boolean"}),
        "builtins.bytes" => json!({"type": "string", "contentEncoding": "base64"}),
        "builtins.list" | "typing.List" | "typing.Sequence" | "typing.MutableSequence" => {
            json!({"type": "array"})
        }
        "builtins.set" | "builtins.frozenset" | "typing.Set" | "typing.FrozenSet" => {
            json!({"type": "array", "uniqueItems": true})
        }
        "builtins.tuple" | "typing.Tuple" => json!({"type": "array"}),
        "builtins.dict" | "typing.Dict" | "typing.Mapping" | "typing.MutableMapping" => {
            json!({"type": "object"})
        }
        "typing.Any" | "builtins.object" => json!({}),
        "datetime.datetime" => json!({"type": "string", "format": "date-time"}),
        "datetime.date" => json!({"type": "string", "format": "date"}),
        "datetime.time" => json!({"type": "string", "format": "time"}),
        "datetime.timedelta" => json!({"type": "string", "format": "duration"}),
        "uuid.UUID" => json!({"type": "string", "format": "uuid"}),
        // As Pydantic has it: a JSON number, or a string that keeps every digit.
        "decimal.Decimal" => json!({"anyOf": [{"type": "number"}, {"type": "string"}]}),
        _ => return None,
    })
}

/// `schema` or null.
pub(crate) fn nullable(schema: Value) -> Value {
    let Value::Object(mut o) = schema else {
        return json!({"anyOf": [schema, {"type": "null"}]});
    };
    if o.get("type") == Some(&json!("null")) || o.is_empty() {
        return Value::Object(o);
    }
    if let Some(Value::Array(branches)) = o.get_mut("anyOf") {
        if !branches
            .iter()
            .any(|b| b.get("type") == Some(&json!("null")))
        {
            branches.push(json!({"type": "null"}));
        }
        return Value::Object(o);
    }
    if o.contains_key("$ref") {
        return json!({"anyOf": [Value::Object(o), {"type": "null"}]});
    }
    match o.get_mut("type") {
        Some(Value::String(t)) => {
            let t = t.clone();
            o.insert("type".into(), json!([t, "null"]));
        }
        Some(Value::Array(ts)) => {
            if !ts.contains(&json!("null")) {
                ts.push(json!("null"));
            }
        }
        _ => return json!({"anyOf": [Value::Object(o), {"type": "null"}]}),
    }
    if let Some(Value::Array(values)) = o.get_mut("enum")
        && !values.contains(&Value::Null)
    {
        values.push(Value::Null);
    }
    Value::Object(o)
}
