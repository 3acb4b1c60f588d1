-- Reviews: a version that widens what its tool can do waits for a reviewer when the
-- tenant's policy says so (review_widening), and reviewer keys decide.

-- A version's standing: 'approved' (it may run; every version before this migration),
-- 'pending' (waiting for a reviewer), 'rejected' (never runs) or 'superseded' (it waited
-- and a newer version arrived first: it can no longer be approved).
ALTER TABLE versions ADD COLUMN review TEXT NOT NULL DEFAULT 'approved'
    CHECK (review IN ('approved', 'pending', 'rejected', 'superseded'));

-- The one version of the tool waiting for review, if any. current_version stays the
-- version calls run (the newest approved; for a tool with none yet, its newest version,
-- which does not run).
ALTER TABLE tools ADD COLUMN pending_version TEXT;

-- A tenant's reviewer keys, minted by the operator: any number, each revocable.
CREATE TABLE reviewer_keys (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    -- SHA-256 of the key; NULL once revoked.
    key_hash        BLOB UNIQUE,
    -- First characters of the key (wdr_1a2b3c4d).
    key_hint        TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    revoked_at_ms   INTEGER
) STRICT;

CREATE INDEX reviewer_keys_by_tenant ON reviewer_keys (tenant_id);
