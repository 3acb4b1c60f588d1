# Warden's guest harness. It is loaded once, when Warden builds its own snapshot of the
# runtime (src/sandbox/snapshot.rs): these definitions are then part of every instance's
# memory, and each call's `turn` only runs `_warden_call()`. Loading or compiling this
# file per call would cost fuel and time on every call. Nothing here may touch the file
# system at load time: the instance that is snapshotted has no folders at all.
#
# Per call it reads one JSON request from stdin:
#
#   {"nonce": str, "module": "/tool/NAME.py", "function": str, "arguments": {...},
#    "none_if_omitted": [str], "env": {str: str}, "return_char_limit": int,
#    "packages": "/packages" (only when the tool has installed packages)}
#
# imports the tool, calls the function, and writes one response frame to fd 1 as the
# very last thing it does:
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
    nonce = request["nonce"]

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

    def tool_error(exc, kind=None):
        import traceback

        # Drop the harness's own frames: start at the first frame of the tool file.
        frames = traceback.extract_tb(exc.__traceback__)
        for i, frame in enumerate(frames):
            if frame.filename == module_path:
                frames = frames[i:]
                break
        lines = traceback.format_list(frames) + traceback.format_exception_only(type(exc), exc)
        emit(
            {
                "status": "tool_error",
                "error": {
                    "type": kind or type(exc).__name__,
                    "message": clip(str(exc)),
                    "traceback": clip("Traceback (most recent call last):\n" + "".join(lines)),
                },
            }
        )

    # The environment is exactly the granted one: the snapshot froze the environment of
    # the instance that built it. `random` is not in the snapshot, so a tool that
    # imports it seeds it from os.urandom; should a snapshot ever hold it, reseed it.
    os.environ.clear()
    os.environ.update(request["env"])
    random = loaded("random")
    if random is not None:
        random.seed()  # from os.urandom, in C

    # The tool's installed packages come after the runtime's own, so they can add to the
    # bundled packages but never shadow the standard library or a bundled package.
    site = request.get("packages")
    if site:
        sys.path.append(site)

    name = request["function"]
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
    if type(function).__name__ != "function":
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
    problem = bind_problem(function, arguments)
    if problem:
        return bind_error(f"arguments do not fit {name}(): {problem}")

    try:
        result = function(**arguments)
        if hasattr(result, "__await__"):
            result = run_async(result)
    except BaseException as exc:
        return tool_error(exc)

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


def bind_problem(function, arguments):
    """Why `function(**arguments)` cannot bind, or None. Reads the code object rather
    than importing `inspect`, which the snapshot does not hold."""
    code = function.__code__
    positional = code.co_varnames[code.co_posonlyargcount : code.co_argcount]
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
