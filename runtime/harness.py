# Warden's guest harness. It is loaded once, when Warden builds its own snapshot of the
# runtime (src/sandbox/snapshot.rs): these definitions are then part of every instance's
# memory, and each call's `turn` only runs `_warden_call()`. Loading or compiling this
# file per call would cost fuel and time on every call. At load time the instance has
# only the runtime's own folders (the standard library); the host makes wasi-libc forget
# them before the snapshot is taken, so every instance reads its own folders.
#
# Per call it reads one JSON request from stdin:
#
#   {"nonce": str, "module": "/tool/NAME.py", "function": str, "arguments": {...},
#    "none_if_omitted": [str], "env": {str: str}, "return_char_limit": int,
#    "return_bytes": int, "progress": bool, "log_level": str | null,
#    "packages": "/packages" (only when the tool has installed packages)}
#
# imports the tool (unless this instance is a warm state that has it imported already,
# see `_warden_prepare`), builds each argument as its parameter's annotation says (a
# dataclass, an Enum, a datetime, ...; see `typed_arguments`), calls the function, and
# writes one response frame to fd 1 as the very last thing it does:
#
#   "\n\x1ewarden:" NONCE " " JSON
#
# Whatever the tool printed comes before the frame and is returned to the caller as the
# tool's stdout; the host trusts only the frame that ends the stream and carries the
# nonce. Status, fuel, time and memory are measured by the host, never taken from here.
#
# The tool runs in this same interpreter and can change anything here once its code has
# run, so a frame can only ever say "ok" or "tool_error": the host decides every other
# status itself, re-checks return_char_limit and bounds the result's nesting.

# Outbound HTTP goes through the host (runtime/outbound.py, loaded as _warden_outbound
# just before this file): urllib, http.client, requests and httpx hand each request to
# the host, which checks it against the tool's grants; raw sockets are refused.
import _warden_outbound

_warden_outbound.install()
del _warden_outbound

# A failing call formats its traceback: loaded once here rather than on every such call,
# with the modules formatting imports on first use (source lines, caret positions).
import traceback as _traceback  # noqa: F401
import linecache as _linecache  # noqa: F401
import tokenize as _tokenize  # noqa: F401

# The `warden` module (runtime/warden.py, loaded just before this file) and the door,
# held privately: the tool may replace module attributes.
import warden as _warden_api
import _warden_compat

_warden_compat.install(__import__("sys"))
_prefer_installed = _warden_compat.prefer_installed
del _warden_compat
from _warden_bind import (  # noqa: E402
    _JSON_TYPES,
    _ArgumentError,
    bind_problem,
    tool_function,
    tool_method,
    typed_arguments,
)
from _warden_encode import _Unserializable, to_json  # noqa: E402
import _warden_warm as _warm  # noqa: E402
try:
    import _host

    _DOOR = _host.call
    del _host
except (ImportError, AttributeError):
    _DOOR = None
_CONTENT = _warden_api._content
_UNWRAP = _warden_api._unwrap
_TOOL_ERROR = _warden_api.ToolError
_CONTEXT = _warden_api.Context

# The module path of the tool a warm state has imported already (set by _warden_prepare).
_WARM = {}

# A call's answer is one frame, written by the stage that ends it; a stage that wrote it
# returns this instead of its value.
_ANSWERED = object()
_MAX_TEXT = 16_000  # characters kept of an error message or traceback
_MAX_DEPTH = 100  # nesting of lists and dicts in a result (protocol::MAX_RESULT_DEPTH)


def _warden_call():
    """One call, a turn of its own: read the request, load the tool, bind its arguments,
    run it, encode its result; the stage that ends the call writes its frame."""
    # Import only what the snapshot already holds: every other import costs fuel and
    # time on every call. Modules a result may come from (decimal, uuid, numpy, ...)
    # are looked up in sys.modules: if the tool never imported one, no value is of it.
    import json
    import os
    import sys

    # Keep private references: the tool may replace module attributes.
    write_fd = os.write
    dumps = json.dumps
    request = json.loads(sys.stdin.buffer.read())
    call = _Call(request, _frame_writer(request["nonce"], sys, write_fd, dumps), sys, dumps)
    _begin(call, os, sys)
    function = _load(call, sys)
    if function is _ANSWERED:
        return
    arguments = _bind(call, function)
    if arguments is _ANSWERED:
        return
    result = _invoke(call, function, arguments)
    if result is _ANSWERED:
        return
    _answer(call, result)


