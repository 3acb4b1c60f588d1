-- Calls in flight, schema version 8: the same meaning as
-- migrations/sqlite/0008_runs_in_flight_unbound.sql. Here the foreign key's check
-- locked the tenant's row (FOR KEY SHARE) at every call's start, while the call's
-- end updates that row (the tenant's audit head): two calls of one tenant at once
-- then made a multixact and a WAL record for the lock at each start.
ALTER TABLE runs_in_flight DROP CONSTRAINT IF EXISTS runs_in_flight_tenant_id_fkey;
