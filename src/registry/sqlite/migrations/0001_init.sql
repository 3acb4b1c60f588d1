-- Warden registry, schema version 1: tenants, tools with immutable versions, tags,
-- and a hash-chained audit trail per tenant. Times are Unix milliseconds.

CREATE TABLE tenants (
    id              TEXT PRIMARY KEY,
    name            TEXT NOT NULL,
    -- SHA-256 of the API key; NULL once the key is revoked.
    key_hash        BLOB UNIQUE,
    -- First characters of the key (wdn_1a2b3c4d), to tell keys apart in listings.
    key_hint        TEXT,
    -- TenantPolicy as JSON.
    policy          TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    -- Head of the audit chain, so that dropping the newest events is noticed.
    audit_seq       INTEGER NOT NULL DEFAULT 0,
    audit_head      TEXT NOT NULL
) STRICT;

CREATE TABLE tools (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    name            TEXT NOT NULL,
    description     TEXT,
    enabled         INTEGER NOT NULL DEFAULT 1 CHECK (enabled IN (0, 1)),
    current_version TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    UNIQUE (tenant_id, name),
    -- Deferred: a tool and its first version are inserted in one transaction.
    FOREIGN KEY (id, current_version) REFERENCES versions (tool_id, version_id)
        DEFERRABLE INITIALLY DEFERRED
) STRICT;

CREATE TABLE versions (
    tool_id         TEXT NOT NULL REFERENCES tools (id) ON DELETE CASCADE,
    -- SHA-256 content hash of the manifest (Manifest::version_id).
    version_id      TEXT NOT NULL,
    -- 1, 2, 3... per tool, in order of first registration.
    number          INTEGER NOT NULL,
    -- The Manifest as JSON, exactly as registered.
    manifest        TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (tool_id, version_id),
    UNIQUE (tool_id, number)
) STRICT;

CREATE TABLE tool_tags (
    tool_id         TEXT NOT NULL REFERENCES tools (id) ON DELETE CASCADE,
    tag             TEXT NOT NULL,
    PRIMARY KEY (tool_id, tag)
) STRICT;

CREATE INDEX tool_tags_by_tag ON tool_tags (tag, tool_id);

CREATE TABLE audit_events (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    -- 1, 2, 3... per tenant, without gaps.
    seq             INTEGER NOT NULL,
    at_ms           INTEGER NOT NULL,
    -- The event's kind, repeated from `event` for filtering.
    kind            TEXT NOT NULL,
    tool_id         TEXT,
    -- AuditEvent as JSON; hashed exactly as stored.
    event           TEXT NOT NULL,
    prev_hash       TEXT NOT NULL,
    hash            TEXT NOT NULL,
    PRIMARY KEY (tenant_id, seq)
) STRICT;
