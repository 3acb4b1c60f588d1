"""Stand-ins for the import paths tools written for other hosts use.

Loaded as `_warden_compat` while Warden builds its snapshot, after the public `warden`
module; `install(sys)` puts them in place once. The MCP Python SDKs' paths
(`mcp.server.fastmcp`, `mcp.server.mcpserver`, `fastmcp`, `mcp.types`): FastMCP-style
tools run unchanged (the real packages need Pydantic 2, which cannot load in the guest).
Agent frameworks' tool decorators and classes (LangChain, smolagents, CrewAI, Strands,
OpenAI Agents, Google ADK): used only when a tool's own packages lack the module. The
host reads every name, description and schema from the source; these only let the file
import and run.
"""

import warden
from warden import _MCP_TYPES, Audio, Context, File, Image, ToolError, ToolResult

class FastMCP:
    """Stands in for `FastMCP` / `MCPServer`: `@mcp.tool()` returns the function itself;
    Warden serves one tool per file, with its schema derived from the signature."""

    def __init__(self, name=None, instructions=None, *args, **settings):
        self.name = name
        self.instructions = instructions

    def tool(self, name_or_fn=None, *args, **kwargs):
        if callable(name_or_fn):
            return name_or_fn
        return lambda fn: fn

    def _missing(self, what, instead):
        raise NotImplementedError(
            f"{what} is not available in Warden: it serves one tool per file; {instead}"
        )

    def resource(self, *a, **kw):
        # The host reads resources from the source and reads one by calling its
        # function, which stays the module's own.
        return lambda fn: fn

    def prompt(self, *a, **kw):
        if a and callable(a[0]):
            return a[0]
        return lambda fn: fn

    def add_tool(self, fn, *a, **kw):
        return fn

    def run(self, *a, **kw):
        return None


class ToolAnnotations:
    """`mcp.types.ToolAnnotations`, as decorators take it: the hints a tool declares
    (`readOnlyHint=True`, ...), which the host reads from the source."""

    __module__ = "mcp.types"

    def __init__(self, **hints):
        self.__dict__.update(hints)


class TaskConfig:
    """FastMCP's `fastmcp.server.tasks.TaskConfig`, as `@mcp.tool(task=...)` takes it:
    whether the tool runs as an MCP task, which the host reads from the source."""

    __module__ = "fastmcp.server.tasks"

    def __init__(self, mode="optional", **settings):
        self.mode = mode
        self.__dict__.update(settings)


def _framework_tool(*args, **kwargs):
    """An agent framework's tool decorator, as the guest needs it: the function itself.
    `@tool`, `@tool("name", ...)`, `@tool(parse_docstring=True)`, `tool(func)`; the
    name, description and schema come from the source, read by the host."""
    if len(args) == 1 and callable(args[0]) and not kwargs:
        return args[0]

    def decorate(function):
        return function

    return decorate


class _FrameworkTool:
    """A framework's tool class (`BaseTool`, `StructuredTool`, `FunctionTool`, ...): a
    base to subclass, or a wrapper of a function (the function stays callable by name)."""

    def __init__(self, *args, **kwargs):
        self.func = kwargs.get("func") or (args[0] if args and callable(args[0]) else None)

    @classmethod
    def from_function(cls, func=None, *args, **kwargs):
        return cls(func=func)

    def setup(self):
        pass

    def _runner(self):
        if self.func is not None:
            return self.func
        for name in ("forward", "_run", "_arun"):
            method = getattr(self, name, None)
            if callable(method):
                return method
        raise TypeError("this tool wraps no function and defines no forward() or _run()")

    def __call__(self, *args, **kwargs):
        return self._runner()(*args, **kwargs)

    def run(self, tool_input=None, **kwargs):
        if isinstance(tool_input, dict):
            return self._runner()(**tool_input)
        if tool_input is None:
            return self._runner()(**kwargs)
        return self._runner()(tool_input)

    invoke = run


# Modules of agent frameworks whose tool decorators tools import (the packages
# themselves need Pydantic 2 and more, which cannot load in the guest): module name,
# then what it holds. Used only when the tool's own packages do not have the module.
_FRAMEWORKS = {
    "langchain_core": {},
    "langchain_core.tools": {"tool": _framework_tool, "BaseTool": _FrameworkTool,
                             "StructuredTool": _FrameworkTool},
    "langchain": {},
    "langchain.tools": {"tool": _framework_tool, "BaseTool": _FrameworkTool,
                        "StructuredTool": _FrameworkTool},
    "langchain.agents": {"tool": _framework_tool},
    "smolagents": {"tool": _framework_tool, "Tool": _FrameworkTool},
    "smolagents.tools": {"tool": _framework_tool, "Tool": _FrameworkTool},
    "langchain_core.callbacks": {"CallbackManagerForToolRun": object,
                                 "AsyncCallbackManagerForToolRun": object},
    "langchain_core.callbacks.manager": {"CallbackManagerForToolRun": object,
                                         "AsyncCallbackManagerForToolRun": object},
    "crewai": {},
    "crewai.tools": {"tool": _framework_tool, "BaseTool": _FrameworkTool},
    "strands": {"tool": _framework_tool},
    "agents": {"function_tool": _framework_tool},
    "google": {},
    "google.adk": {},
    "google.adk.tools": {"FunctionTool": _FrameworkTool},
}


