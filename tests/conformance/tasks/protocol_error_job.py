"""A job whose sandbox crashes: a task that fails at the protocol level."""

import os

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("conformance")


@mcp.tool(task=True)
def protocol_error_job() -> str:
    """Aborts the interpreter: the host cannot run it to an outcome."""
    os.abort()
    return "never"
