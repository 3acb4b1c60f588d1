"""A tool's warm state, the guest's side (`_warden_warm`; the host's is src/sandbox/warm.rs).

A warm state is an instance that has imported the tool once, with no grants, no secrets
and no arguments; its memory is then the starting point of every call of that tool
version. The harness's `_warden_prepare` reads the request and writes the frame; this
module does the rest:

- `import_tool` runs the tool's module-level code as `__warden_tool__`, and refuses a
  tool whose own module-level code raised or read `os.environ` (whose values differ per
  call: the warm instance has none of a call's variables). Such a tool runs cold.
- `warm_libraries` does, once, the work a library would otherwise do in every call's
  first moments (numpy's random module, matplotlib's first figure).
- `fresh_state` reseeds, per call, what modules seed once at import: in a snapshot it
  would be the same in every call.

Everything here is pure Python and tested under the host's CPython (tests/guest/).
"""

from collections.abc import MutableMapping as _MutableMapping

# The frames of the standard library's environment mapping and of this module, which
# stand between a read of os.environ and the code that made it.
_PASSING_THROUGH = (
    "/os.py",
    "<frozen os>",
    "/_collections_abc.py",
    "<frozen _collections_abc>",
    __file__,
)


class WatchedEnviron(_MutableMapping):
    """os.environ while a tool's module-level code runs for a warm state: a mapping that
    delegates to the real one (code keeping a reference to it reads each call's
    variables later) and notes whether the tool's own file read it. Libraries the tool
    imports see the base environment, as documented."""

    def __init__(self, real, module_path):
        self.real = real
        self.module_path = module_path
        self.read = False

    def _saw(self):
        import sys

        frame = sys._getframe(2)
        while frame is not None and frame.f_code.co_filename.endswith(_PASSING_THROUGH):
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


def import_tool(module_path, sys, os, linecache, traceback):
    """Imports the tool at `module_path` as `__warden_tool__`. Returns None, or why the
    tool cannot have a warm state: `{"type", "message", "traceback"}` (its module is
    then forgotten)."""
    module = type(sys)("__warden_tool__")
    module.__file__ = module_path
    sys.modules["__warden_tool__"] = module
    real = os.environ
    watched = WatchedEnviron(real, module_path)
    os.environ = watched
    try:
        with open(module_path, "rb") as f:
            data = f.read()
        code = compile(data, module_path, "exec")
        # The tool's lines, kept in the warm state for tracebacks: cached with no
        # modification time to check, a failing call reads no file for them.
        linecache.cache[module_path] = (
            len(data), None, data.decode("utf-8", "replace").splitlines(True), module_path
        )
        exec(code, module.__dict__)
    except BaseException as exc:
        del sys.modules["__warden_tool__"]
        return _refusal(type(exc).__name__, str(exc), "".join(traceback.format_exception(exc)))
    finally:
        os.environ = real
    if watched.read:
        del sys.modules["__warden_tool__"]
        return _refusal(
            "ReadsEnvironment",
            "the module-level code reads os.environ, whose values differ per call",
        )
    return None


def _refusal(kind, message, trace=""):
    return {"type": kind, "message": message[:16000], "traceback": trace[-16000:]}


def warm_libraries(modules):
    """Loads and fills, once, what the libraries the tool imported would load and fill
    in every call."""
    # numpy loads numpy.random on first use; tools use it in their functions. Load it
    # now, so calls do not pay that import (each call reseeds it, see fresh_state).
    if "numpy" in modules and "numpy.random" not in modules:
        try:
            import numpy.random  # noqa: F401
        except Exception:
            pass
    if "matplotlib.pyplot" in modules:
        _warm_matplotlib(modules)


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


def fresh_state(loaded):
    """Reseeds, from os.urandom and the clock, the state modules seed once at import.
    `loaded(name)` is the module if the tool's process has it, else None."""
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
