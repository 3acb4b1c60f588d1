-- Runs, schema version 10: the same meaning as migrations/sqlite/0010_async_runs.sql.
CREATE TABLE async_runs (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    tool_id          TEXT NOT NULL,
    version_number   BIGINT,
    version_id       TEXT,
    status           TEXT NOT NULL,
    arguments        TEXT NOT NULL,
    callback_url     TEXT,
    queue_timeout_ms BIGINT NOT NULL,
    created_at_ms    BIGINT NOT NULL,
    started_at_ms    BIGINT,
    ended_at_ms      BIGINT,
    node             TEXT,
    lease_until_ms   BIGINT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    attempts         BIGINT NOT NULL DEFAULT 0,
    result           TEXT,
    delete_after_ms  BIGINT,
    callback_state    TEXT,
    callback_attempts BIGINT NOT NULL DEFAULT 0,
    callback_due_ms   BIGINT
);
CREATE INDEX async_runs_by_tenant ON async_runs (tenant_id, created_at_ms, id);
-- The queue bound counts a tenant's queued runs at every acceptance.
CREATE INDEX async_runs_queued ON async_runs (tenant_id) WHERE status = 'queued';
CREATE INDEX async_runs_open ON async_runs (lease_until_ms) WHERE ended_at_ms IS NULL;
CREATE INDEX async_runs_callbacks ON async_runs (callback_due_ms) WHERE callback_due_ms IS NOT NULL;
CREATE INDEX async_runs_kept ON async_runs (delete_after_ms) WHERE delete_after_ms IS NOT NULL;
