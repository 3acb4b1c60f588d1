"""A job that sleeps: an MCP task when the client declared the Tasks extension."""

import time
from mcp.server.fastmcp import FastMCP

mcp = FastMCP("jobs")


@mcp.tool(task=True)
def slow(seconds: float) -> str:
    """Sleep, then say so."""
    time.sleep(seconds)
    return f"slept {seconds}"
