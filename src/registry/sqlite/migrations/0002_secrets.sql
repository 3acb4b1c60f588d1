-- Per-tenant secrets (issue: outbound HTTP). Values are sealed by the app with the
-- server's key before they reach this table; the registry never sees a value.
CREATE TABLE secrets (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    name            TEXT NOT NULL,
    -- Which key sealed it: the first 16 hex digits of SHA-256 over the key.
    key_id          TEXT NOT NULL,
    nonce           BLOB NOT NULL,
    ciphertext      BLOB NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    updated_at_ms   INTEGER NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
