-- Warden registry on PostgreSQL, schema version 1: tenants, tools with immutable
-- versions, tags, and a hash-chained audit trail per tenant. Times are Unix
-- milliseconds. The same meaning as migrations/sqlite/0001_init.sql.

CREATE TABLE tenants (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    -- SHA-256 of the API key; NULL once the key is revoked.
    key_hash        BYTEA UNIQUE,
    key_hint        TEXT,
    -- TenantPolicy as JSON (text: hashed and compared exactly as stored).
    policy          TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    -- Head of the audit chain; writers lock this row (FOR UPDATE) to extend it.
    audit_seq       BIGINT NOT NULL DEFAULT 0,
    audit_head      TEXT NOT NULL
);

CREATE TABLE tools (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    -- Byte order, as SQLite compares: listings page by name the same on both.
    name            TEXT COLLATE "C" NOT NULL,
    description     TEXT,
    enabled         BOOLEAN NOT NULL DEFAULT TRUE,
    current_version TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    UNIQUE (tenant_id, name)
);

CREATE TABLE versions (
    tool_id         TEXT NOT NULL REFERENCES tools (id) ON DELETE CASCADE,
    version_id      TEXT NOT NULL,
    number          BIGINT NOT NULL,
    manifest        TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (tool_id, version_id),
    UNIQUE (tool_id, number)
);

-- Deferred: a tool and its first version are inserted in one transaction.
ALTER TABLE tools ADD FOREIGN KEY (id, current_version)
    REFERENCES versions (tool_id, version_id) DEFERRABLE INITIALLY DEFERRED;

CREATE TABLE tool_tags (
    tool_id         TEXT NOT NULL REFERENCES tools (id) ON DELETE CASCADE,
    tag             TEXT COLLATE "C" NOT NULL,
    PRIMARY KEY (tool_id, tag)
);

CREATE INDEX tool_tags_by_tag ON tool_tags (tag, tool_id);

CREATE TABLE audit_events (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    seq             BIGINT NOT NULL,
    at_ms           BIGINT NOT NULL,
    kind            TEXT NOT NULL,
    tool_id         TEXT,
    event           TEXT NOT NULL,
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
);
