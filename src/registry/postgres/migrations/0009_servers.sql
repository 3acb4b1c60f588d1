-- Server files, schema version 9: the same meaning as migrations/sqlite/0009_servers.sql.
ALTER TABLE tools ADD COLUMN server_id TEXT;
CREATE INDEX tools_by_server ON tools (tenant_id, server_id) WHERE server_id IS NOT NULL;
