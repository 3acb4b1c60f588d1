"""Outbound HTTP for tools, carried out by Warden's host.

The guest has no network: its `socket` module reaches nothing and it has no `_ssl`. A
tool's HTTP requests go through the runtime's door instead, `_host.call(frame)`: the
guest sends one JSON frame per request and the host checks it against the tool's grants,
sends it, and answers with the whole response (see src/outbound/exchange.rs):

    guest: {"op": "http", "method": "GET", "url": "https://h:443/p?q",
            "headers": [[name, value], ...], "body": BASE64, "timeout": SECONDS | null}
    host:  {"ok": true, "status": 200, "reason": "OK", "headers": [[name, value], ...],
            "body": BASE64}
         | {"ok": false, "error": {"kind": "refused" | "limit" | "timeout" | "network"
                                          | "invalid", "message": TEXT}}

The host never follows redirects and never decompresses: each library follows redirects
and decodes bodies itself, as it would from a socket, and every hop is a new frame.

Warden execs this file into a module named `_warden_outbound` while it builds its
snapshot and calls `install()` once, before any tool code runs. `install()` takes
private references to what the door needs (a tool may later replace module attributes)
and puts a finder at the front of `sys.meta_path` that patches these modules right after
they are first imported, so that the snapshot holds none that a tool does not use:

- `http.client`: a connection's socket is replaced by a wire that sends each request
  http.client writes as one frame and hands it the answer as a raw HTTP/1.1 response
  (runtime/http_client.py, `_warden_http_client`, loaded after this module). So
  `http.client` and everything built on it (`urllib.request`) works unchanged, including
  keep-alive connections. `HTTPSConnection` exists even though `_ssl` does not;
- `ssl`: when `_ssl` is missing, the stand-in of `runtime/ssl_standin.py`
  (`_warden_ssl`), with the names that libraries use at import and construction. TLS
  is done, and the server's certificate verified, by Warden's host;
- `urllib.request`: gains `HTTPSHandler` if it was imported before `HTTPSConnection`
  existed (runtime/http_client.py too);
- `requests.adapters` and `httpx._transports.default`: their transports go through the
  door (runtime/http_libraries.py, `_warden_http_libraries`, loaded after this module);
- `socket`: `getaddrinfo`, `create_connection`, `socket.connect`/`connect_ex`, and
  making a socket where WASI cannot, raise PermissionError with a message that says
  what to use instead.

Errors are mapped to each library's own: a refusal ("refused", "limit", or no host
bound) is a PermissionError carrying the host's message (for requests and httpx, also an
instance of the library's connection error, so either `except` catches it); "timeout"
is TimeoutError / `requests.exceptions.ReadTimeout` / `httpx.ReadTimeout`; "network" is
ConnectionError (wrapped in URLError by urllib, as a failed connect is) /
`requests.exceptions.ConnectionError` / `httpx.ConnectError`; "invalid" is ValueError /
`requests.exceptions.InvalidURL` / a ValueError that is also `httpx.LocalProtocolError`.

Timeouts: the host bounds the whole request. A library's single timeout is sent as is;
a pair of connect and read timeouts (a requests tuple, an httpx Timeout) is sent as
their sum, the longest the library itself would wait for an answer that comes in one
read; no timeout is sent as null (the call's own deadline still applies).

Headers travel as text: request header bytes are read as Latin-1 (one character per
byte), and response header text is written back as UTF-8 bytes, which the libraries
then decode as they would a server's.
"""

# The door and the standard library functions it uses, taken by install() before any
# tool code runs.
_door = {}

_SOCKETS_REFUSED = (
    "sockets are not available in Warden's sandbox: HTTP(S) through urllib, http.client, "
    "requests or httpx is carried out by the host for the hosts a tool is granted "
    "(warden run --allow-host HOST, or the tool's `hosts` grant)"
)

_NOT_AVAILABLE = (
    "outbound HTTP is not available here: no Warden host is bound to carry the request "
    "(requests can be made while a call runs, not while the tool's module is imported "
    "for its warm state)"
)

# Failure kinds raised as PermissionError: the tool lacks a grant, has used up a limit,
# or no host is bound to the door.
_REFUSALS = ("refused", "limit", "unavailable")

