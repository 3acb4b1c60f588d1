"""Outbound HTTP for tools, the requests and httpx halves: each library's transport
sends through the runtime's door (runtime/outbound.py, `_warden_outbound`, whose finder
applies these patches right after the library is first imported) and answers with the
library's own response and error types.

- `requests.adapters`: `HTTPAdapter.send` goes through the door and builds a real
  `requests.Response` (cookies, encodings, `.json()`, gzip, redirects as usual);
- `httpx._transports.default`: `HTTPTransport` and `AsyncHTTPTransport` go through the
  door without building a connection pool or an SSL context.

A refusal is a PermissionError that is also an instance of the library's connection
error, so either `except` catches it; timeouts and network failures are the library's
own (see outbound.py's docstring for the whole mapping).
"""

from _warden_outbound import (
    _REFUSALS,
    _SOCKETS_REFUSED,
    _door,
    _exchange,
    _Failure,
    _origin_url,
    _pair,
    _raw_response,
    _seconds,
    _text,
)

# ---------------------------------------------------------------------------------------
# requests


def _as_refusal(cls):
    """Names a class that is both PermissionError and a library's error after the
    former: that is what the tool's error report and traceback then show."""
    cls.__name__ = cls.__qualname__ = "PermissionError"
    cls.__module__ = "builtins"
    return cls


def _request_body(body):
    """A requests body (bytes, text, a file or an iterable of either) as bytes."""
    if body is None:
        return b""
    if isinstance(body, str):
        return body.encode("utf-8")
    if isinstance(body, (bytes, bytearray, memoryview)):
        return bytes(body)
    read = getattr(body, "read", None)
    if read is not None:
        data = read()
        return data.encode("utf-8") if isinstance(data, str) else bytes(data or b"")
    return b"".join(c.encode("utf-8") if isinstance(c, str) else bytes(c) for c in body)


def _requests_timeout(timeout):
    if isinstance(timeout, tuple):
        try:
            connect, read = timeout
        except ValueError:
            raise ValueError(
                f"Invalid timeout {timeout}. Pass a (connect, read) timeout tuple, "
                "or a single float to set both timeouts to the same value."
            ) from None
        return _pair(connect, read)
    if hasattr(timeout, "connect_timeout"):  # urllib3's Timeout
        total = _seconds(getattr(timeout, "total", None))
        if total is not None:
            return total
        return _pair(timeout.connect_timeout, timeout.read_timeout)
    return _seconds(timeout)


def _patch_requests(adapters):
    HTTPAdapter = adapters.HTTPAdapter
    if getattr(HTTPAdapter.send, "_warden", False):
        return
    import http.client
    import importlib

    from urllib3.response import HTTPResponse

    try:
        from urllib3 import HTTPHeaderDict
    except ImportError:
        from urllib3._collections import HTTPHeaderDict
    exceptions = importlib.import_module(adapters.__name__.rpartition(".")[0] + ".exceptions")

    @_as_refusal
    class Refused(PermissionError, exceptions.ConnectionError):
        def __init__(self, message, request=None):
            PermissionError.__init__(self, message)
            self.request = request
            self.response = None

    def error(failure, request):
        kind = failure.kind
        if kind in _REFUSALS:
            return Refused(failure.message, request=request)
        if kind == "timeout":
            return exceptions.ReadTimeout(failure.message, request=request)
        if kind == "invalid":
            return exceptions.InvalidURL(failure.message, request=request)
        return exceptions.ConnectionError(failure.message, request=request)

    class Replay:
        """The socket HTTPResponse reads the raw response from."""

        def __init__(self, data):
            self.data = data

        def makefile(self, *args, **kwargs):
            return _door["BytesIO"](self.data)

    def send(self, request, stream=False, timeout=None, verify=True, cert=None, proxies=None):
        """Sends the request through Warden's door: the host carries it, with TLS
        verified by the host (`verify` and `cert` do not apply; no proxy is used) and
        one bound on the whole request (see _requests_timeout). The response is built as
        HTTPAdapter builds one from a socket, so it decodes, streams, keeps cookies and
        follows redirects (through Session) as usual; urllib3 retries are not made."""
        url = _origin_url(request.url)
        method = _text(request.method or "GET")
        headers = [(_text(k), _text(v)) for k, v in request.headers.items()]
        try:
            status, reason, answer_headers, body = _exchange(
                method, url, headers, _request_body(request.body), _requests_timeout(timeout)
            )
        except _Failure as failure:
            raise error(failure, request) from None
        raw = http.client.HTTPResponse(
            Replay(_raw_response(status, reason, answer_headers, body, method)), method=method
        )
        raw.begin()
        response_headers = HTTPHeaderDict()
        for name, value in raw.getheaders():
            response_headers.add(name, value)
        response = HTTPResponse(
            body=raw,
            headers=response_headers,
            status=raw.status,
            version=raw.version,
            reason=raw.reason,
            preload_content=False,
            decode_content=False,
            original_response=raw,
            enforce_content_length=True,
            request_method=method,
            request_url=url,
        )
        return self.build_response(request, response)

    send._warden = True
    HTTPAdapter.send = send


