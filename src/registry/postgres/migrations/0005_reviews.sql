-- Reviews, schema version 5: the same meaning as migrations/sqlite/0005_reviews.sql.

ALTER TABLE versions ADD COLUMN review TEXT NOT NULL DEFAULT 'approved'
    CHECK (review IN ('approved', 'pending', 'rejected', 'superseded'));

ALTER TABLE tools ADD COLUMN pending_version TEXT;

CREATE TABLE reviewer_keys (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    key_hash        BYTEA UNIQUE,
    key_hint        TEXT NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    revoked_at_ms   BIGINT
);

CREATE INDEX reviewer_keys_by_tenant ON reviewer_keys (tenant_id);
