"""Outbound HTTP for tools, the standard library's half: `http.client` (and
`urllib.request`, built on it) send through the runtime's door (runtime/outbound.py,
`_warden_outbound`, whose finder applies these patches right after the module is first
imported).

A connection's socket is replaced by `_Wire`, which collects the bytes http.client
itself writes (request line, headers, body, chunked or not), takes each whole request
apart (`_parse_head`, `_take_request`, `_dechunk`: pure, tested against fixture files in
tests/guest/), sends it as one frame, and hands http.client the answer as a raw HTTP/1.1
response. So `http.client` and everything built on it works unchanged, including
keep-alive connections. `HTTPSConnection` exists even though `_ssl` does not.
"""

from _warden_outbound import (
    _door,
    _exchange,
    _Failure,
    _raw_response,
    _seconds,
    _stdlib_error,
)

# ---------------------------------------------------------------------------------------
# Taking apart what http.client writes


def _parse_head(buffer):
    """The head of the request at the front of `buffer` (a bytearray of what http.client
    sent): (where its body starts, method, target, headers, chunked, Content-Length), or
    None while the head has not ended."""
    head_end = buffer.find(b"\r\n\r\n")
    if head_end < 0:
        return None
    return _read_head(buffer, head_end)


def _read_head(buffer, head_end):
    lines = bytes(buffer[:head_end]).decode("latin-1").split("\r\n")
    method, _, rest = lines[0].partition(" ")
    target = rest.rsplit(" ", 1)[0] if " HTTP/" in rest else rest
    headers = []
    for line in lines[1:]:
        if line[:1] in (" ", "\t") and headers:
            # A value http.client continued on the next line (putheader with several).
            name, value = headers[-1]
            headers[-1] = (name, value + " " + line.strip())
            continue
        name, _, value = line.partition(":")
        headers.append((name.strip(), value.strip()))
    chunked = False
    length = None
    for name, value in headers:
        lower = name.lower()
        if lower == "transfer-encoding":
            chunked = value.lower().rstrip().endswith("chunked")
        elif lower == "content-length":
            try:
                length = int(value)
            except ValueError:
                length = None
    # The body is sent as a whole, so the framing headers go (the host sets its own).
    headers = [
        (name, value)
        for name, value in headers
        if name.lower() not in ("transfer-encoding", "content-length")
    ]
    return min(head_end + 4, len(buffer)), method, target, headers, chunked, length


def _take_request(buffer, head, complete):
    """Splits the request whose head is `head` off the front of `buffer`: returns
    (method, target, headers, body) and removes its bytes, or returns None while its body
    has not all arrived. With complete=False, whatever is there is taken as the request
    (its framing never showed an end), head or not."""
    if head is None:
        if complete or not buffer:
            return None
        head = _parse_head(buffer) or _read_head(buffer, len(buffer))
    start, method, target, headers, chunked, length = head
    taken = None
    if chunked:
        # A chunked body ends with an empty line: only then is it worth reading.
        if buffer.endswith(b"\r\n\r\n") or not complete:
            taken = _dechunk(buffer, start)
        if taken is None and not complete:
            taken = bytes(buffer[start:]), len(buffer)
    elif length is not None:
        if start + length <= len(buffer) or not complete:
            end = min(start + length, len(buffer))
            taken = bytes(buffer[start:end]), end
    elif complete:
        taken = b"", start  # HTTP/1.1: neither a length nor chunked is no body
    else:
        taken = bytes(buffer[start:]), len(buffer)
    if taken is None:
        return None
    body, end = taken
    del buffer[:end]
    return method, target, headers, body


def _dechunk(buffer, at):
    """The body of a chunked request starting at `at`, and where it ends; None while
    the last chunk and the trailer's end have not arrived."""
    parts = []
    size_of = len(buffer)
    while True:
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        try:
            size = int(bytes(buffer[at:line_end]).split(b";", 1)[0].strip(), 16)
        except ValueError:
            return None
        at = line_end + 2
        if size == 0:
            break
        if at + size + 2 > size_of:
            return None
        parts.append(bytes(buffer[at : at + size]))
        at += size + 2
    while True:  # the trailer, up to an empty line
        line_end = buffer.find(b"\r\n", at)
        if line_end < 0:
            return None
        empty = line_end == at
        at = line_end + 2
        if empty:
            return b"".join(parts), at


