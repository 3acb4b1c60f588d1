# The `warden` module every tool can import: progress reports, rich results and
# ToolError. Loaded once, while Warden builds its snapshot (src/sandbox/snapshot.rs), so
# importing it costs a call nothing. It also defines thin stand-ins for the import paths
# of the MCP Python SDKs (`mcp.server.fastmcp`, `mcp.server.mcpserver`, `fastmcp`), so
# FastMCP-style tools run unchanged (the real packages need Pydantic, which cannot load
# in the guest), and for agent frameworks' tool decorators (LangChain, smolagents,
# CrewAI, Strands, OpenAI Agents, Google ADK), used when a tool's packages lack them.
#
# Nothing here is trusted by the host: a progress report or a log record is one frame
# through the runtime's door (`_host.call`), which the host checks, orders, rate-limits
# and forwards only when the caller asked for it; a rich result is checked part by part
# (type, base64, mime type, size) before any caller sees it.

# What the current call asked for; set by the harness before the tool runs.
_call = {"progress": False, "door": None, "dumps": None}


def _send(frame):
    """One frame through the door; False when it could not be sent."""
    call = _call["door"]
    if call is None:
        return False
    try:
        call(_call["dumps"](frame, ensure_ascii=False, allow_nan=False).encode("utf-8", "surrogatepass"))
    except Exception:
        return False
    return True


def _number(value, what):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number, not {type(value).__name__}")
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        raise ValueError(f"{what} must be finite, not {value}")
    return value


def progress(done, total=None, message=None):
    """Reports how far the call is: `done` out of `total` (if known), with an optional
    message. Sent as MCP progress notifications when the caller asked for them (a
    progress token); costs nothing otherwise. Values must increase: the host drops a
    report that does not, and rate-limits the rest."""
    done = _number(done, "done")
    if total is not None:
        total = _number(total, "total")
    if message is not None:
        message = str(message)[:1000]
    if not _call["progress"]:
        return
    _send({"op": "progress", "progress": done, "total": total, "message": message})


class ToolError(Exception):
    """Raise it to fail the call with just this message: the caller (and its model) sees
    the message, no traceback (MCP: `isError`)."""


# ---------------------------------------------------------------------------------------
# Rich results


_IMAGE_FORMATS = {
    "png": "image/png", "jpg": "image/jpeg", "jpeg": "image/jpeg", "gif": "image/gif",
    "webp": "image/webp", "svg": "image/svg+xml", "bmp": "image/bmp", "tiff": "image/tiff",
}
_AUDIO_FORMATS = {
    "wav": "audio/wav", "mp3": "audio/mpeg", "mpeg": "audio/mpeg", "ogg": "audio/ogg",
    "flac": "audio/flac", "webm": "audio/webm", "m4a": "audio/mp4", "aac": "audio/aac",
}
_FILE_TYPES = {
    "txt": "text/plain", "md": "text/markdown", "csv": "text/csv", "json": "application/json",
    "html": "text/html", "xml": "application/xml", "yaml": "application/yaml",
    "yml": "application/yaml", "pdf": "application/pdf", "zip": "application/zip",
    "py": "text/x-python", "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
}
_FILE_TYPES.update(_IMAGE_FORMATS)
_FILE_TYPES.update(_AUDIO_FORMATS)


def _extension(name):
    name = str(name or "")
    dot = name.rfind(".")
    return name[dot + 1 :].lower() if dot > name.rfind("/") else ""


def _sniff_image(data):
    if data[:8] == b"\x89PNG\r\n\x1a\n":
        return "image/png"
    if data[:3] == b"\xff\xd8\xff":
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def _sniff_audio(data):
    if data[:4] == b"RIFF" and data[8:12] == b"WAVE":
        return "audio/wav"
    if data[:3] == b"ID3" or data[:2] in (b"\xff\xfb", b"\xff\xf3", b"\xff\xf2"):
        return "audio/mpeg"
    if data[:4] == b"OggS":
        return "audio/ogg"
    if data[:4] == b"fLaC":
        return "audio/flac"
    if data[4:8] == b"ftyp":
        return "audio/mp4"
    return None


