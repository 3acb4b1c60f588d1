"""A job that fails: only ever a task (its decorator requires one)."""

import time

from mcp.server.fastmcp import FastMCP
from fastmcp.server.tasks import TaskConfig

mcp = FastMCP("conformance")


@mcp.tool(task=TaskConfig(mode="required"))
def failing_job() -> str:
    """Works for a second, then fails with a tool error."""
    time.sleep(1)
    raise RuntimeError("the job failed, as it always does")
