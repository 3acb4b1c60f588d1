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
from collections.abc import MutableMapping as _MutableMapping

# The `warden` module (runtime/warden.py, loaded just before this file) and the door,
# held privately: the tool may replace module attributes.
import warden as _warden_api

_warden_api._install_compat(__import__("sys"))
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

def _warden_call():
    # Import only what the snapshot already holds: every other import costs fuel and
    # time on every call. Modules a result may come from (decimal, uuid, numpy, ...)
    # are looked up in sys.modules: if the tool never imported one, no value is of it.
    import json
    import os
    import sys

    # Keep private references: the tool may replace module attributes.
    write_fd = os.write
    dumps = json.dumps
    loaded = sys.modules.get
    MAX_TEXT = 16_000  # characters kept of an error message or traceback
    MAX_DEPTH = 100  # nesting of lists and dicts in a result (protocol::MAX_RESULT_DEPTH)

    request = json.loads(sys.stdin.buffer.read())
    emit = _frame_writer(request["nonce"], sys, write_fd, dumps)

    def clip(text):
        return text if len(text) <= MAX_TEXT else text[:MAX_TEXT] + "\n... [cut]"

    def bind_error(message):
        # The host checked the arguments against the tool's schema before the call, so a
        # function that is missing or does not bind at run time is the tool's own doing.
        emit(
            {
                "status": "tool_error",
                "error": {"type": "BindError", "message": clip(message), "traceback": ""},
            }
        )

    module_path = request["module"]

    def tool_error(exc, kind=None, message=None):
        import traceback

        # Drop the harness's own frames: start at the first frame of the tool file. An
        # error in the harness's own words (`message`) shows no harness frames at all.
        # The frames are skipped before their source lines are looked up: looking up
        # the harness's own lines (then dropped) was most of a failing call's cost.
        tb = exc.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename != module_path:
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
            ] + traceback.format_exception_only(type(exc), exc)
            text = clip("Traceback (most recent call last):\n" + "".join(lines))
        emit(
            {
                "status": "tool_error",
                "error": {
                    "type": kind or type(exc).__name__,
                    "message": clip(str(exc) if message is None else message),
                    "traceback": text,
                },
            }
        )

    # The environment is exactly the granted one: the snapshot froze the environment of
    # the instance that built it.
    os.environ.clear()
    os.environ.update(request["env"])
    _fresh_state(loaded)

    # Progress and log records go through the door only when the caller asked for them
    # (the host checks again: it forwards nothing that was not asked for).
    log_level = request.get("log_level")
    _warden_api._call.update(
        progress=bool(request.get("progress")), log_level=log_level, door=_DOOR, dumps=dumps
    )
    if log_level:
        try:
            _warden_api._start_logging(log_level, loaded)
        except Exception:
            pass

    # The tool's installed packages come after the runtime's own, so they can add to the
    # bundled packages but never shadow the standard library or a bundled package.
    site = request.get("packages")
    if site and site not in sys.path:
        sys.path.append(site)

    name = request["function"]
    module = loaded("__warden_tool__")
    if _WARM.get("module") != module_path or module is None:
        module = type(sys)("__warden_tool__")
        module.__file__ = module_path
        sys.modules["__warden_tool__"] = module
        try:
            with open(module_path, "rb") as f:
                code = compile(f.read(), module_path, "exec")
            exec(code, module.__dict__)
        except BaseException as exc:
            return tool_error(exc)

    function = module.__dict__.get(name)
    if isinstance(function, type):
        # A framework's tool class (smolagents' `Tool`, LangChain's or CrewAI's
        # `BaseTool`): an instance's `forward`, else `_run`, else `_arun`, as the host
        # read it (src/schema/frameworks.rs).
        try:
            function = tool_method(function)
        except BaseException as exc:
            return tool_error(exc)
    if type(function).__name__ not in ("function", "method"):
        public = sorted(
            n for n, v in module.__dict__.items()
            if type(v).__name__ == "function" and not n.startswith("_")
            and v.__module__ == "__warden_tool__"
        )
        return bind_error(
            f"the tool has no function {name!r}; its public functions: {', '.join(public) or 'none'}"
        )

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
        return bind_error(f"arguments do not fit {name}(): {problem}")

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
            arguments = typed_arguments(function, arguments, loaded)
    except _ArgumentError as exc:
        # The host's schema check normally catches such a value; a model's own validator
        # or a dataclass's __post_init__ may still refuse it (then its frames are shown).
        return tool_error(exc.__cause__ or exc, "ArgumentError", f"argument {exc}")
    except Exception:
        pass  # the conversion machinery failed, not the value: pass the values as they came
    except BaseException as exc:
        return tool_error(exc)

    try:
        result = function(**arguments)
        if hasattr(result, "__await__"):
            result = run_async(result)
    except _TOOL_ERROR as exc:
        # The tool's own words for the caller: the message alone, no traceback.
        try:
            message = clip(str(exc))
        except BaseException:
            message = "the tool failed"
        return emit(
            {
                "status": "tool_error",
                "error": {"type": "ToolError", "message": message, "traceback": "",
                          "deliberate": True},
            }
        )
    except BaseException as exc:
        return tool_error(exc)

    # Images, audio, files and links (runtime/warden.py): one content part each. The
    # host checks every part and the binary budget again.
    try:
        import binascii

        def b64(data):
            return binascii.b2a_base64(data, newline=False).decode("ascii")

        result = _UNWRAP(result)
        parts = _CONTENT(result, dumps, b64)
    except BaseException as exc:
        return tool_error(exc, "UnserializableResult")
    if parts is not None:
        binary = sum(len(p.get("data") or p.get("resource", {}).get("blob") or "") for p in parts) * 3 // 4
        if binary > request["return_bytes"]:
            return emit(
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
        return emit({"status": "ok", "content": parts})

    try:
        value = to_json(result, "result", set(), dumps, loaded, MAX_DEPTH)
    except _Unserializable as exc:
        return tool_error(exc, "UnserializableResult")
    except BaseException as exc:
        return tool_error(exc)

    # Measured as the host measures it: json.dumps's text, or the string itself.
    limit = request["return_char_limit"]
    text = value if isinstance(value, str) else dumps(value, ensure_ascii=False, allow_nan=False)
    if len(text) > limit:
        emit(
            {
                "status": "ok",
                "value": text[:limit],
                "truncated": {"original_chars": len(text), "kept_chars": limit},
            }
        )
    else:
        emit({"status": "ok", "value": value})


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


def _fresh_state(loaded):
    # State that modules seed once, at import: in a snapshot (Warden's own, or a tool's
    # warm state) it would be the same in every call. Reseed it from os.urandom and the
    # clock, per call.
    random = loaded("random")
    if random is not None:
        random.seed()  # from os.urandom, in C
    numpy_random = loaded("numpy.random")
    if numpy_random is not None:
        numpy_random.seed()  # numpy's global RandomState, from the OS's entropy
    tempfile = loaded("tempfile")
    if tempfile is not None:
        tempfile._name_sequence = None  # a new random name sequence
    logging = loaded("logging")
    if logging is not None:
        import time

        logging._startTime = time.time_ns() if isinstance(logging._startTime, int) else time.time()


class _WatchedEnviron(_MutableMapping):
    # os.environ while a tool's module-level code runs for a warm state: that instance
    # has no granted variables, so the tool's own code reading the environment at import
    # would see values other than a call's. Such a read marks the tool as not warmable.
    # (Libraries the tool imports see the base environment, as documented.) A mapping,
    # like os.environ, that delegates to the real one: code keeping a reference to it
    # reads each call's variables later.
    def __init__(self, real, module_path):
        self.real = real
        self.module_path = module_path
        self.read = False

    def _saw(self):
        import sys

        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.endswith(
            ("/os.py", "<frozen os>", "/warden/harness.py", "/_collections_abc.py",
             "<frozen _collections_abc>")
        ):
            frame = frame.f_back
        if frame is not None and frame.f_code.co_filename == self.module_path:
            self.read = True

    def __getitem__(self, key):
        self._saw()
        return self.real[key]

    def __iter__(self):
        self._saw()
        return iter(self.real)

    def __len__(self):
        self._saw()
        return len(self.real)

    def __contains__(self, key):
        self._saw()
        return key in self.real

    def __setitem__(self, key, value):
        self.real[key] = value

    def __delitem__(self, key):
        del self.real[key]

    def copy(self):
        self._saw()
        return self.real.copy()

    def __repr__(self):
        self._saw()
        return repr(self.real)


def _warden_prepare():
    # Builds a tool's warm state (src/sandbox/warm.rs): imports the tool once, in an
    # instance with no grants, no secrets and no arguments, whose memory then becomes
    # the starting point of every call of that tool version. Reads {"nonce", "module",
    # "packages"} from stdin and answers with a frame: ok, or tool_error when the
    # module-level code raised or read the environment (the tool then runs cold).
    import gc
    import json
    import os
    import sys

    request = json.loads(sys.stdin.buffer.read())
    module_path = request["module"]
    emit = _frame_writer(request["nonce"], sys, os.write, json.dumps)

    def refuse(kind, message, trace=""):
        emit({"status": "tool_error", "error": {"type": kind, "message": message[:16000], "traceback": trace[-16000:]}})

    site = request.get("packages")
    if site and site not in sys.path:
        sys.path.append(site)

    module = type(sys)("__warden_tool__")
    module.__file__ = module_path
    sys.modules["__warden_tool__"] = module
    real = os.environ
    watched = _WatchedEnviron(real, module_path)
    os.environ = watched
    try:
        with open(module_path, "rb") as f:
            data = f.read()
        code = compile(data, module_path, "exec")
        # The tool's lines, kept in the warm state for tracebacks: cached with no
        # modification time to check, a failing call reads no file for them.
        _linecache.cache[module_path] = (
            len(data), None, data.decode("utf-8", "replace").splitlines(True), module_path
        )
        exec(code, module.__dict__)
    except BaseException as exc:
        os.environ = real
        del sys.modules["__warden_tool__"]
        return refuse(type(exc).__name__, str(exc), "".join(_traceback.format_exception(exc)))
    finally:
        os.environ = real
    if watched.read:
        del sys.modules["__warden_tool__"]
        return refuse(
            "ReadsEnvironment",
            "the module-level code reads os.environ, whose values differ per call",
        )
    # numpy loads numpy.random on first use; tools use it in their functions. Load it
    # now, so calls do not pay that import (each call reseeds it, see _fresh_state).
    if "numpy" in sys.modules and "numpy.random" not in sys.modules:
        try:
            import numpy.random  # noqa: F401
        except Exception:
            pass
    if "matplotlib.pyplot" in sys.modules:
        _warm_matplotlib(sys.modules)
    _WARM["module"] = module_path
    # Everything alive now is part of the warm state: keep the collector off it, so a
    # call does not write to its pages (copy-on-write friendly; CPython's gc.freeze).
    gc.collect()
    gc.freeze()
    emit({"status": "ok", "value": None})


def _warm_matplotlib(modules):
    # A tool that imports pyplot draws charts: its first figure in a process fills
    # matplotlib's caches (font lookups, text layout, the Agg renderer's state), which
    # cost a call about as much as its own chart. Draw one here, once, so that every
    # call starts with them. The fonts themselves are let go: a font object reads its
    # file through a descriptor that no later instance has.
    pyplot = modules["matplotlib.pyplot"]
    try:
        import io

        figure = pyplot.figure(figsize=(2, 1.5), dpi=50)
        axes = figure.add_subplot()
        axes.bar([0, 1], [1, 2], label="a")
        axes.plot([0, 1], [2, 1])
        axes.set_title("warm")
        axes.set_xlabel("x")
        axes.legend()
        figure.savefig(io.BytesIO(), format="png")
        pyplot.close(figure)
    except Exception:
        pass
    finally:
        font_manager = modules.get("matplotlib.font_manager")
        if font_manager is not None:
            try:
                font_manager._get_font.cache_clear()
            except Exception:
                pass


def tool_method(cls):
    """The bound method that runs a framework's tool class: smolagents calls `setup()`
    once and then `forward`; LangChain and CrewAI call `_run` (or `_arun`)."""
    for name in ("forward", "_run", "_arun"):
        if callable(getattr(cls, name, None)):
            instance = cls()
            if name == "forward" and callable(getattr(instance, "setup", None)):
                instance.setup()
            return getattr(instance, name)
    raise TypeError(f"the tool class {cls.__name__} defines no forward(), _run() or _arun()")


def bind_problem(function, arguments):
    """Why `function(**arguments)` cannot bind, or None. Reads the code object rather
    than importing `inspect`, which the snapshot does not hold. A bound method's first
    parameter (`self`) is bound already."""
    code = function.__code__
    first = max(code.co_posonlyargcount, 1 if hasattr(function, "__self__") else 0)
    positional = code.co_varnames[first : code.co_argcount]
    keyword_only = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    accepts_any = bool(code.co_flags & 0x08)  # **kwargs
    defaults = function.__defaults__ or ()
    required = list(positional[: len(positional) - len(defaults)]) if len(defaults) <= len(positional) else []
    kwdefaults = function.__kwdefaults__ or {}
    required += [k for k in keyword_only if k not in kwdefaults]
    posonly = code.co_varnames[: code.co_posonlyargcount]
    posonly_required = posonly[: max(0, code.co_posonlyargcount - len(defaults))]
    if posonly_required:
        return f"positional-only parameters cannot be passed by name: {', '.join(posonly_required)}"
    names = set(positional) | set(keyword_only)
    unknown = [a for a in arguments if a not in names]
    if unknown and not accepts_any:
        return f"unexpected argument(s): {', '.join(sorted(unknown))}"
    missing = [r for r in required if r not in arguments]
    if missing:
        return f"missing required argument(s): {', '.join(missing)}"
    return None


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


class _ArgumentError(Exception):
    """A JSON argument that does not convert to its parameter's annotated type."""


# Annotations a JSON value already satisfies as it arrives (a `float` parameter takes a
# JSON integer as an int, as PEP 484 allows): no conversion and no `typing` for them.
_JSON_TYPES = frozenset((str, int, float, bool, list, dict, object, type(None), None))
_JSON_NAMES = ("str", "int", "float", "bool", "list", "dict", "object", "None")


def typed_arguments(function, arguments, loaded):
    """`arguments` with each value built as its parameter's annotation says (README,
    "Typed arguments"). When every annotation is a plain JSON type or absent this returns
    at once: no import, no `typing`, which costs fuel on every call. Raises
    _ArgumentError for a value that does not convert; a parameter whose annotation cannot
    be resolved keeps its value as it came."""
    try:
        raw = function.__annotations__
    except Exception:
        raw = None  # a name that does not resolve: each parameter is resolved on its own
    globalns = function.__globals__
    typing = loaded("typing")
    if raw is not None and all(
        _is_json_type(raw[name], globalns, typing) for name in arguments if name in raw
    ):
        return arguments
    hints = _function_hints(function, raw, globalns, loaded)
    out = dict(arguments)
    for name, value in arguments.items():
        if name not in hints:
            continue
        try:
            out[name] = _convert(hints[name], value, name, globalns, loaded)
        except _ArgumentError:
            raise
        except Exception:
            pass  # the conversion machinery, not the value: keep the value as it came
    return out


def _is_json_type(annotation, globalns, typing):
    try:
        if annotation in _JSON_TYPES or (typing is not None and annotation is typing.Any):
            return True
    except Exception:  # an unhashable or odd annotation
        return False
    if type(annotation) is str:
        # `from __future__ import annotations`: "list[str]", "int | None", with none of
        # these names shadowed in the tool's module.
        import builtins
        import re

        if re.fullmatch(r"[\w\[\], |]*", annotation) is None:
            return False
        for name in re.findall(r"\w+", annotation):
            if name not in _JSON_NAMES:
                return False
            builtin = getattr(builtins, name, None)
            if globalns.get(name, builtin) is not builtin:
                return False
        return True
    args = getattr(annotation, "__args__", None)
    if type(args) is not tuple:
        return False
    origin = getattr(annotation, "__origin__", None)
    if origin in (list, dict) or type(annotation) is type(int | None):
        return all(_is_json_type(a, globalns, typing) for a in args)
    return False


def _function_hints(function, raw, globalns, loaded):
    """The resolved annotations of `function`: `typing.get_type_hints` when the tool has
    loaded `typing` (free then), else annotationlib's own evaluation, so that a tool that
    never imports `typing` does not pay for it. If a name does not resolve, each
    parameter is resolved on its own and the ones that fail are left out."""
    typing = loaded("typing")
    annotationlib = loaded("annotationlib")
    try:
        if typing is not None:
            return typing.get_type_hints(function, globalns=globalns, include_extras=True)
        if raw is not None and not any(type(a) is str for a in raw.values()):
            return raw
        if annotationlib is not None:
            return annotationlib.get_annotations(function, eval_str=True)
    except Exception:
        pass
    if annotationlib is None:
        return {}
    try:
        each = annotationlib.get_annotations(function, format=annotationlib.Format.FORWARDREF)
    except Exception:
        return {}
    hints = {}
    for name, annotation in each.items():
        try:
            hints[name] = _resolve(annotation, globalns, typing)
        except Exception:
            pass
    return hints


def _resolve(annotation, globalns, typing):
    """One annotation as a type: a string is evaluated in the tool's module; a name that
    did not resolve (annotationlib's ForwardRef) raises."""
    if typing is not None:
        def one():
            pass

        one.__annotations__ = {"a": annotation}
        return typing.get_type_hints(one, globalns=globalns, include_extras=True)["a"]
    if type(annotation) is str:
        return eval(annotation, globalns)
    if type(annotation).__name__ == "ForwardRef":
        raise NameError(annotation)
    return annotation


def _class_hints(cls, loaded):
    """The resolved field annotations of a dataclass or TypedDict, inherited ones too."""
    typing = loaded("typing")
    if typing is not None:
        return typing.get_type_hints(cls, include_extras=True)
    annotationlib = loaded("annotationlib")
    hints = {}
    for klass in reversed(cls.__mro__):
        if annotationlib is not None:
            hints.update(annotationlib.get_annotations(klass, eval_str=True))
        else:
            hints.update(klass.__dict__.get("__annotations__", {}))
    return hints


def _name(tp):
    return getattr(tp, "__qualname__", None) or getattr(tp, "__name__", None) or repr(tp)


def _kind(value):
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _mismatch(path, value, wanted):
    return _ArgumentError(f"{path}: expected {wanted}, got {_kind(value)}")


def _fits(tp, value):
    """Whether a JSON value is already of the plain JSON type `tp`."""
    if tp is object or tp is None or tp is type(None):
        return True
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def _convert(tp, value, path, globalns, loaded):
    """`value` (JSON, checked against the schema) built as `tp`. Anything this does not
    know passes unchanged; a value that does not fit raises _ArgumentError."""
    if value is None:
        return None
    try:
        if tp in _JSON_TYPES:
            return value
    except Exception:
        return value
    typing = loaded("typing")
    if typing is not None and tp is typing.Any:
        return value
    if type(tp) is str:
        tp = eval(tp, globalns)  # a string nested in a generic: list["Item"]
    origin = getattr(tp, "__origin__", None)
    args = getattr(tp, "__args__", None) or ()
    if origin is not None and getattr(tp, "__metadata__", None) is not None:
        return _convert(origin, value, path, globalns, loaded)  # Annotated[T, ...]
    if type(tp) is type(int | None) or (typing is not None and origin is typing.Union):
        return _union(tp, args, value, path, globalns, loaded)
    if typing is not None and origin is not None:
        if origin is typing.Literal:
            enum = loaded("enum")
            for member in args:
                if enum is not None and isinstance(member, enum.Enum) and member.value == value:
                    return member
            return value
        if origin in (typing.Required, typing.NotRequired, getattr(typing, "ReadOnly", None)):
            return _convert(args[0], value, path, globalns, loaded)
    if origin is not None:
        return _generic(origin, args, value, path, globalns, loaded)
    if not isinstance(tp, type):
        return value  # a TypeVar, NewType, unresolved name, ...: left as it came
    return _instance(tp, value, path, globalns, loaded)


def _union(tp, args, value, path, globalns, loaded):
    last = None
    for member in args:
        if member is type(None):
            continue
        if member in _JSON_TYPES:
            if _fits(member, value):
                return value
            continue
        try:
            return _convert(member, value, path, globalns, loaded)
        except _ArgumentError as exc:
            last = exc
    if last is not None and len(args) <= 2:
        raise last
    names = " | ".join(_name(a) for a in args)
    raise _ArgumentError(f"{path}: {_kind(value)} fits none of {names}")


def _generic(origin, args, value, path, globalns, loaded):
    abc = loaded("collections.abc")
    sequences = (list, set, frozenset)
    if abc is not None:
        sequences += (abc.Sequence, abc.MutableSequence, abc.Iterable, abc.Collection,
                      abc.Set, abc.MutableSet)
    mappings = (dict,) if abc is None else (dict, abc.Mapping, abc.MutableMapping)
    if origin is tuple:
        if not isinstance(value, list):
            raise _mismatch(path, value, "an array")
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(
                _convert(args[0], v, f"{path}[{i}]", globalns, loaded) for i, v in enumerate(value)
            )
        if len(args) != len(value):
            raise _ArgumentError(f"{path}: expected {len(args)} items, got {len(value)}")
        return tuple(
            _convert(t, v, f"{path}[{i}]", globalns, loaded) for i, (t, v) in enumerate(zip(args, value))
        )
    if origin in sequences:
        if not isinstance(value, list):
            raise _mismatch(path, value, "an array")
        items = [
            _convert(args[0] if args else None, v, f"{path}[{i}]", globalns, loaded)
            for i, v in enumerate(value)
        ]
        if origin in (list, set, frozenset):
            kind = origin
        elif abc is not None and origin in (abc.Set, abc.MutableSet):
            kind = set
        else:
            kind = list
        if kind is list:
            return items
        try:
            return kind(items)
        except TypeError as exc:
            raise _ArgumentError(f"{path}: the items cannot form a set: {exc}") from None
    if origin in mappings:
        if not isinstance(value, dict):
            raise _mismatch(path, value, "an object")
        item = args[1] if len(args) == 2 else None
        return {k: _convert(item, v, f"{path}[{k!r}]", globalns, loaded) for k, v in value.items()}
    return value


def _instance(tp, value, path, globalns, loaded):
    """`value` as an instance of the class `tp`."""
    name = _name(tp)
    if tp in (tuple, set, frozenset):
        if not isinstance(value, list):
            raise _mismatch(path, value, "an array")
        try:
            return tp(value)
        except TypeError as exc:
            raise _ArgumentError(f"{path}: the items cannot form a {name}: {exc}") from None
    if tp is bytes:
        import binascii

        if not isinstance(value, str):
            raise _mismatch(path, value, "a base64 string")
        try:
            return binascii.a2b_base64(value, strict_mode=True)
        except binascii.Error as exc:
            raise _ArgumentError(f"{path}: {value!r:.80} is not base64 ({exc})") from None
    enum = loaded("enum")
    if enum is not None and issubclass(tp, enum.Enum):
        try:
            return tp(value)
        except ValueError:
            allowed = ", ".join(repr(m.value) for m in tp)
            raise _ArgumentError(f"{path}: {value!r:.80} is not a value of {name} ({allowed})") from None
    if issubclass(tp, dict) and hasattr(tp, "__required_keys__"):  # TypedDict
        if not isinstance(value, dict):
            raise _mismatch(path, value, f"an object for {name}")
        hints = _class_hints(tp, loaded)
        return {
            k: _convert(hints.get(k), v, f"{path}.{k}", globalns, loaded) for k, v in value.items()
        }
    build = getattr(tp, "model_validate", None)  # Pydantic 2
    if not callable(build) and hasattr(tp, "__fields__"):
        build = getattr(tp, "parse_obj", None)  # Pydantic 1
    if callable(build):
        try:
            return build(value)
        except Exception as exc:
            raise _ArgumentError(f"{path}: not a valid {name}: {exc}") from exc
    if issubclass(tp, tuple) and hasattr(tp, "_fields") and isinstance(value, dict):
        try:  # a NamedTuple
            return tp(**{
                k: _convert(_class_hints(tp, loaded).get(k), v, f"{path}.{k}", globalns, loaded)
                for k, v in value.items()
            })
        except _ArgumentError:
            raise
        except Exception as exc:
            raise _ArgumentError(f"{path}: not a valid {name}: {exc}") from exc
    dataclasses = loaded("dataclasses")
    if dataclasses is not None and dataclasses.is_dataclass(tp):
        if not isinstance(value, dict):
            raise _mismatch(path, value, f"an object for {name}")
        hints = _class_hints(tp, loaded)
        fields = {f.name for f in dataclasses.fields(tp) if f.init}
        kwargs = {
            k: _convert(hints.get(k), v, f"{path}.{k}", globalns, loaded) if k in fields else v
            for k, v in value.items()
        }
        try:
            return tp(**kwargs)
        except Exception as exc:
            raise _ArgumentError(f"{path}: not a valid {name}: {exc}") from exc
    datetime = loaded("datetime")
    if datetime is not None:
        if issubclass(tp, (datetime.date, datetime.time)):
            if not isinstance(value, str):
                raise _mismatch(path, value, f"an ISO 8601 string for {name}")
            try:
                return tp.fromisoformat(value)
            except ValueError as exc:
                raise _ArgumentError(f"{path}: {value!r:.80} is not an ISO 8601 {name} ({exc})") from None
        if issubclass(tp, datetime.timedelta):
            return _duration(tp, value, path)
    uuid = loaded("uuid")
    if uuid is not None and issubclass(tp, uuid.UUID):
        if not isinstance(value, str):
            raise _mismatch(path, value, "a UUID string")
        try:
            return tp(value)
        except ValueError:
            raise _ArgumentError(f"{path}: {value!r:.80} is not a UUID") from None
    decimal = loaded("decimal")
    if decimal is not None and issubclass(tp, decimal.Decimal):
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise _mismatch(path, value, "a number or a numeric string")
        try:
            # From a float's shortest repr, so 0.1 is Decimal('0.1'), not its binary value.
            return tp(repr(value) if isinstance(value, float) else value)
        except (ArithmeticError, ValueError):
            raise _ArgumentError(f"{path}: {value!r:.80} is not a decimal number") from None
    return value


def _duration(tp, value, path):
    """A timedelta from seconds or an ISO 8601 duration (`P1DT2H`, `PT0.5S`, `-PT3M`)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return tp(seconds=value)
    import re

    match = isinstance(value, str) and re.fullmatch(
        r"([-+]?)P(?:(\d+(?:[.,]\d+)?)W)?(?:(\d+(?:[.,]\d+)?)D)?"
        r"(?:T(?:(\d+(?:[.,]\d+)?)H)?(?:(\d+(?:[.,]\d+)?)M)?(?:(\d+(?:[.,]\d+)?)S)?)?",
        value,
    )
    if not match or value.rstrip("T").endswith("P") or value.endswith("T"):
        raise _ArgumentError(
            f"{path}: {value!r:.80} is not a duration; send seconds or ISO 8601 such as 'P1DT2H30M'"
        )
    sign, weeks, days, hours, minutes, seconds = match.groups()
    parts = [float(p.replace(",", ".")) if p else 0.0 for p in (weeks, days, hours, minutes, seconds)]
    delta = tp(weeks=parts[0], days=parts[1], hours=parts[2], minutes=parts[3], seconds=parts[4])
    return -delta if sign == "-" else delta


class _Unserializable(Exception):
    pass


def to_json(value, path, active, dumps, loaded, depth):
    """The documented conversion of a result to JSON; see the README. `depth` is how many
    more levels of lists and dicts may open below this one."""
    if value is None or isinstance(value, (bool, str)):
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):
            raise _Unserializable(f"{path} is {value}, which JSON cannot hold")
        return float(value)
    if isinstance(value, (bytes, bytearray, memoryview)):
        import binascii

        return binascii.b2a_base64(bytes(value), newline=False).decode("ascii")
    enum = loaded("enum")
    if enum and isinstance(value, enum.Enum):
        return to_json(value.value, path, active, dumps, loaded, depth)
    datetime = loaded("datetime")
    if datetime:
        if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
            return value.isoformat()
        if isinstance(value, datetime.timedelta):
            return value.total_seconds()
    for module, kind in (("uuid", "UUID"), ("decimal", "Decimal"), ("pathlib", "PurePath")):
        m = loaded(module)
        if m and isinstance(value, getattr(m, kind)):
            return str(value)
    if id(value) in active:
        raise _Unserializable(f"{path} refers back to itself")
    if depth <= 0:
        raise _Unserializable(f"{path} nests deeper than the result may (100 levels); flatten it")
    active.add(id(value))
    try:
        if isinstance(value, dict):
            out = {}
            for key, item in value.items():
                if isinstance(key, str):
                    text = key
                elif key is None or isinstance(key, (bool, int, float)):
                    text = dumps(key)
                else:
                    raise _Unserializable(f"{path} has a key of type {type(key).__name__}; use str keys")
                out[text] = to_json(item, f"{path}[{text!r}]", active, dumps, loaded, depth - 1)
            return out
        if isinstance(value, tuple) and hasattr(value, "_asdict"):  # a NamedTuple
            return {
                k: to_json(v, f"{path}.{k}", active, dumps, loaded, depth - 1)
                for k, v in value._asdict().items()
            }
        if isinstance(value, (list, tuple)):
            return [
                to_json(v, f"{path}[{i}]", active, dumps, loaded, depth - 1)
                for i, v in enumerate(value)
            ]
        if isinstance(value, (set, frozenset)):
            items = [to_json(v, f"{path}{{}}", active, dumps, loaded, depth - 1) for v in value]
            try:
                return sorted(items)
            except TypeError:
                return items
        dataclasses = loaded("dataclasses")
        if dataclasses and dataclasses.is_dataclass(value) and not isinstance(value, type):
            return {
                f.name: to_json(
                    getattr(value, f.name), f"{path}.{f.name}", active, dumps, loaded, depth - 1
                )
                for f in dataclasses.fields(value)
            }
        dump = getattr(value, "model_dump", None)
        if callable(dump):
            return to_json(dump(), path, active, dumps, loaded, depth)
        if type(value).__module__.split(".")[0] == "numpy" and hasattr(value, "tolist"):
            return to_json(value.tolist(), path, active, dumps, loaded, depth)
    finally:
        active.discard(id(value))
    raise _Unserializable(
        f"{path} is a {type(value).__module__}.{type(value).__qualname__}, which has no JSON form;"
        " return str, int, float, bool, None, list, dict, a dataclass or a model with model_dump()"
    )
