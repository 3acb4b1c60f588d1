//! Schema migrations: SQL files compiled in, applied in order, tracked by
//! `PRAGMA user_version`.
//!
//! Migration `n` (1-based) moves the schema from version `n - 1` to `n`. Each runs in its
//! own transaction with the `user_version` bump, so a crash mid-migration leaves the
//! previous version intact. Never edit a released migration: add the next file.

use rusqlite::Connection;

use super::RegistryError;

/// The migrations, in order; the schema version after all of them is `MIGRATIONS.len()`.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_init.sql"),
    include_str!("migrations/0002_secrets.sql"),
];

/// Brings the schema of `conn` to the newest version.
pub(super) fn apply(conn: &mut Connection) -> Result<(), RegistryError> {
    let supported = u32::try_from(MIGRATIONS.len()).unwrap_or(u32::MAX);
    let found: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if found > supported {
        return Err(RegistryError::TooNew { found, supported });
    }
    for (version, sql) in (1u32..).zip(MIGRATIONS).skip(found as usize) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        // Re-read inside the lock: another process may have migrated meanwhile.
        let now: u32 = tx.pragma_query_value(None, "user_version", |r| r.get(0))?;
        if now >= version {
            continue;
        }
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", version)?;
        tx.commit()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn migrating_twice_changes_nothing() {
        let mut conn = Connection::open_in_memory().unwrap();
        apply(&mut conn).unwrap();
        apply(&mut conn).unwrap();
        let v: u32 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .unwrap();
        assert_eq!(v as usize, MIGRATIONS.len());
    }

    #[test]
    fn a_newer_database_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        assert!(matches!(
            apply(&mut conn),
            Err(RegistryError::TooNew { found: 99, .. })
        ));
    }
}
