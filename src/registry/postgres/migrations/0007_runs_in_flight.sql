-- Calls in flight, schema version 7: the same meaning as
-- migrations/sqlite/0007_runs_in_flight.sql.

CREATE TABLE runs_in_flight (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    tool_id       TEXT NOT NULL,
    version_id    TEXT NOT NULL,
    key_hint      TEXT,
    started_at_ms BIGINT NOT NULL,
    expires_at_ms BIGINT NOT NULL
);
