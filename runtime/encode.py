"""Encoding a tool's result as JSON, in the guest.

Loaded as `_warden_encode` while Warden builds its snapshot; the harness turns each
result into JSON with `to_json`, the documented conversion (docs/writing-tools.md).
Pure, and tested under the host's CPython (tests/guest/).
"""
class _Unserializable(Exception):
    pass


def to_json(value, path, active, dumps, loaded, depth):
    """The documented conversion of a result to JSON (docs/writing-tools.md). `depth` is how many
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
