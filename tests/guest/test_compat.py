"""_warden_compat (runtime/compat.py) under the host's CPython: the import paths of the
MCP SDKs and agent frameworks a tool file uses resolve to stand-ins that run it."""

import importlib
import sys
import unittest

import _warden_compat
import warden

_warden_compat.install(sys)


class McpSdks(unittest.TestCase):
    def test_fastmcp_decorators_return_the_function(self):
        for path in ("mcp.server.fastmcp", "fastmcp"):
            FastMCP = importlib.import_module(path).FastMCP
            mcp = FastMCP("notes")

            def add(a: int, b: int) -> int:
                return a + b

            self.assertIs(mcp.tool()(add), add)
            self.assertIs(mcp.tool(add), add)
            self.assertIs(mcp.resource("notes://{a}")(add), add)
            self.assertIs(mcp.prompt()(add), add)

    def test_the_sdks_names_are_wardens(self):
        from fastmcp.exceptions import ToolError
        from fastmcp.tools.tool import ToolResult
        from mcp.server.fastmcp import Context, Image

        self.assertIs(ToolError, warden.ToolError)
        self.assertIs(ToolResult, warden.ToolResult)
        self.assertIs(Context, warden.Context)
        self.assertIs(Image, warden.Image)

    def test_a_task_config_is_taken_as_written(self):
        from fastmcp import FastMCP
        from fastmcp.server.tasks import TaskConfig

        def job() -> str:
            return "done"

        config = TaskConfig(mode="required", poll_interval=2)
        self.assertEqual((config.mode, config.poll_interval), ("required", 2))
        self.assertIs(FastMCP("jobs").tool(task=config)(job), job)
        self.assertIs(FastMCP("jobs").tool(task=True)(job), job)

    def test_a_decorators_arguments_are_taken_as_written(self):
        from mcp.server.fastmcp import FastMCP
        from mcp.types import ToolAnnotations

        def search(query: str) -> dict:
            return {"hits": [query]}

        hints = ToolAnnotations(readOnlyHint=True, title="Search")
        self.assertTrue(hints.readOnlyHint)
        decorate = FastMCP("notes").tool(annotations=hints, tags={"notes"},
                                         output_schema={"type": "object"},
                                         structured_output=False)
        self.assertIs(decorate(search), search)


class Frameworks(unittest.TestCase):
    def test_decorators_return_the_function(self):
        def multiply(a: int, b: int) -> int:
            return a * b

        from langchain_core.tools import tool as lc_tool
        from agents import function_tool
        from crewai.tools import tool as crew_tool

        self.assertIs(lc_tool(multiply), multiply)
        self.assertIs(lc_tool("multiply", parse_docstring=True)(multiply), multiply)
        self.assertIs(function_tool(name_override="m")(multiply), multiply)
        self.assertIs(crew_tool("Multiplier")(multiply), multiply)

    def test_tool_classes_run_their_method(self):
        from langchain_core.tools import BaseTool
        from smolagents import Tool

        class Shout(Tool):
            def forward(self, text):
                return text.upper()

        class Add(BaseTool):
            def _run(self, a, b):
                return a + b

        self.assertEqual(Shout()(text="hi"), "HI")
        self.assertEqual(Add().run({"a": 1, "b": 2}), 3)
        self.assertEqual(Add().invoke({"a": 2, "b": 2}), 4)


if __name__ == "__main__":
    unittest.main()
