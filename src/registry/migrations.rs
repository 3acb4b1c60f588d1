//! Schema migrations, one list per database (each driver's SQL files, under
//! `sqlite/migrations/` and `postgres/migrations/`), compiled in and applied in order.
//!
//! Migration `n` (1-based) moves the schema from version `n - 1` to `n`; both lists have
//! the same length and the same meaning at each version, so a version number says the
//! same thing in SQLite and in PostgreSQL (`warden db copy` relies on it). Never edit a
//! released migration: add the next file to both lists.

/// SQLite's migrations (`sqlite/migrations/`), tracked by `PRAGMA user_version`.
pub(super) const SQLITE: &[&str] = &[
    include_str!("sqlite/migrations/0001_init.sql"),
    include_str!("sqlite/migrations/0002_secrets.sql"),
    include_str!("sqlite/migrations/0003_node_keys.sql"),
    include_str!("sqlite/migrations/0004_shared_ceilings.sql"),
    include_str!("sqlite/migrations/0005_reviews.sql"),
    include_str!("sqlite/migrations/0006_console.sql"),
    include_str!("sqlite/migrations/0007_runs_in_flight.sql"),
    include_str!("sqlite/migrations/0008_runs_in_flight_unbound.sql"),
    include_str!("sqlite/migrations/0009_servers.sql"),
    include_str!("sqlite/migrations/0010_async_runs.sql"),
];

/// PostgreSQL's migrations (`postgres/migrations/`), tracked in `warden_schema` and
/// applied under an advisory lock.
pub(super) const POSTGRES: &[&str] = &[
    include_str!("postgres/migrations/0001_init.sql"),
    include_str!("postgres/migrations/0002_secrets.sql"),
    include_str!("postgres/migrations/0003_node_keys.sql"),
    include_str!("postgres/migrations/0004_shared_ceilings.sql"),
    include_str!("postgres/migrations/0005_reviews.sql"),
    include_str!("postgres/migrations/0006_console.sql"),
    include_str!("postgres/migrations/0007_runs_in_flight.sql"),
    include_str!("postgres/migrations/0008_runs_in_flight_unbound.sql"),
    include_str!("postgres/migrations/0009_servers.sql"),
    include_str!("postgres/migrations/0010_async_runs.sql"),
];

/// The schema version after every migration.
pub(super) fn latest() -> u32 {
    const { assert!(SQLITE.len() == POSTGRES.len()) };
    u32::try_from(SQLITE.len()).unwrap_or(u32::MAX)
}