def _read(path):
    with open(path, "rb") as f:
        return f.read()


def _image_bytes(source, fmt):
    """PNG (or `fmt`) bytes of a matplotlib Figure or a PIL image; None for anything else."""
    kind = type(source)
    module = kind.__module__ or ""
    if module.startswith("matplotlib") and hasattr(source, "savefig"):
        import io

        buffer = io.BytesIO()
        source.savefig(buffer, format=fmt or "png")
        return buffer.getvalue()
    if module.startswith("PIL") and hasattr(source, "save") and hasattr(source, "mode"):
        import io

        buffer = io.BytesIO()
        source.save(buffer, format=(fmt or "png").upper())
        return buffer.getvalue()
    return None


class Image:
    """An image result (MCP `image` content): `Image(data)` with PNG/JPEG/GIF/WebP bytes,
    `Image(path="/out/chart.png")`, `Image(figure)` for a matplotlib Figure or
    `Image(pil_image)`; PNG unless `format="jpeg"` (or `mime_type=`) says otherwise."""

    def __init__(self, data=None, *, path=None, format=None, mime_type=None):
        if (data is None) == (path is None):
            raise ValueError("Image needs either data (bytes, a Figure, a PIL image) or path=, not both")
        fmt = (format or "").lower().lstrip(".") or None
        if path is not None:
            data = _read(path)
            fmt = fmt or _extension(path) or None
        elif not isinstance(data, (bytes, bytearray, memoryview)):
            rendered = _image_bytes(data, fmt)
            if rendered is None:
                raise TypeError(
                    f"Image takes bytes, a matplotlib Figure or a PIL image, not {type(data).__name__}"
                )
            data = rendered
            fmt = fmt or "png"
        self.data = bytes(data)
        self.mime_type = (
            mime_type
            or (_IMAGE_FORMATS.get(fmt) if fmt else None)
            or (f"image/{fmt}" if fmt else None)
            or _sniff_image(self.data)
            or "image/png"
        )

    def _part(self, b64):
        return {"type": "image", "data": b64(self.data), "mimeType": self.mime_type}

    def _size(self):
        return len(self.data)


class Audio:
    """An audio result (MCP `audio` content): `Audio(data)` or `Audio(path=...)`; the
    mime type is sniffed from the bytes (WAV is `audio/wav`) unless `format=` or
    `mime_type=` says it."""

    def __init__(self, data=None, *, path=None, format=None, mime_type=None):
        if (data is None) == (path is None):
            raise ValueError("Audio needs either data (bytes) or path=, not both")
        fmt = (format or "").lower().lstrip(".") or None
        if path is not None:
            data = _read(path)
            fmt = fmt or _extension(path) or None
        if not isinstance(data, (bytes, bytearray, memoryview)):
            raise TypeError(f"Audio takes bytes, not {type(data).__name__}")
        self.data = bytes(data)
        self.mime_type = (
            mime_type
            or _sniff_audio(self.data)
            or (_AUDIO_FORMATS.get(fmt) if fmt else None)
            or (f"audio/{fmt}" if fmt else None)
        )
        if not self.mime_type:
            raise ValueError("cannot tell the audio's type from its bytes; pass mime_type='audio/...'")

    def _part(self, b64):
        return {"type": "audio", "data": b64(self.data), "mimeType": self.mime_type}

    def _size(self):
        return len(self.data)


class File:
    """A file result (MCP embedded `resource`): `File("text", name="notes.md")` or
    `File(b"...", name="report.pdf")`, or `File(path="/out/report.pdf")`. The mime type
    comes from `mime_type=` or the name; the uri is `file:///NAME` unless `uri=` says."""

    def __init__(self, data=None, *, path=None, name=None, mime_type=None, uri=None):
        if (data is None) == (path is None):
            raise ValueError("File needs either data (str or bytes) or path=, not both")
        if path is not None:
            data = _read(path)
            name = name or str(path).rsplit("/", 1)[-1]
        if not isinstance(data, (str, bytes, bytearray, memoryview)):
            raise TypeError(f"File takes str or bytes, not {type(data).__name__}")
        self.data = data if isinstance(data, str) else bytes(data)
        self.name = name or "resource"
        self.uri = uri or ("file:///" + self.name.lstrip("/"))
        self.mime_type = (
            mime_type
            or _FILE_TYPES.get(_extension(self.name))
            or ("text/plain" if isinstance(self.data, str) else "application/octet-stream")
        )

    def _part(self, b64):
        resource = {"uri": self.uri, "mimeType": self.mime_type}
        if isinstance(self.data, str):
            resource["text"] = self.data
        else:
            resource["blob"] = b64(self.data)
        return {"type": "resource", "resource": resource}

    def _size(self):
        return 0 if isinstance(self.data, str) else len(self.data)