# Response headers that only describe one connection: the raw response given to
# http.client frames its body with a Content-Length of its own.
_CONNECTION_HEADERS = ("transfer-encoding", "connection", "keep-alive")


def install():
    """Routes the guest's HTTP libraries through the door. Idempotent; no I/O."""
    import binascii
    import io
    import json
    import sys

    if not _door:
        try:
            import _host

            call = _host.call
        except (ImportError, AttributeError):
            call = None  # a runtime without the door: every request is refused
        _door.update(
            call=call,
            dumps=json.dumps,
            loads=json.loads,
            b64encode=binascii.b2a_base64,
            b64decode=binascii.a2b_base64,
            BytesIO=io.BytesIO,
        )

    if not any(getattr(f, "_warden_outbound", False) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())

    # Modules imported before install(): patch them now, in dependency order.
    for name in _PATCH_ORDER:
        module = sys.modules.get(name)
        if module is not None:
            _apply(name, module)


# ---------------------------------------------------------------------------------------
# The door


class _Failure(Exception):
    """An answer of {"ok": false}, or no answer: its kind and the host's message."""

    def __init__(self, kind, message):
        Exception.__init__(self, message)
        self.kind = kind
        self.message = message


def _exchange(method, url, headers, body, timeout):
    """Sends one request through the door; returns (status, reason, headers, body) or
    raises _Failure."""
    door = _door
    call = door.get("call")
    if call is None:
        raise _Failure("unavailable", _NOT_AVAILABLE)
    frame = door["dumps"](
        {
            "op": "http",
            "method": method,
            "url": url,
            "headers": [[name, value] for name, value in headers],
            "body": door["b64encode"](body, newline=False).decode("ascii"),
            "timeout": timeout,
        }
    ).encode("utf-8", "surrogatepass")
    try:
        answer = call(frame)
    except ConnectionRefusedError:
        raise _Failure("unavailable", _NOT_AVAILABLE) from None
    except OSError as e:
        message = f"Warden's host failed to carry the request to {url}: {e}"
        raise _Failure("network", message) from None
    try:
        answer = door["loads"](answer)
        if answer.get("ok") is True:
            return (
                int(answer["status"]),
                str(answer.get("reason") or ""),
                [(str(name), str(value)) for name, value in answer.get("headers") or ()],
                door["b64decode"](answer.get("body") or ""),
            )
        error = answer["error"]
        kind, message = str(error["kind"]), str(error["message"])
    except Exception:
        raise _Failure("network", f"Warden's host sent an unreadable answer for {url}") from None
    raise _Failure(kind, message)


