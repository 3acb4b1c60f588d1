-- The review console (`/review/`): single-use sign-in links and the sessions they open,
-- kept here so that any node answers any request. Tokens are stored as their SHA-256,
-- never in the clear. Times are Unix milliseconds on the database's clock.

-- A sign-in link: made with a reviewer key (reviewer_key_id and tenant_id set) or the
-- operator key (both NULL, operator_fp set), redeemed at most once before it expires.
CREATE TABLE console_links (
    token_hash      BLOB PRIMARY KEY,
    tenant_id       TEXT REFERENCES tenants (id),
    reviewer_key_id TEXT REFERENCES reviewer_keys (id),
    -- SHA-256 of the operator key's SHA-256, for an operator's link: a link made with
    -- another operator key than the node's stops working.
    operator_fp     TEXT,
    created_at_ms   INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL,
    used_at_ms      INTEGER
) STRICT;

-- A signed-in browser: its cookie's SHA-256, who it is, its CSRF token, and when it
-- ends (idle: last_seen_ms plus the idle timeout; at the latest, expires_at_ms).
CREATE TABLE console_sessions (
    token_hash      BLOB PRIMARY KEY,
    tenant_id       TEXT REFERENCES tenants (id),
    reviewer_key_id TEXT REFERENCES reviewer_keys (id),
    operator_fp     TEXT,
    csrf_token      TEXT NOT NULL,
    created_at_ms   INTEGER NOT NULL,
    last_seen_ms    INTEGER NOT NULL,
    expires_at_ms   INTEGER NOT NULL
) STRICT;

CREATE INDEX console_sessions_by_reviewer_key ON console_sessions (reviewer_key_id);

-- The console's usage chart counts a tool's runs per day.
CREATE INDEX audit_events_by_tool ON audit_events (tenant_id, tool_id, kind, at_ms);
