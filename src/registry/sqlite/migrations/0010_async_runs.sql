-- Runs, schema version 10: calls accepted now and run in the background (`POST
-- /v1/tools/{id}/runs`), polled and cancelled from any node. A run is written before its
-- `202` answer goes out. While it is queued or running, `node` holds it and renews
-- `lease_until_ms`; a run whose lease ran out lost its node and is taken over by
-- another (queued again, or ended `interrupted` when it was running and its tool is not
-- safe to repeat). `result` is the call's answer once it ended (the synchronous run's
-- JSON, or an error body), deleted with the row after `delete_after_ms` (the tenant's
-- retention); the run's audit events stay. A run with a `callback_url` has its result
-- posted there once it ended: `callback_state` is `pending` (next attempt due at
-- `callback_due_ms`, held a while by the node trying it), then `delivered` or
-- `undelivered` (every attempt failed). Times are Unix milliseconds.
CREATE TABLE async_runs (
    id               TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    tool_id          TEXT NOT NULL,
    version_number   INTEGER,
    version_id       TEXT,
    status           TEXT NOT NULL,
    arguments        TEXT NOT NULL,
    callback_url     TEXT,
    queue_timeout_ms INTEGER NOT NULL,
    created_at_ms    INTEGER NOT NULL,
    started_at_ms    INTEGER,
    ended_at_ms      INTEGER,
    node             TEXT,
    lease_until_ms   INTEGER,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    attempts         INTEGER NOT NULL DEFAULT 0,
    result           TEXT,
    delete_after_ms  INTEGER,
    callback_state    TEXT,
    callback_attempts INTEGER NOT NULL DEFAULT 0,
    callback_due_ms   INTEGER
) STRICT;
CREATE INDEX async_runs_by_tenant ON async_runs (tenant_id, created_at_ms, id);
-- The queue bound counts a tenant's queued runs at every acceptance.
CREATE INDEX async_runs_queued ON async_runs (tenant_id) WHERE status = 'queued';
CREATE INDEX async_runs_open ON async_runs (lease_until_ms) WHERE ended_at_ms IS NULL;
CREATE INDEX async_runs_callbacks ON async_runs (callback_due_ms) WHERE callback_due_ms IS NOT NULL;
CREATE INDEX async_runs_kept ON async_runs (delete_after_ms) WHERE delete_after_ms IS NOT NULL;
