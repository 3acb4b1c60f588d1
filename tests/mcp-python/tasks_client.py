"""A client of the Tasks extension made with the official Python SDK (mcp 2.x), for
Warden's tests.

    python tasks_client.py COMMAND [ARG...]

Starts COMMAND (`warden mcp --tools DIR`) over stdio in the 2026-07-28 era, declares the
`io.modelcontextprotocol/tasks` extension the SDK's way (a `ClientExtension` whose claim
on `tools/call` takes a task and polls `tasks/get` until it ends), calls `slow` (a task:
tests/mcp-python/tasks/slow.py) and `greet` (answered at once: tests/mcp-python/tools/greet.py),
and prints one JSON document: each call's result as the
SDK handed it over, and the tasks the extension saw. tests/all/mcp_python.rs checks it.
"""

import asyncio
import json
import os
import sys
from typing import Any, Literal

from mcp.client.client import Client
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp.client.stdio import StdioServerParameters
from mcp_types import CallToolResult, Request, RequestParams, Result
from pydantic import ConfigDict, Field

TASKS = "io.modelcontextprotocol/tasks"


class CreatedTask(Result):
    """`tools/call`'s answer when the server made a task."""

    model_config = ConfigDict(extra="allow", populate_by_name=True)
    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str = Field(alias="taskId")
    status: str


class TaskParams(RequestParams):
    task_id: str = Field(alias="taskId")


class GetTask(Request[TaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    name_param = "taskId"


class DetailedTask(Result):
    model_config = ConfigDict(extra="allow", populate_by_name=True)
    task_id: str = Field(alias="taskId")
    status: str
    result: dict[str, Any] | None = None
    error: dict[str, Any] | None = None


seen = []


async def resolve(created: CreatedTask, ctx: ClaimContext) -> CallToolResult:
    """Polls the task until it ends; its inlined result."""
    statuses = [created.status]
    while True:
        got = await ctx.session.send_request(GetTask(params=TaskParams(taskId=created.task_id)), DetailedTask)
        statuses.append(got.status)
        if got.status in ("completed", "failed", "cancelled"):
            seen.append({"tool": ctx.tool_name, "taskId": created.task_id, "statuses": statuses})
            if got.status != "completed":
                raise RuntimeError(f"task {created.task_id} ended {got.status}: {got.error}")
            return CallToolResult.model_validate(got.result)
        await asyncio.sleep(0.1)


class Tasks(ClientExtension):
    identifier = TASKS

    def claims(self):
        return [ResultClaim(result_type="task", model=CreatedTask, resolve=resolve)]


def wire(model):
    return model.model_dump(by_alias=True, mode="json", exclude_none=True)


async def main(command):
    server = StdioServerParameters(command=command[0], args=command[1:], env=dict(os.environ))
    out = {}
    async with Client(server, mode="2026-07-28", extensions=[Tasks()]) as client:
        out["slow"] = wire(await client.call_tool("slow", {"seconds": 0.3}))
        out["greet"] = wire(await client.call_tool("greet", {"name": "Ada"}))
    out["tasks"] = seen
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:]))