class Link:
    """A link result (MCP `resource_link`): `Link("https://...", name="report")`."""

    def __init__(self, uri, *, name=None, description=None, mime_type=None):
        self.uri = str(uri)
        self.name = name or self.uri.rstrip("/").rsplit("/", 1)[-1] or self.uri
        self.description = description
        self.mime_type = mime_type

    def _part(self, b64):
        part = {"type": "resource_link", "uri": self.uri, "name": str(self.name)}
        if self.description is not None:
            part["description"] = str(self.description)
        if self.mime_type is not None:
            part["mimeType"] = str(self.mime_type)
        return part

    def _size(self):
        return 0


class _McpContent:
    """The MCP SDK's content classes (`mcp.types.TextContent`, `ImageContent`,
    `AudioContent`, `EmbeddedResource`, `ResourceLink`), as tools build them: keyword
    arguments, the wire's names. Each is one part of a rich result."""

    _type = None

    def __init__(self, **fields):
        fields.setdefault("type", self._type)
        fields.pop("annotations", None)
        fields.pop("meta", None)
        fields.pop("_meta", None)
        self.__dict__.update(fields)

    def _part(self, b64):
        part = {}
        for key, value in self.__dict__.items():
            if isinstance(value, _McpContent):
                value = value._part(b64)
            if value is not None:
                part["mimeType" if key == "mime_type" else key] = value
        return part

    def model_dump(self, **kw):
        return self._part(None)


def _mcp_class(name, kind):
    return type(name, (_McpContent,), {"_type": kind, "__module__": "mcp.types"})


_MCP_TYPES = {
    "TextContent": _mcp_class("TextContent", "text"),
    "ImageContent": _mcp_class("ImageContent", "image"),
    "AudioContent": _mcp_class("AudioContent", "audio"),
    "EmbeddedResource": _mcp_class("EmbeddedResource", "resource"),
    "ResourceLink": _mcp_class("ResourceLink", "resource_link"),
    "TextResourceContents": _mcp_class("TextResourceContents", None),
    "BlobResourceContents": _mcp_class("BlobResourceContents", None),
}


class ToolResult:
    """FastMCP's `ToolResult(content=..., structured_content=...)`: its content as the
    result's parts (a string is a text part), else its structured content as data."""

    def __init__(self, content=None, structured_content=None, meta=None):
        if isinstance(content, (str, _McpContent)) or _is_rich(content):
            content = [content]
        self.content = list(content or [])
        self.structured_content = structured_content

    def _part(self, b64):
        raise TypeError("a ToolResult is a whole result, not a part of one")


def _unwrap(result):
    """What a tool's result stands for: a `ToolResult` without content, its structured
    content."""
    if isinstance(result, ToolResult) and not result.content:
        return result.structured_content
    return result


_RICH = (Image, Audio, File, Link, _McpContent)


def _is_figure(value):
    module = type(value).__module__ or ""
    return (module.startswith("matplotlib") and hasattr(value, "savefig")) or (
        module.startswith("PIL") and hasattr(value, "save") and hasattr(value, "mode")
    )


def _is_rich(value):
    return isinstance(value, _RICH) or _is_figure(value)