class _FrameworkFinder:
    """The last finder on `sys.meta_path`: a framework module the tool imports and its
    packages lack becomes a stand-in holding its tool decorator."""

    def find_spec(self, name, path=None, target=None):
        if name not in _FRAMEWORKS:
            return None
        import importlib.machinery

        is_package = any(other.startswith(name + ".") for other in _FRAMEWORKS)
        return importlib.machinery.ModuleSpec(name, self, is_package=is_package)

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__dict__.update(_FRAMEWORKS[module.__name__])
        module.__warden_compat__ = True


def install(sys):
    """The SDKs' import paths, as modules holding the stand-ins above."""
    # After every real finder: a framework installed for the tool is used as it is.
    sys.meta_path.append(_FrameworkFinder())
    make = type(sys)
    exceptions = make("mcp.server.fastmcp.exceptions")
    exceptions.ToolError = ToolError
    for name in ("mcp.server.fastmcp", "mcp.server.mcpserver", "fastmcp"):
        module = make(name)
        module.__warden_compat__ = True
        module.FastMCP = module.MCPServer = FastMCP
        module.Context = Context
        module.Image, module.Audio, module.File = Image, Audio, File
        module.ToolError = ToolError
        sys.modules[name] = module
    sys.modules["mcp.server.fastmcp.exceptions"] = exceptions
    sys.modules["fastmcp.exceptions"] = exceptions
    utilities = make("fastmcp.utilities.types")
    utilities.Image, utilities.Audio, utilities.File = Image, Audio, File
    sys.modules["fastmcp.utilities"] = make("fastmcp.utilities")
    sys.modules["fastmcp.utilities.types"] = utilities
    tools, tool = make("fastmcp.tools"), make("fastmcp.tools.tool")
    tools.__path__ = []
    tools.Tool = tool.Tool = _FrameworkTool
    tools.tool = tool
    tool.ToolResult = ToolResult
    sys.modules["fastmcp"].tools = tools
    sys.modules["fastmcp.tools"], sys.modules["fastmcp.tools.tool"] = tools, tool
    sys.modules["fastmcp"].__path__ = []
    fastmcp_server, fastmcp_tasks = make("fastmcp.server"), make("fastmcp.server.tasks")
    fastmcp_server.__path__ = []
    fastmcp_server.FastMCP = FastMCP
    fastmcp_server.tasks = fastmcp_tasks
    fastmcp_tasks.TaskConfig = TaskConfig
    sys.modules["fastmcp"].server = fastmcp_server
    sys.modules["fastmcp.server"] = fastmcp_server
    sys.modules["fastmcp.server.tasks"] = fastmcp_tasks
    mcp, server = make("mcp"), make("mcp.server")
    mcp.__path__, server.__path__ = [], []
    mcp.__warden_compat__ = server.__warden_compat__ = True
    types = make("mcp.types")
    types.__warden_compat__ = True
    types.__dict__.update(_MCP_TYPES)
    types.ToolAnnotations = ToolAnnotations
    mcp.types = types
    sys.modules.setdefault("mcp.types", types)
    # For annotations only (`Context[ServerSession, None]`): Warden's context has no
    # session to hand out.
    session = make("mcp.server.session")
    session.__warden_compat__ = True
    session.ServerSession = type("ServerSession", (), {"__module__": "mcp.server.session"})
    server.session = session
    sys.modules.setdefault("mcp.server.session", session)
    mcp.server = server
    server.fastmcp = sys.modules["mcp.server.fastmcp"]
    server.mcpserver = sys.modules["mcp.server.mcpserver"]
    sys.modules.setdefault("mcp", mcp)
    sys.modules.setdefault("mcp.server", server)
    warden.Context = Context


def prefer_installed(sys, site):
    """When the tool's packages (`site`) hold the MCP SDK itself, as a dependency of
    openai-agents, langchain-mcp-adapters and the like, those packages get the real SDK:
    `mcp`, `mcp.types`, `mcp.shared`, the client. Only the FastMCP server classes stay
    Warden's (`mcp.server.fastmcp`, `mcp.server.mcpserver`), so a server file runs as
    it does without the SDK. Called once the site is on `sys.path`, before the tool's
    module is imported."""
    import os

    if not os.path.isfile(os.path.join(site, "mcp", "__init__.py")):
        return
    for name in ("mcp", "mcp.server", "mcp.types", "mcp.server.session"):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__warden_compat__", False):
            del sys.modules[name]
