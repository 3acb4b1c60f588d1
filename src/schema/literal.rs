//! Python literals (defaults, `Literal[...]` values, enum members) as JSON values.

use ruff_python_ast::{Expr, Number, UnaryOp};
use serde_json::{Map, Number as JsonNumber, Value};

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
        Expr::UnaryOp(u) if u.op == UnaryOp::USub => match scalar(&u.operand)? {
            Value::Number(n) => negate(&n),
            _ => None,
        },
        Expr::List(l) => items(&l.elts, depth),
        Expr::Tuple(t) => items(&t.elts, depth),
        Expr::Set(s) => items(&s.elts, depth),
        Expr::Dict(d) => {
            let mut map = Map::new();
            for item in &d.items {
                let Some(Value::String(key)) =
                    item.key.as_ref().and_then(|k| literal_depth(k, depth + 1))
                else {
                    return None;
                };
                map.insert(key, literal_depth(&item.value, depth + 1)?);
            }
            Some(Value::Object(map))
        }
        other => scalar(other),
    }
}

fn items(elts: &[Expr], depth: u32) -> Option<Value> {
    elts.iter()
        .map(|e| literal_depth(e, depth + 1))
        .collect::<Option<Vec<_>>>()
        .map(Value::Array)
}

/// A single constant as JSON (`None` -> null); bytes, complex numbers, `...` and f-strings
/// have no JSON form.
pub(crate) fn scalar(expr: &Expr) -> Option<Value> {
    match expr {
        Expr::NoneLiteral(_) => Some(Value::Null),
        Expr::BooleanLiteral(b) => Some(Value::Bool(b.value)),
        Expr::StringLiteral(s) => Some(Value::String(s.value.to_str().to_string())),
        Expr::NumberLiteral(n) => match &n.value {
            Number::Int(i) => i
                .as_i64()
                .map(|v| Value::Number(v.into()))
                .or_else(|| i.as_u64().map(|v| Value::Number(v.into()))),
            Number::Float(f) => JsonNumber::from_f64(*f).map(Value::Number),
            Number::Complex { .. } => None,
        },
        _ => None,
    }
}

fn negate(n: &JsonNumber) -> Option<Value> {
    if let Some(i) = n.as_i64() {
        return i.checked_neg().map(|v| Value::Number(v.into()));
    }
    if n.is_u64() {
        return None;
    }
    n.as_f64()
        .and_then(|f| JsonNumber::from_f64(-f))
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