# ---------------------------------------------------------------------------------------
# httpx


def _patch_httpx(default):
    HTTPTransport = default.HTTPTransport
    AsyncHTTPTransport = default.AsyncHTTPTransport
    if getattr(HTTPTransport.handle_request, "_warden", False):
        return
    import importlib

    package = default.__name__.split(".", 1)[0]
    exceptions = importlib.import_module(package + "._exceptions")
    ByteStream = importlib.import_module(package + "._content").ByteStream
    Response = default.Response

    @_as_refusal
    class Refused(PermissionError, exceptions.ConnectError):
        def __init__(self, message, *, request=None):
            PermissionError.__init__(self, message)
            self._request = request

    class InvalidRequest(ValueError, exceptions.LocalProtocolError):
        def __init__(self, message, *, request=None):
            ValueError.__init__(self, message)
            self._request = request

    InvalidRequest.__name__ = InvalidRequest.__qualname__ = "LocalProtocolError"
    InvalidRequest.__module__ = package

    def carry(transport, request, body):
        if getattr(transport, "_warden_uds", None):
            raise PermissionError(_SOCKETS_REFUSED)
        url = request.url
        host = url.raw_host.decode("ascii")
        if ":" in host:
            host = "[" + host + "]"
        if url.port is not None:
            host = f"{host}:{url.port}"
        target = url.raw_path.decode("ascii")
        full = url.scheme + "://" + host + (target if target.startswith("/") else "/" + target)
        timeout = request.extensions.get("timeout") or {}
        try:
            status, reason, headers, content = _exchange(
                request.method,
                full,
                [(_text(k), _text(v)) for k, v in request.headers.raw],
                body,
                _pair(timeout.get("connect"), timeout.get("read")),
            )
        except _Failure as failure:
            kind = failure.kind
            if kind in _REFUSALS:
                raise Refused(failure.message, request=request) from None
            if kind == "timeout":
                raise exceptions.ReadTimeout(failure.message, request=request) from None
            if kind == "invalid":
                raise InvalidRequest(failure.message, request=request) from None
            raise exceptions.ConnectError(failure.message, request=request) from None
        return Response(
            status,
            headers=headers,
            stream=ByteStream(content),
            extensions={
                "http_version": b"HTTP/1.1",
                "reason_phrase": reason.encode("ascii", "replace"),
            },
        )

    def __init__(self, *args, **kwargs):
        """No connection pool and no SSL context: Warden's host carries each request
        (TLS verified by the host; `verify`, `cert`, `proxy`, `http2` and `retries` do
        not apply)."""
        self._warden_uds = kwargs.get("uds")

    def handle_request(self, request):
        return carry(self, request, request.read())

    async def handle_async_request(self, request):
        return carry(self, request, await request.aread())

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        return None

    def close(self):
        return None

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc_info):
        return None

    async def aclose(self):
        return None

    handle_request._warden = True
    HTTPTransport.__init__ = __init__
    HTTPTransport.handle_request = handle_request
    HTTPTransport.__enter__ = __enter__
    HTTPTransport.__exit__ = __exit__
    HTTPTransport.close = close
    AsyncHTTPTransport.__init__ = __init__
    AsyncHTTPTransport.handle_async_request = handle_async_request
    AsyncHTTPTransport.__aenter__ = __aenter__
    AsyncHTTPTransport.__aexit__ = __aexit__
    AsyncHTTPTransport.aclose = aclose