class _Call:
    """One call's request, and the ways it ends that are not a result."""

    __slots__ = ("request", "emit", "loaded", "dumps", "module_path")

    def __init__(self, request, emit, sys, dumps):
        self.request = request
        self.emit = emit
        self.loaded = sys.modules.get
        self.dumps = dumps
        self.module_path = request["module"]

    def clip(self, text):
        return text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "\n... [cut]"

    def bind_error(self, message):
        # The host checked the arguments against the tool's schema before the call, so a
        # function that is missing or does not bind at run time is the tool's own doing.
        self.emit(
            {
                "status": "tool_error",
                "error": {"type": "BindError", "message": self.clip(message), "traceback": ""},
            }
        )
        return _ANSWERED

    def tool_error(self, exc, kind=None, message=None):
        import traceback

        # Drop the harness's own frames: start at the first frame of the tool file. An
        # error in the harness's own words (`message`) shows no harness frames at all.
        # The frames are skipped before their source lines are looked up: looking up
        # the harness's own lines (then dropped) was most of a failing call's cost.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != self.module_path:
            tb = tb.tb_next
        if tb is not None:
            frames = traceback.extract_tb(tb)
        elif message is not None:
            frames = None
        else:
            frames = traceback.extract_tb(exc.__traceback__)
        text = ""
        if frames is not None:
            # Formatted here rather than with traceback.format_list, which parses each
            # source line to place carets: most of a failing call's cost.
            lines = [
                f'  File "{f.filename}", line {f.lineno}, in {f.name}\n'
                + (f"    {f.line.strip()}\n" if f.line else "")
                for f in frames
            ] + [
                line.replace(_SITE_ADVICE, "", 1)
                for line in traceback.format_exception_only(type(exc), exc)
            ]
            text = self.clip("Traceback (most recent call last):\n" + "".join(lines))
        self.emit(
            {
                "status": "tool_error",
                "error": {
                    "type": kind or type(exc).__name__,
                    "message": self.clip(str(exc) if message is None else message),
                    "traceback": text,
                },
            }
        )
        return _ANSWERED


# CPython's advice on a ModuleNotFoundError when site initialization is off, as it is in
# the guest: about a virtual environment, which a tool does not have. The host gives a
# call's own advice instead (src/sandbox/call/missing.rs).
_SITE_ADVICE = (
    ". Site initialization is disabled, did you forget to add the site-packages "
    "directory to sys.path or to enable your virtual environment?"
)


def _begin(call, os, sys):
    """The call's world: its granted environment, fresh module state, progress and log
    records if asked for, and the tool's packages."""
    request = call.request
    # The environment is exactly the granted one: the snapshot froze the environment of
    # the instance that built it.
    os.environ.clear()
    os.environ.update(request["env"])
    _warm.fresh_state(call.loaded)

    # Progress and log records go through the door only when the caller asked for them
    # (the host checks again: it forwards nothing that was not asked for).
    log_level = request.get("log_level")
    _warden_api._call.update(
        progress=bool(request.get("progress")), log_level=log_level, door=_DOOR, dumps=call.dumps
    )
    if log_level:
        try:
            _warden_api._start_logging(log_level, call.loaded)
        except Exception:
            pass

    # The tool's installed packages come after the runtime's own, so they can add to the
    # bundled packages but never shadow the standard library or a bundled package.
    site = request.get("packages")
    if site and site not in sys.path:
        sys.path.append(site)
        _prefer_installed(sys, site)


def _load(call, sys):
    """The function the call names, from the tool's module (imported now unless this
    instance is a warm state that has it already)."""
    module_path = call.module_path
    name = call.request["function"]
    module = call.loaded("__warden_tool__")
    if _WARM.get("module") != module_path or module is None:
        module = type(sys)("__warden_tool__")
        module.__file__ = module_path
        sys.modules["__warden_tool__"] = module
        try:
            with open(module_path, "rb") as f:
                code = compile(f.read(), module_path, "exec")
            exec(code, module.__dict__)
        except BaseException as exc:
            return call.tool_error(exc)

    function = module.__dict__.get(name)
    if isinstance(function, type):
        # A framework's tool class (smolagents' `Tool`, LangChain's or CrewAI's
        # `BaseTool`): an instance's `forward`, else `_run`, else `_arun`, as the host
        # read it (src/schema/frameworks.rs).
        try:
            function = tool_method(function)
        except BaseException as exc:
            return call.tool_error(exc)
    if function is not None and type(function).__name__ not in ("function", "method", "type"):
        # The tool object of a framework installed among the tool's packages (its
        # decorator did not return the function): the function it was made from.
        function = tool_function(function, "__warden_tool__") or function
    if type(function).__name__ not in ("function", "method"):
        public = sorted(
            n for n, v in module.__dict__.items()
            if (type(v).__name__ == "function" and v.__module__ == "__warden_tool__"
                or tool_function(v, "__warden_tool__") is not None)
            and not n.startswith("_")
        )
        return call.bind_error(
            f"the tool has no function {name!r}; its public functions: {', '.join(public) or 'none'}"
        )
    return function