def _content(result, dumps, b64):
    """The content parts of a rich result, or None when `result` is plain JSON data (a
    str, a dict, a model, ...). A list holding any rich item is one part per item, as is
    a `ToolResult`'s content."""
    if isinstance(result, ToolResult):
        items = result.content
        if not any(_is_rich(item) for item in items):
            return [
                {"type": "text", "text": item if isinstance(item, str) else dumps(item, ensure_ascii=False, allow_nan=False)}
                for item in items
            ]
        result = items
    if isinstance(result, (list, tuple)):
        if not any(_is_rich(item) for item in result):
            return None
        items = result
    elif _is_rich(result):
        items = (result,)
    else:
        return None
    parts = []
    for item in items:
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif _is_figure(item):
            parts.append(Image(item)._part(b64))
        elif isinstance(item, _RICH):
            parts.append(item._part(b64))
        else:
            parts.append({"type": "text", "text": dumps(item, ensure_ascii=False, allow_nan=False)})
    return parts


# ---------------------------------------------------------------------------------------
# Logging: standard `logging` records become MCP log notifications


# MCP's levels, least severe first, and the Python level each starts at.
_LEVELS = (
    ("debug", 10), ("info", 20), ("notice", 25), ("warning", 30),
    ("error", 40), ("critical", 50), ("alert", 60), ("emergency", 70),
)


def _mcp_level(levelno):
    name = "debug"
    for level, number in _LEVELS:
        if levelno >= number:
            name = level
    return name


def _start_logging(level, loaded):
    """Sends the call's log records at `level` and above through the door: a handler on
    the root logger, which is lowered to that level."""
    threshold = dict(_LEVELS).get(level)
    if threshold is None:
        return
    logging = loaded("logging")
    if logging is None:
        import logging

    class _DoorHandler(logging.Handler):
        def emit(self, record):
            try:
                message = record.getMessage()
                if record.exc_info and record.exc_info[0] is not None:
                    message += "\n" + logging.Formatter().formatException(record.exc_info)
            except Exception:
                message = str(record.msg)
            _send({"op": "log", "level": _mcp_level(record.levelno), "logger": record.name,
                   "message": message[:16000]})

    root = logging.getLogger()
    root.addHandler(_DoorHandler(threshold))
    if root.level > threshold or root.level == 0:
        root.setLevel(threshold)


def _log(level, message, logger=None):
    """One log record straight to the door (FastMCP's ctx.info and friends)."""
    if _call.get("log_level") is None:
        return
    if dict(_LEVELS).get(level, 0) < dict(_LEVELS)[_call["log_level"]]:
        return
    _send({"op": "log", "level": level, "logger": logger, "message": str(message)[:16000]})


# ---------------------------------------------------------------------------------------
# FastMCP-style tools


class _Done:
    """What Context's methods return: they act at once, and awaiting them is optional."""

    def __await__(self):
        return iter(())


_DONE = _Done()


class Context:
    """What a FastMCP tool gets for a parameter annotated `Context`: progress and logs
    work; sampling, elicitation and resources do not exist in Warden's sandbox."""

    request_id = None
    client_id = None

    def __class_getitem__(cls, item):
        # `Context[ServerSession, None]`, the SDK's generic form, is the same context.
        return cls

    def report_progress(self, progress_value=None, total=None, message=None, **kw):
        progress(kw.get("progress", progress_value), total, message)
        return _DONE

    def log(self, level, message, logger_name=None, **kw):
        _log(str(level).lower(), message, logger_name or kw.get("logger"))
        return _DONE

    def debug(self, message, **kw):
        return self.log("debug", message, kw.get("logger_name"))

    def info(self, message, **kw):
        return self.log("info", message, kw.get("logger_name"))

    def warning(self, message, **kw):
        return self.log("warning", message, kw.get("logger_name"))

    def error(self, message, **kw):
        return self.log("error", message, kw.get("logger_name"))

    def _missing(self, what, instead):
        raise NotImplementedError(f"{what} is not available to tools run by Warden; {instead}")

    def sample(self, *a, **kw):
        self._missing("sampling (ctx.sample)", "return what the model should read, and let it act")

    def elicit(self, *a, **kw):
        self._missing("elicitation (ctx.elicit)", "take what you need as a parameter")

    def read_resource(self, *a, **kw):
        self._missing("resources (ctx.read_resource)", "read a granted folder (--mount) or take the data as a parameter")

    @property
    def session(self):
        self._missing("the MCP session (ctx.session)", "use ctx.report_progress and ctx.info")
