//! Python literals (defaults, `Literal[...]` values, enum members) as JSON values.

use rustpython_parser::ast::{Constant, Expr, UnaryOp};
use serde_json::{Map, Number, Value};

/// The JSON value of a literal expression, or `None` when it is not a plain literal
/// (a call, a name, bytes, a non-finite float, a dict with non-string keys, ...).
pub(crate) fn literal(expr: &Expr) -> Option<Value> {
    literal_depth(expr, 0)
}

fn literal_depth(expr: &Expr, depth: u32) -> Option<Value> {
    if depth > 32 {
        return None;
    }
    match expr {
        Expr::Constant(c) => constant(&c.value),
        Expr::UnaryOp(u) if u.op == UnaryOp::USub => match &*u.operand {
            Expr::Constant(c) => match constant(&c.value)? {
                Value::Number(n) => negate(&n),
                _ => None,
            },
            _ => None,
        },
        Expr::List(l) => items(&l.elts, depth),
        Expr::Tuple(t) => items(&t.elts, depth),
        Expr::Set(s) => items(&s.elts, depth),
        Expr::Dict(d) => {
            let mut map = Map::new();
            for (k, v) in d.keys.iter().zip(&d.values) {
                let Some(Value::String(key)) = k.as_ref().and_then(|k| literal_depth(k, depth + 1))
                else {
                    return None;
                };
                map.insert(key, literal_depth(v, depth + 1)?);
            }
            Some(Value::Object(map))
        }
        _ => None,
    }
}

fn items(elts: &[Expr], depth: u32) -> Option<Value> {
    elts.iter()
        .map(|e| literal_depth(e, depth + 1))
        .collect::<Option<Vec<_>>>()
        .map(Value::Array)
}

/// A constant as JSON (`None` -> null); bytes, complex and `...` have no JSON form.
pub(crate) fn constant(c: &Constant) -> Option<Value> {
    match c {
        Constant::None => Some(Value::Null),
        Constant::Bool(b) => Some(Value::Bool(*b)),
        Constant::Str(s) => Some(Value::String(s.clone())),
        Constant::Int(i) => {
            let text = i.to_string();
            if let Ok(n) = text.parse::<i64>() {
                Some(Value::Number(n.into()))
            } else {
                text.parse::<u64>().ok().map(|n| Value::Number(n.into()))
            }
        }
        Constant::Float(f) => Number::from_f64(*f).map(Value::Number),
        Constant::Tuple(items) => items
            .iter()
            .map(constant)
            .collect::<Option<Vec<_>>>()
            .map(Value::Array),
        Constant::Bytes(_) | Constant::Complex { .. } | Constant::Ellipsis => None,
    }
}

fn negate(n: &Number) -> Option<Value> {
    if let Some(i) = n.as_i64() {
        return i.checked_neg().map(|v| Value::Number(v.into()));
    }
    if n.is_u64() {
        return None;
    }
    n.as_f64()
        .and_then(|f| Number::from_f64(-f))
        .map(Value::Number)
}

/// The JSON Schema type name of a JSON value.
pub(crate) fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// `{"type": ..., "enum": values}`, typed by the values (one type, or the list of them).
pub(super) fn values_enum(values: Vec<serde_json::Value>) -> serde_json::Value {
    let mut types: Vec<&str> = Vec::new();
    for v in &values {
        let t = json_type(v);
        if !types.contains(&t) {
            types.push(t);
        }
    }
    let ty = if types.len() == 1 {
        serde_json::json!(types[0])
    } else {
        serde_json::json!(types)
    };
    serde_json::json!({"type": ty, "enum": values})
}