def _bind(call, function):
    """The call's arguments as `function` takes them: omitted optional ones, injected
    ones (a FastMCP `Context`, Letta's `agent_state`), each built as its annotation says."""
    request = call.request
    arguments = request["arguments"]
    # Letta's rule: an `Optional[T]` parameter without a default may be omitted, and is
    # then passed None.
    code = function.__code__
    defaulted = set(code.co_varnames[code.co_argcount - len(function.__defaults__ or ()) : code.co_argcount])
    defaulted |= set(function.__kwdefaults__ or ())
    for parameter in request["none_if_omitted"]:
        if parameter not in arguments and parameter not in defaulted:
            arguments[parameter] = None
    # A FastMCP-style `ctx: Context` parameter (left out of the schema) gets a Context.
    try:
        for parameter, annotation in function.__annotations__.items():
            if annotation is _CONTEXT or (
                type(annotation) is str
                and annotation.split("[", 1)[0].rsplit(".", 1)[-1].strip() == "Context"
            ):
                if parameter != "return":
                    arguments[parameter] = _CONTEXT()
    except Exception:
        pass
    # Letta's injected `agent_state` (left out of the schema): what the caller sent as
    # the request's `agent_state`, which the host puts among the arguments, else None.
    names = code.co_varnames[: code.co_argcount + code.co_kwonlyargcount]
    if "agent_state" in names:
        if "agent_state" not in arguments and "agent_state" not in defaulted:
            arguments["agent_state"] = None
    elif "agent_state" in arguments and not code.co_flags & 0x08:
        del arguments["agent_state"]  # sent for a tool that takes none
    problem = bind_problem(function, arguments)
    if problem:
        return call.bind_error(f"arguments do not fit {request['function']}(): {problem}")

    # A parameter annotated with a richer type than JSON's gets a value of that type. Most
    # tools take plain JSON types, so that is checked here, inline: this runs on every
    # call, and each Python-level call costs fuel.
    try:
        plain = True
        if arguments:
            try:
                annotations = function.__annotations__
                for parameter in arguments:
                    if parameter in annotations and annotations[parameter] not in _JSON_TYPES:
                        plain = False
                        break
            except Exception:  # an unresolvable name, an unhashable annotation
                plain = False
        if not plain:
            arguments = typed_arguments(function, arguments, call.loaded)
    except _ArgumentError as exc:
        # The host's schema check normally catches such a value; a model's own validator
        # or a dataclass's __post_init__ may still refuse it (then its frames are shown).
        return call.tool_error(exc.__cause__ or exc, "ArgumentError", f"argument {exc}")
    except Exception:
        pass  # the conversion machinery failed, not the value: pass the values as they came
    except BaseException as exc:
        return call.tool_error(exc)
    return arguments


def _invoke(call, function, arguments):
    """The tool's result (awaited, for a coroutine); a raised `ToolError` is the tool's
    own words for the caller, any other exception a traceback of its frames."""
    try:
        result = function(**arguments)
        if hasattr(result, "__await__"):
            result = run_async(result)
    except _TOOL_ERROR as exc:
        # The tool's own words for the caller: the message alone, no traceback.
        try:
            message = call.clip(str(exc))
        except BaseException:
            message = "the tool failed"
        call.emit(
            {
                "status": "tool_error",
                "error": {"type": "ToolError", "message": message, "traceback": "",
                          "deliberate": True},
            }
        )
        return _ANSWERED
    except BaseException as exc:
        return call.tool_error(exc)
    return result


