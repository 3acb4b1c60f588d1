"""Binding a call's JSON arguments to the tool's function, in the guest.

Loaded as `_warden_bind` while Warden builds its snapshot; the harness
(`runtime/harness.py`) uses it on every call: `tool_method` (a framework's tool class:
the method that runs it), `bind_problem` (why `function(**arguments)` cannot bind, read
from the code object), and `typed_arguments` (each value built as its parameter's
annotation says: dataclasses, Enums, datetimes, models, ...). Pure: it reads nothing
but its arguments, so it is tested under the host's CPython (tests/guest/).
"""
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


# Where an installed framework's tool object keeps the function it was made from:
# functools' `__wrapped__` (openai-agents' FunctionTool), `func` and `coroutine`
# (LangChain's StructuredTool, CrewAI's Tool), `fn` (FastMCP 2's FunctionTool),
# `_tool_func` (Strands), `forward` (smolagents' tool made by `@tool`).
_WRAPPED_AS = ("__wrapped__", "func", "coroutine", "fn", "_tool_func", "forward")


def tool_function(value, module_name):
    """The function defined in the tool's module (`module_name`) that `value` wraps,
    when `value` is the object a framework's decorator made of it (the framework itself
    installed among the tool's packages, rather than Warden's stand-in, whose decorators
    return the function). None when it wraps none."""
    for attribute in _WRAPPED_AS:
        try:
            inner = getattr(value, attribute, None)
        except Exception:
            continue
        if type(inner).__name__ == "function" and inner.__module__ == module_name:
            return inner
    return None


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


class _ArgumentError(Exception):
    """A JSON argument that does not convert to its parameter's annotated type."""


# Annotations a JSON value already satisfies as it arrives (a `float` parameter takes a
# JSON integer as an int, as PEP 484 allows): no conversion and no `typing` for them.
_JSON_TYPES = frozenset((str, int, float, bool, list, dict, object, type(None), None))
_JSON_NAMES = ("str", "int", "float", "bool", "list", "dict", "object", "None")


def typed_arguments(function, arguments, loaded):
    """`arguments` with each value built as its parameter's annotation says (docs/writing-tools.md,
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
    never imports `typing` does not pay for it. If a name does not resolve (a Letta
    tool's `agent_state: "AgentState"`), each parameter is resolved on its own and the
    ones that fail are left out."""
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
    if annotationlib is not None:
        try:
            each = annotationlib.get_annotations(function, format=annotationlib.Format.FORWARDREF)
        except Exception:
            return {}
    else:
        # Before Python 3.14 (the Pydantic runtime's 3.13) annotations are evaluated
        # eagerly: `raw` holds types, and strings for what was quoted.
        each = raw or {}
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
