-- Calls that have started and whose audit event is not written yet. A call's row is
-- committed to disk while the call runs; its `run` event and the row's removal then
-- commit together without waiting for the disk (made durable by the next commit that
-- does, or within a fraction of a second). After a crash or a power cut, a row that
-- is still here past `expires_at_ms` (the call's deadline and a margin: no call can
-- still be running) becomes a `run_interrupted` event: no call that ran goes
-- unrecorded. Times are Unix milliseconds on the node's clock. One b-tree, keyed by the
-- call's id, and no other index: it holds only the calls running now (the sweep reads
-- them all), and every call writes it twice.
CREATE TABLE runs_in_flight (
    id            TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
    tool_id       TEXT NOT NULL,
    version_id    TEXT NOT NULL,
    key_hint      TEXT,
    started_at_ms INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) STRICT, WITHOUT ROWID;
