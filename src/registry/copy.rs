//! Copying a whole registry into another database (`warden db copy`): a SQLite
//! registry moved to PostgreSQL when one box is no longer enough.
//!
//! Every durable table is copied row by row, values exactly as stored (event JSON,
//! hashes, times), so every audit chain verifies in the copy as it did in the source.
//! The copy is one transaction on the target, which must be empty: it has all of the
//! source or nothing. Calls left in flight are copied (the copy records them as
//! interrupted, as the source would have); run slots and rate buckets are not (they
//! describe this moment's ceilings), nor the review console's sign-in links and sessions (short-lived: reviewers
//! sign in again).

use super::db::{Row, Tx, Value};
use super::{Registry, RegistryError};

/// The tables copied, in an order their foreign keys accept, with their columns and
/// the key they are read in order of (always the first columns).
const TABLES: &[(&str, &str, &str)] = &[
    (
        "tenants",
        "id, name, key_hash, key_hint, policy, created_at_ms, audit_seq, audit_head",
        "id",
    ),
    (
        "runs_in_flight",
        "id, tenant_id, tool_id, version_id, key_hint, started_at_ms, expires_at_ms",
        "id",
    ),
    (
        "tools",
        "id, tenant_id, name, description, enabled, current_version, created_at_ms, updated_at_ms, \
         pending_version, server_id",
        "id",
    ),
    (
        "versions",
        "tool_id, version_id, number, manifest, created_at_ms, review",
        "tool_id, version_id",
    ),
    ("tool_tags", "tool_id, tag", "tool_id, tag"),
    (
        "audit_events",
        "tenant_id, seq, at_ms, kind, tool_id, event, prev_hash, hash",
        "tenant_id, seq",
    ),
    (
        "secrets",
        "tenant_id, name, key_id, nonce, ciphertext, created_at_ms, updated_at_ms",
        "tenant_id, name",
    ),
    ("node_keys", "name, fingerprint, recorded_at_ms", "name"),
    (
        "async_runs",
        "id, tenant_id, tool_id, version_number, version_id, status, arguments, callback_url, \
         queue_timeout_ms, created_at_ms, started_at_ms, ended_at_ms, node, lease_until_ms, \
         cancel_requested, attempts, result, delete_after_ms, callback_state, \
         callback_attempts, callback_due_ms",
        "id",
    ),
    (
        "reviewer_keys",
        "id, tenant_id, key_hash, key_hint, created_at_ms, revoked_at_ms",
        "id",
    ),
];

/// Rows read from the source at a time: 1000.
const PAGE: i64 = 1000;

/// What [`Registry::copy_into`] copied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Copied {
    /// Rows per table, in copy order.
    pub tables: Vec<(&'static str, u64)>,
}

impl Registry {
    /// Copies everything this registry holds into `target`, which must hold no tenant
    /// yet ([`RegistryError::NotEmpty`] otherwise). `progress` hears each table's name
    /// and the rows copied so far.
    pub fn copy_into(
        &self,
        target: &Registry,
        mut progress: impl FnMut(&str, u64),
    ) -> Result<Copied, RegistryError> {
        let mut copied = Copied::default();
        target.write(|to| {
            let tenants: i64 = to.query_one("SELECT count(*) FROM tenants", &[])?.get(0)?;
            if tenants > 0 {
                return Err(RegistryError::NotEmpty);
            }
            // One snapshot of the source throughout.
            self.read(|from| {
                for (table, columns, key) in TABLES {
                    let n = copy_table(from, to, table, columns, key, &mut progress)?;
                    copied.tables.push((table, n));
                }
                Ok(())
            })
        })?;
        Ok(copied)
    }
}

fn copy_table(
    from: &mut Tx<'_>,
    to: &mut Tx<'_>,
    table: &str,
    columns: &str,
    key: &str,
    progress: &mut impl FnMut(&str, u64),
) -> Result<u64, RegistryError> {
    let width = columns.split(',').count();
    let placeholders = |from: usize, n: usize| {
        (from..from + n)
            .map(|i| format!("?{i}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let insert = format!(
        "INSERT INTO {table} ({columns}) VALUES ({})",
        placeholders(1, width)
    );
    // Read in key order, each page after the last row read (the key's columns lead the
    // column list): no page costs more than the first, however long the table.
    let keys = key.split(',').count();
    let first = format!("SELECT {columns} FROM {table} ORDER BY {key} LIMIT ?1");
    let next = format!(
        "SELECT {columns} FROM {table} WHERE ({key}) > ({}) ORDER BY {key} LIMIT ?1",
        placeholders(2, keys)
    );
    let mut copied = 0u64;
    let mut after: Option<Vec<Value>> = None;
    loop {
        let rows: Vec<Row> = match &after {
            None => from.query(&first, &[Value::Int(PAGE)])?,
            Some(last) => {
                let mut params = vec![Value::Int(PAGE)];
                params.extend_from_slice(last);
                from.query(&next, &params)?
            }
        };
        for row in &rows {
            to.execute(&insert, &row.0)?;
        }
        copied += rows.len() as u64;
        progress(table, copied);
        match rows.last() {
            Some(last) if rows.len() as i64 == PAGE => after = Some(last.0[..keys].to_vec()),
            _ => return Ok(copied),
        }
    }
}
