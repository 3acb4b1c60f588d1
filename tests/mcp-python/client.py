"""An MCP client made with the official Python SDK (the `mcp` package), for Warden's tests.

    python client.py PROTOCOL COMMAND [ARG...]

Starts COMMAND (`warden mcp --tools DIR`) with the SDK's stdio transport, opens a session
of protocol PROTOCOL (2025-11-25: the `initialize` handshake; 2026-07-28: `server/discover`,
which only mcp 2.x has), lists the tools, calls each tool of tests/mcp-python/tools and
prints one JSON document with what the SDK handed over: every result as the SDK parsed
it (dumped back to its wire form), the progress its callback heard and the log records
its logging callback heard, per call; then the resources and prompt of
tests/mcp-python/tools/library.py, listed, read, got and completed. The same script runs under mcp 1.x and 2.x; the
Rust test (tests/all/mcp_python.rs) checks the document.
"""

import json
import logging
import os
import sys
from importlib.metadata import version

import anyio
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client

# The request `_meta` key that asks for log records in a 2026-07-28 request.
LOG_LEVEL_META_KEY = "io.modelcontextprotocol/logLevel"
PATIENCE_SECONDS = 60


class Complaints(logging.Handler):
    """The SDK's own warnings (a notification it could not parse, ...)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.seen = []

    def emit(self, record):
        self.seen.append(f"{record.name}: {record.getMessage()}")


complaints = Complaints()
logging.getLogger().addHandler(complaints)


def wire(model):
    """A model of the SDK as JSON, with the protocol's field names."""
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def session_of(protocol, session):
    """Opens the session in `protocol`'s way; the version negotiated."""
    if protocol == "2026-07-28":
        if not hasattr(session, "discover"):
            raise SystemExit(f"mcp {version('mcp')} has no server/discover: it cannot speak {protocol}")
        await session.discover()
        return session.protocol_version
    result = await session.initialize()
    return wire(result)["protocolVersion"]


async def run(protocol, command):
    heard_logs = []

    async def on_log(params):
        heard_logs.append(wire(params))

    async def on_message(message):
        if isinstance(message, Exception):
            complaints.seen.append(f"transport: {message!r}")

    # The server's environment: the whole of ours (WARDEN_HOME among it).
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    out = {"sdk": version("mcp")}
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write, logging_callback=on_log, message_handler=on_message) as session:
            out["protocolVersion"] = await session_of(protocol, session)
            listed = await session.list_tools()
            out["tools"] = {tool["name"]: tool for tool in (wire(t) for t in listed.tools)}

            async def call(name, arguments, meta=None):
                progress = []

                async def on_progress(done, total, message):
                    progress.append({"progress": done, "total": total, "message": message})

                logs_before = len(heard_logs)
                extra = {"meta": meta} if meta is not None else {}
                result = await session.call_tool(name, arguments, progress_callback=on_progress, **extra)
                # A round trip after the answer: whatever the server sent before it has
                # been read and handed to the callbacks by then.
                await session.list_tools()
                answer = wire(result)
                answer.pop("_meta", None)
                return {"result": answer, "progress": progress, "logs": heard_logs[logs_before:]}

            calls = out["calls"] = {}
            calls["rich"] = await call("rich", {})
            calls["greet"] = await call("greet", {"name": "Ada"})
            calls["stats"] = await call("stats", {"values": [1, 2, 3.5]})
            calls["refuse"] = await call("refuse", {"n": -1})
            calls["steps"] = await call("steps", {})
            # Nobody asked for log records yet: none may arrive.
            calls["logs_unasked"] = await call("logs", {})
            if protocol == "2026-07-28":
                # Each request says its level (no session-wide setting in this era): the
                # SDK keeps a caller's key in `_meta` (its `log_level=` sets every request's).
                calls["logs_info"] = await call("logs", {}, meta={LOG_LEVEL_META_KEY: "info"})
            else:
                await session.set_logging_level("info")
                calls["logs_info"] = await call("logs", {})
            out["served"] = await served(session)
    return out


async def served(session):
    """The resources and prompts of tests/mcp-python/tools/library.py, as the SDK lists,
    reads and gets them; an unknown URI's error."""
    out = {"resources": [wire(r) for r in (await session.list_resources()).resources]}
    templates = await session.list_resource_templates()
    # The field's Python name: `resourceTemplates` in mcp 1.x, `resource_templates` in 2.x.
    listed = getattr(templates, "resource_templates", None) or templates.resourceTemplates
    out["templates"] = [wire(t) for t in listed]
    out["prompts"] = [wire(p) for p in (await session.list_prompts()).prompts]
    reads = out["reads"] = {}
    for uri in ("library://shelves", "library://books/9780486282114", "library://covers/9780141439518"):
        answer = wire(await session.read_resource(uri))
        answer.pop("_meta", None)
        reads[uri] = answer
    got = wire(await session.get_prompt("review", {"isbn": "9780141439518", "tone": "harsh"}))
    got.pop("_meta", None)
    out["prompt"] = got
    completion = await session.complete(
        types.PromptReference(type="ref/prompt", name="review"), {"name": "tone", "value": "h"}
    )
    out["completion"] = wire(completion)["completion"]
    try:
        await session.read_resource("library://nowhere")
        out["unknown"] = "read"
    except Exception as exc:  # McpError in mcp 1.x, MCPError in 2.x
        error = getattr(exc, "error", None)
        out["unknown"] = {"code": getattr(error, "code", getattr(exc, "code", None)),
                          "data": getattr(error, "data", getattr(exc, "data", None))}
    return out


def main():
    if len(sys.argv) < 3:
        raise SystemExit(__doc__)
    out = anyio.run(bounded, sys.argv[1], sys.argv[2:])
    out["clientWarnings"] = complaints.seen
    json.dump(out, sys.stdout, ensure_ascii=False, indent=1)
    sys.stdout.write("\n")


async def bounded(protocol, command):
    with anyio.fail_after(PATIENCE_SECONDS):
        return await run(protocol, command)


if __name__ == "__main__":
    main()
