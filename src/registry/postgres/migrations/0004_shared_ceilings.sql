-- A tenant's ceilings across every node (used when several nodes share the database).
-- Run slots: rows 0..max_concurrent_calls-1 per tenant, each free (holder NULL) or held
-- by one running call under a lease its node renews, so a killed node's slots come back
-- once their lease runs out. A call takes a free or expired row (FOR UPDATE SKIP LOCKED).
CREATE TABLE run_slots (
    tenant_id       TEXT NOT NULL,
    n               BIGINT NOT NULL,
    holder          TEXT,
    node            TEXT,
    expires_at_ms   BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (tenant_id, n)
);

CREATE INDEX run_slots_by_node ON run_slots (node);

-- One token bucket per tenant for its calls per minute: tokens in thousandths, refilled
-- continuously up to the tenant's calls per minute.
-- Losing it in a crash only refills the buckets.
CREATE UNLOGGED TABLE rate_buckets (
    tenant_id       TEXT PRIMARY KEY,
    tokens_milli    BIGINT NOT NULL,
    refilled_at_ms  BIGINT NOT NULL
);