class _Wire:
    """What an http.client connection takes for its socket.

    `sendall` collects the bytes http.client writes; as soon as they hold a whole
    request (by its Content-Length or chunked framing) it goes through the door.
    `makefile`, which HTTPResponse calls inside getresponse(), returns the answer as
    the bytes of an HTTP/1.1 response. A refusal or a timeout is raised when the
    response is first read, still in getresponse(), so that urllib passes it on as it
    is; a network failure or an invalid request is raised from sendall, in request(),
    so that urllib wraps it in URLError as it does a failed connect. A failure closes
    the connection, which reopens on its next request. Several requests may follow
    one another on one connection, as on a kept-alive socket."""

    def __init__(self, conn, timeout):
        self._conn = conn
        self._timeout = timeout
        self._out = bytearray()
        self._head = None  # the parsed head of the request being collected
        self._answers = []  # raw responses or _Failures, in the order of the requests
        self.family, self.type, self.proto = 2, 1, 6  # AF_INET, SOCK_STREAM, TCP

    def sendall(self, data, flags=0):
        if self._conn is None:
            raise OSError(9, "Bad file descriptor")
        self._out += data
        while True:
            if self._head is None:
                self._head = _parse_head(self._out)
                if self._head is None:
                    return None
            request = _take_request(self._out, self._head, True)
            if request is None:
                return None
            self._head = None
            outcome = self._carry(request)
            if isinstance(outcome, _Failure) and outcome.kind in ("network", "invalid"):
                self._abort()
                raise _stdlib_error(outcome)
            self._answers.append(outcome)

    def send(self, data, flags=0):
        self.sendall(data)
        return memoryview(data).nbytes

    def makefile(self, mode="rb", *args, **kwargs):
        if not self._answers and self._out and self._conn is not None:
            request = _take_request(self._out, self._head, False)
            self._head = None
            self._answers.append(self._carry(request))
        if not self._answers:
            return _door["BytesIO"](b"")  # http.client: RemoteDisconnected
        outcome = self._answers.pop(0)
        if isinstance(outcome, _Failure):
            return _FailedRead(self, outcome)
        return _door["BytesIO"](outcome)

    def _carry(self, request):
        method, target, headers, body = request
        try:
            status, reason, answer_headers, answer_body = _exchange(
                method, self._url(target), headers, body, _seconds(self._timeout)
            )
        except _Failure as failure:
            return failure
        return _raw_response(status, reason, answer_headers, answer_body, method)

    def _url(self, target):
        if target[:7].lower() == "http://" or target[:8].lower() == "https://":
            return target  # absolute form, as sent to a proxy: the host goes direct
        conn = self._conn
        # Through a tunnel (an HTTPS proxy), the host goes direct to the tunnel's end.
        host = conn._tunnel_host or conn.host
        port = conn._tunnel_port if conn._tunnel_host else conn.port
        scheme = getattr(conn, "_warden_scheme", "http")
        if ":" in host and not host.startswith("["):
            host = "[" + host + "]"
        if port is not None and port != (443 if scheme == "https" else 80):
            host = f"{host}:{port}"
        if not target.startswith("/"):
            target = "/" + target.lstrip("*")
        return scheme + "://" + host + target

    def _abort(self):
        conn, self._conn = self._conn, None
        self._out.clear()
        self._head = None
        self._answers.clear()
        if conn is not None and conn.sock is self:
            conn.close()

    def close(self):
        self._conn = None
        self._out.clear()
        self._head = None
        self._answers.clear()

    def shutdown(self, how):
        pass

    def settimeout(self, timeout):
        self._timeout = timeout

    def gettimeout(self):
        return self._timeout

    def setblocking(self, flag):
        self._timeout = None if flag else 0.0

    def setsockopt(self, *args):
        pass

    def getsockopt(self, *args):
        return 0

    def fileno(self):
        return -1

    def getpeername(self):
        conn = self._conn
        return (conn.host, conn.port) if conn is not None else ("", 0)

    def getsockname(self):
        return ("0.0.0.0", 0)


