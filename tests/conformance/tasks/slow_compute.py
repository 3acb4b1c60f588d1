"""A slow job: the suite's task-supporting tool (the Tasks extension)."""

import time

from mcp.server.fastmcp import FastMCP

mcp = FastMCP("conformance")


@mcp.tool(task=True)
def slow_compute(seconds: float, label: str = "") -> str:
    """Sleeps for `seconds`, then says so; a task when the client takes them.

    Args:
        seconds: How long to sleep.
        label: A name for the job.
    """
    time.sleep(seconds)
    return f"{label or 'job'}: done after {seconds} s"
