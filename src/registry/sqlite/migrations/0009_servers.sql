-- Server files, schema version 9: the tools registered from one MCP server file (POST
-- /v1/servers) share a server id, so that the file is updated as one (PUT
-- /v1/servers/{id}) and its versions read as one history. The id and the file's
-- revision are in each version's manifest; the column finds a server's tools.
ALTER TABLE tools ADD COLUMN server_id TEXT;
CREATE INDEX tools_by_server ON tools (tenant_id, server_id) WHERE server_id IS NOT NULL;
