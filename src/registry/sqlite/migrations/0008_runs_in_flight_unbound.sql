-- Calls in flight, schema version 8: a record no longer references its tenant through
-- a foreign key. Only a call its tenant was admitted to make writes one, tenants are
-- never deleted, and the sweep of interrupted calls drops a record whose tenant is
-- not there (a copied registry's, say) instead of failing on it. On PostgreSQL the
-- key's check locked the tenant's row at every call's start (see the PostgreSQL file);
-- both schemas keep one meaning at each version. SQLite cannot drop a constraint: the
-- table (the calls running now, a few rows) is made again.
CREATE TABLE runs_in_flight_unbound (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    tool_id       TEXT NOT NULL,
    version_id    TEXT NOT NULL,
    key_hint      TEXT,
    started_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
INSERT INTO runs_in_flight_unbound
    SELECT id, tenant_id, tool_id, version_id, key_hint, started_at_ms, expires_at_ms
    FROM runs_in_flight;
DROP TABLE runs_in_flight;
ALTER TABLE runs_in_flight_unbound RENAME TO runs_in_flight;