def _seconds(value):
    """A timeout as a number of seconds, or None for none (or a library's sentinel)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    if value != value or value in (float("inf"), float("-inf")):
        return None
    return value


def _pair(connect, read):
    """A connect and a read timeout as one bound for the whole request: their sum."""
    connect, read = _seconds(connect), _seconds(read)
    if connect is None or read is None:
        return None
    return connect + read


def _text(value):
    """A header name or value as text: bytes are read as Latin-1, one character a byte."""
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("latin-1")
    return str(value)


def _origin_url(url):
    """An absolute URL without its user info and fragment: what goes on the wire."""
    url = url.split("#", 1)[0]
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    end = len(rest)
    for mark in "/?":
        at = rest.find(mark)
        if 0 <= at < end:
            end = at
    netloc = rest[:end].rpartition("@")[2]
    tail = rest[end:]
    if not tail.startswith("/"):
        tail = "/" + tail
    return scheme.lower() + "://" + netloc + tail


def _raw_response(status, reason, headers, body, method):
    """The answer as the bytes of an HTTP/1.1 response, framed by Content-Length."""
    head_only = method == "HEAD"

    def clean(text):
        return text.replace("\r", " ").replace("\n", " ")

    lines = [f"HTTP/1.1 {status:03d} {clean(reason)}"]
    for name, value in headers:
        lower = name.lower()
        if lower in _CONNECTION_HEADERS or (lower == "content-length" and not head_only):
            continue
        lines.append(clean(name) + ": " + clean(value))
    if head_only:
        body = b""
    else:
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode("utf-8", "replace") + body


def _stdlib_error(failure):
    kind = failure.kind
    if kind in _REFUSALS:
        return PermissionError(failure.message)
    if kind == "timeout":
        return TimeoutError(failure.message)
    if kind == "invalid":
        return ValueError(failure.message)
    return ConnectionError(failure.message)


# ---------------------------------------------------------------------------------------
# socket


def _refuse_socket(*args, **kwargs):
    raise PermissionError(_SOCKETS_REFUSED)


def _patch_socket(socket):
    if socket.__dict__.get("create_connection") is _refuse_socket:
        return
    socket.getaddrinfo = _refuse_socket
    socket.create_connection = _refuse_socket
    socket.socket.connect = _refuse_socket
    socket.socket.connect_ex = _refuse_socket
    # WASI cannot even make a socket (ENOTSUP): say why in the same words.
    make = socket.socket.__init__

    def __init__(self, *args, **kwargs):
        try:
            make(self, *args, **kwargs)
        except OSError:
            raise PermissionError(_SOCKETS_REFUSED) from None

    socket.socket.__init__ = __init__


# ---------------------------------------------------------------------------------------
# The finder


def _library(module, patch):
    """The patch named `patch` of the guest module `module` (runtime/http_client.py,
    `_warden_http_client`, or runtime/http_libraries.py, `_warden_http_libraries`:
    loaded after this module, they build on the door above)."""

    def apply(library):
        getattr(__import__(module), patch)(library)

    return apply


_PATCHES = {
    "socket": _patch_socket,
    "http.client": _library("_warden_http_client", "_patch_http_client"),
    "urllib.request": _library("_warden_http_client", "_patch_urllib_request"),
    "requests.adapters": _library("_warden_http_libraries", "_patch_requests"),
    "httpx._transports.default": _library("_warden_http_libraries", "_patch_httpx"),
}
_PATCH_ORDER = ("socket", "http.client", "urllib.request", "requests.adapters",
                "httpx._transports.default")


def _apply(name, module):
    """Patches `module`; a library whose shape has changed is left as it is, with a
    warning (its requests then fail at the socket, with the socket's message)."""
    try:
        _PATCHES[name](module)
    except Exception as e:
        import warnings

        warnings.warn(
            f"Warden could not route {name} through its host ({type(e).__name__}: {e})",
            RuntimeWarning,
            stacklevel=2,
        )


class _PatchingLoader:
    """Wraps the loader another finder found, to patch the module right after it runs.
    Everything else is the wrapped loader's."""

    def __init__(self, loader, name):
        self._loader = loader
        self._name = name

    def create_module(self, spec):
        create = getattr(self._loader, "create_module", None)
        return create(spec) if create is not None else None

    def exec_module(self, module):
        self._loader.exec_module(module)
        _apply(self._name, module)

    def __getattr__(self, name):
        if name == "_loader":  # not set yet (a copy being made): no recursion
            raise AttributeError(name)
        return getattr(self._loader, name)


class _Finder:
    """First on sys.meta_path: for the modules in _PATCHES, asks the finders after it
    and wraps the loader they find; for `ssl`, offers the stand-in when `_ssl` is
    missing. Every other name is left to the other finders."""

    _warden_outbound = True

    def __init__(self):
        self._busy = set()
        self._has_ssl = None

    def find_spec(self, name, path=None, target=None):
        if name == "ssl":
            return self._ssl_spec()
        if name not in _PATCHES or name in self._busy:
            return None
        import sys

        self._busy.add(name)
        try:
            for finder in list(sys.meta_path):
                if getattr(finder, "_warden_outbound", False):
                    continue
                find = getattr(finder, "find_spec", None)
                if find is None:
                    continue
                spec = find(name, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            self._busy.discard(name)
        if spec.loader is None or not hasattr(spec.loader, "exec_module"):
            return spec
        spec.loader = _PatchingLoader(spec.loader, name)
        return spec

    def _ssl_spec(self):
        if self._has_ssl is None:
            try:
                import _ssl  # noqa: F401
            except ImportError:
                self._has_ssl = False
            else:
                self._has_ssl = True
        if self._has_ssl:
            return None
        from importlib.machinery import ModuleSpec

        import _warden_ssl

        return ModuleSpec("ssl", _warden_ssl.Loader(), origin="warden stand-in")

    def invalidate_caches(self):
        pass
