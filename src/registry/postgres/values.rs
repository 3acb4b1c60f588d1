//! Values between the registry and PostgreSQL: parameters (`?N` written as `$N`, each
//! [`Value`] as the column's type asks) and result rows.

use tokio_postgres::types::{IsNull, ToSql, Type, to_sql_checked};

use crate::registry::RegistryError;
use crate::registry::db::{Row, Value};

/// `sql` with SQLite's `?N` parameters written as PostgreSQL's `$N` (outside quotes).
pub(super) fn placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len());
    let mut quoted = false;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\'' {
            quoted = !quoted;
        }
        if c == '?' && !quoted && chars.peek().is_some_and(char::is_ascii_digit) {
            out.push('$');
        } else {
            out.push(c);
        }
    }
    out
}

impl ToSql for Value {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut bytes::BytesMut,
    ) -> Result<IsNull, Box<dyn std::error::Error + Sync + Send>> {
        let wrong = || format!("a {self:?} cannot be a {ty} parameter").into();
        match self {
            Value::Null => Ok(IsNull::Yes),
            Value::Int(i) => match *ty {
                Type::INT2 => i16::try_from(*i)?.to_sql(ty, out),
                Type::INT4 => i32::try_from(*i)?.to_sql(ty, out),
                Type::INT8 => i.to_sql(ty, out),
                // SQLite's truth values, in a copy to PostgreSQL.
                Type::BOOL if matches!(i, 0 | 1) => (*i == 1).to_sql(ty, out),
                _ => Err(wrong()),
            },
            Value::Bool(b) if *ty == Type::BOOL => b.to_sql(ty, out),
            Value::Text(s) if <&str as ToSql>::accepts(ty) => s.as_str().to_sql(ty, out),
            Value::Blob(b) if *ty == Type::BYTEA => b.as_slice().to_sql(ty, out),
            _ => Err(wrong()),
        }
    }

    fn accepts(_: &Type) -> bool {
        true
    }

    to_sql_checked!();
}

/// A result row as [`Value`]s.
pub(super) fn row(r: &tokio_postgres::Row) -> Result<Row, RegistryError> {
    let bad = |i: usize, e: &dyn std::fmt::Display| {
        RegistryError::corrupt("a query's result", format!("column {i}: {e}"))
    };
    let mut values = Vec::with_capacity(r.len());
    for (i, column) in r.columns().iter().enumerate() {
        let ty = column.type_();
        let v = match *ty {
            Type::INT8 => r.try_get::<_, Option<i64>>(i).map(|v| v.map(Value::Int)),
            Type::INT4 => r
                .try_get::<_, Option<i32>>(i)
                .map(|v| v.map(|v| Value::Int(v.into()))),
            Type::INT2 => r
                .try_get::<_, Option<i16>>(i)
                .map(|v| v.map(|v| Value::Int(v.into()))),
            Type::BOOL => r.try_get::<_, Option<bool>>(i).map(|v| v.map(Value::Bool)),
            Type::BYTEA => r
                .try_get::<_, Option<Vec<u8>>>(i)
                .map(|v| v.map(Value::Blob)),
            Type::VOID => Ok(None),
            _ if <String as tokio_postgres::types::FromSql>::accepts(ty) => r
                .try_get::<_, Option<String>>(i)
                .map(|v| v.map(Value::Text)),
            _ => return Err(bad(i, &format!("unexpected type {ty}"))),
        };
        values.push(v.map_err(|e| bad(i, &e))?.unwrap_or(Value::Null));
    }
    Ok(Row(values))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_become_dollars_outside_quotes() {
        assert_eq!(
            placeholders("SELECT a FROM t WHERE b = ?1 AND c = '?2' AND d = ?10"),
            "SELECT a FROM t WHERE b = $1 AND c = '?2' AND d = $10"
        );
    }
}
