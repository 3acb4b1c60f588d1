-- A tenant's ceilings across every node (used when several nodes share the database):
-- one row per call running anywhere, held under a lease that its node renews, so a
-- killed node's slots come back once their lease runs out; and one token bucket per
-- tenant for its calls per minute.
CREATE TABLE run_slots (
    id              TEXT PRIMARY KEY,
    tenant_id       TEXT NOT NULL,
    node            TEXT NOT NULL,
    expires_at_ms   BIGINT NOT NULL
);

CREATE INDEX run_slots_by_tenant ON run_slots (tenant_id, expires_at_ms);
CREATE INDEX run_slots_by_node ON run_slots (node);

-- Tokens in thousandths, refilled continuously up to the tenant's calls per minute.
-- Losing it in a crash only refills the buckets.
CREATE UNLOGGED TABLE rate_buckets (
    tenant_id       TEXT PRIMARY KEY,
    tokens_milli    BIGINT NOT NULL,
    refilled_at_ms  BIGINT NOT NULL
);