def _answer(call, result):
    """The result's frame: content parts for images, audio, files and links, else its
    JSON, cut to `return_char_limit` characters."""
    request = call.request
    dumps = call.dumps
    # Images, audio, files and links (runtime/warden.py): one content part each. The
    # host checks every part and the binary budget again.
    try:
        import binascii

        def b64(data):
            return binascii.b2a_base64(data, newline=False).decode("ascii")

        result = _UNWRAP(result)
        parts = _CONTENT(result, dumps, b64)
    except BaseException as exc:
        return call.tool_error(exc, "UnserializableResult")
    if parts is not None:
        binary = sum(len(p.get("data") or p.get("resource", {}).get("blob") or "") for p in parts) * 3 // 4
        if binary > request["return_bytes"]:
            return call.emit(
                {
                    "status": "tool_error",
                    "error": {
                        "type": "ResultTooLarge",
                        "message": f"the result's binary parts are about {binary} bytes, more than "
                        f"the {request['return_bytes']} bytes its return_bytes limit allows; "
                        "return a smaller image or file, or raise return_bytes",
                        "traceback": "",
                    },
                }
            )
        return call.emit({"status": "ok", "content": parts})

    try:
        value = to_json(result, "result", set(), dumps, call.loaded, _MAX_DEPTH)
    except _Unserializable as exc:
        return call.tool_error(exc, "UnserializableResult")
    except BaseException as exc:
        return call.tool_error(exc)

    # Measured as the host measures it: json.dumps's text, or the string itself.
    limit = request["return_char_limit"]
    text = value if isinstance(value, str) else dumps(value, ensure_ascii=False, allow_nan=False)
    if len(text) > limit:
        call.emit(
            {
                "status": "ok",
                "value": text[:limit],
                "truncated": {"original_chars": len(text), "kept_chars": limit},
            }
        )
    else:
        call.emit({"status": "ok", "value": value})


def _frame_writer(nonce, sys, write_fd, dumps):
    # The function that writes the response frame to fd 1, the last thing a turn does:
    # "\n\x1ewarden:" NONCE " " JSON. Its callers pass references they took before any
    # tool code ran (the tool may replace module attributes).
    def emit(response):
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                pass
        data = dumps(response, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        frame = ("\n\x1ewarden:" + nonce + " " + data).encode("utf-8", "surrogatepass")
        view = memoryview(frame)
        while view:
            view = view[write_fd(1, view) :]

    return emit


def _warden_prepare():
    # Builds a tool's warm state (src/sandbox/warm.rs; runtime/warm.py): imports the
    # tool once, in an instance with no grants, no secrets and no arguments, whose
    # memory then becomes the starting point of every call of that tool version. Reads
    # {"nonce", "module", "packages"} from stdin and answers with a frame: ok, or
    # tool_error when the module-level code raised or read the environment (the tool
    # then runs cold).
    import gc
    import json
    import os
    import sys

    request = json.loads(sys.stdin.buffer.read())
    module_path = request["module"]
    emit = _frame_writer(request["nonce"], sys, os.write, json.dumps)
    site = request.get("packages")
    if site and site not in sys.path:
        sys.path.append(site)
        _prefer_installed(sys, site)
    refused = _warm.import_tool(module_path, sys, os, _linecache, _traceback)
    if refused is not None:
        return emit({"status": "tool_error", "error": refused})
    _warm.warm_libraries(sys.modules)
    _WARM["module"] = module_path
    # Everything alive now is part of the warm state: keep the collector off it, so a
    # call does not write to its pages (copy-on-write friendly; CPython's gc.freeze).
    gc.collect()
    gc.freeze()
    emit({"status": "ok", "value": None})


def run_async(awaitable):
    """Awaits `awaitable` on an event loop that needs no sockets: asyncio's default loop
    wakes itself through a socket pair, which WASI does not have. Timers work; waiting
    on file descriptors does not (the sandbox has none worth waiting on)."""
    import asyncio
    import selectors
    import time
    from asyncio import selector_events

    class NoFdSelector(selectors.BaseSelector):
        def __init__(self):
            self._map = {}

        def register(self, fileobj, events, data=None):
            raise OSError("the sandbox cannot wait on file descriptors")

        def unregister(self, fileobj):
            raise KeyError(fileobj)

        def select(self, timeout=None):
            if timeout is None:
                raise RuntimeError("the tool awaits something nothing in the sandbox can finish")
            if timeout > 0:
                time.sleep(timeout)
            return []

        def get_map(self):
            return self._map

        def close(self):
            pass

    class Loop(selector_events.BaseSelectorEventLoop):
        def _make_self_pipe(self):
            pass

        def _close_self_pipe(self):
            pass

        def _write_to_self(self):
            pass

    async def main():
        return await awaitable

    return asyncio.run(main(), loop_factory=lambda: Loop(NoFdSelector()))
