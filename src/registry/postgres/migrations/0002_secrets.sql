-- Per-tenant secrets, sealed by the app before they reach this table.
CREATE TABLE secrets (
    tenant_id       TEXT NOT NULL REFERENCES tenants (id),
    name            TEXT NOT NULL,
    key_id          TEXT NOT NULL,
    nonce           BYTEA NOT NULL,
    ciphertext      BYTEA NOT NULL,
    created_at_ms   BIGINT NOT NULL,
    updated_at_ms   BIGINT NOT NULL,
    PRIMARY KEY (tenant_id, name)
);