class _FailedRead:
    """The response file of a request that failed: its first read raises the failure.
    Raised there, in HTTPResponse.begin() rather than in its constructor, the error
    leaves a response that closes cleanly (a half-made one would complain when it is
    collected)."""

    closed = False

    def __init__(self, wire, failure):
        self._wire = wire
        self._failure = failure

    def _raise(self, *args, **kwargs):
        failure, self._failure = self._failure, None
        if failure is None:
            return b""
        self._wire._abort()
        raise _stdlib_error(failure)

    readline = read = read1 = peek = _raise

    def readinto(self, buffer):
        self._raise()
        return 0

    def flush(self):
        pass

    def close(self):
        self.closed = True


def _connect(self):
    """HTTPConnection.connect: no socket, a _Wire to the door. A tunnel (HTTPS proxy) is
    not opened: the host sends the request to the tunnel's end itself."""
    import socket
    import sys

    sys.audit("http.client.connect", self, self.host, self.port)
    timeout = self.timeout
    if timeout is socket._GLOBAL_DEFAULT_TIMEOUT:
        timeout = socket.getdefaulttimeout()
    self.sock = _Wire(self, timeout)


def _patch_http_client(client):
    HTTPConnection = client.HTTPConnection
    if HTTPConnection.__dict__.get("connect") is _connect:
        return
    HTTPConnection.connect = _connect
    HTTPConnection._warden_scheme = "http"
    https = client.__dict__.get("HTTPSConnection")
    if https is None:
        # http.client was imported while `ssl` could not be: define HTTPSConnection, and
        # give http.client the ssl module its _create_https_context (used by
        # urllib.request's HTTPSHandler) looks up.
        if "ssl" not in client.__dict__:
            import importlib

            client.ssl = importlib.import_module("ssl")

        class HTTPSConnection(HTTPConnection):
            """An HTTPS connection; TLS is done, and verified, by Warden's host."""

            default_port = client.HTTPS_PORT

            def __init__(self, host, port=None, *, context=None, check_hostname=None,
                         key_file=None, cert_file=None, **kwargs):
                super().__init__(host, port, **kwargs)
                self._context = context
                self.key_file = key_file
                self.cert_file = cert_file

        HTTPSConnection.__module__ = client.__name__
        client.HTTPSConnection = https = HTTPSConnection
        names = client.__dict__.get("__all__")
        if isinstance(names, list) and "HTTPSConnection" not in names:
            names.append("HTTPSConnection")
    else:
        https.connect = _connect  # not HTTPSConnection's own, which wraps a socket in TLS
    https._warden_scheme = "https"


def _patch_urllib_request(request):
    if "HTTPSHandler" in request.__dict__:
        return
    client = request.http.client
    if not hasattr(client, "HTTPSConnection"):
        return
    # urllib.request was imported before http.client had HTTPSConnection: give it the
    # handler it would have defined, and drop the opener urlopen() may have built.
    AbstractHTTPHandler = request.AbstractHTTPHandler

    class HTTPSHandler(AbstractHTTPHandler):
        def __init__(self, debuglevel=None, context=None, check_hostname=None):
            if debuglevel is None:
                debuglevel = client.HTTPSConnection.debuglevel
            AbstractHTTPHandler.__init__(self, debuglevel)
            self._context = context
            self._check_hostname = check_hostname

        def https_open(self, req):
            return self.do_open(client.HTTPSConnection, req, context=self._context)

        https_request = AbstractHTTPHandler.do_request_

    HTTPSHandler.__module__ = request.__name__
    request.HTTPSHandler = HTTPSHandler
    names = request.__dict__.get("__all__")
    if isinstance(names, list) and "HTTPSHandler" not in names:
        names.append("HTTPSHandler")
    request._opener = None
