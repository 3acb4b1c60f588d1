-- The keys every node must share (the secret-sealing key, the audit signing key), by
-- fingerprint, never the key: a node started with another key refuses to start.
CREATE TABLE node_keys (
    name            TEXT PRIMARY KEY,
    fingerprint     TEXT NOT NULL,
    recorded_at_ms  BIGINT NOT NULL
);
