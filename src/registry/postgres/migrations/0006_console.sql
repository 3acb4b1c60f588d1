-- The review console, schema version 6: the same meaning as
-- migrations/sqlite/0006_console.sql.

CREATE TABLE console_links (
    token_hash      BYTEA PRIMARY KEY,
    tenant_id       TEXT REFERENCES tenants (id),
    reviewer_key_id TEXT REFERENCES reviewer_keys (id),
    operator_fp     TEXT,
    created_at_ms   BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL,
    used_at_ms      BIGINT
);

CREATE TABLE console_sessions (
    token_hash      BYTEA PRIMARY KEY,
    tenant_id       TEXT REFERENCES tenants (id),
    reviewer_key_id TEXT REFERENCES reviewer_keys (id),
    operator_fp     TEXT,
    csrf_token      TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    last_seen_ms    BIGINT NOT NULL,
    expires_at_ms   BIGINT NOT NULL
);

CREATE INDEX console_sessions_by_reviewer_key ON console_sessions (reviewer_key_id);

CREATE INDEX audit_events_by_tool ON audit_events (tenant_id, tool_id, kind, at_ms);
