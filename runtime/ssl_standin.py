"""A stand-in for the `ssl` module, for a guest that has no `_ssl`.

Loaded as `_warden_ssl` while Warden builds its snapshot; `_warden_outbound`'s finder
offers `ssl` from `Loader` when `import _ssl` fails. It has the names libraries use at
import and construction (contexts, constants, exceptions, enums); TLS is done, and the
server's certificate verified, by Warden's host, so nothing here can open a TLS
connection itself: wrapping a socket raises, naming the way that works (the libraries'
HTTPS, which goes through the host).
"""

_TLS_REFUSED = (
    "TLS connections cannot be opened in Warden's sandbox: HTTPS through urllib, "
    "http.client, requests or httpx is carried out, and the server's certificate "
    "verified, by the host for the hosts a tool is granted (warden run --allow-host HOST, "
    "or the tool's `hosts` grant)"
)


def fill(ns):
    """Defines the stand-in `ssl` module's names in `ns`."""
    import binascii
    import os
    from collections import namedtuple
    from enum import Enum, IntEnum, IntFlag

    class _SSLMethod(IntEnum):
        PROTOCOL_TLS = 2
        PROTOCOL_TLSv1 = 3
        PROTOCOL_TLSv1_1 = 4
        PROTOCOL_TLSv1_2 = 5
        PROTOCOL_TLS_CLIENT = 16
        PROTOCOL_TLS_SERVER = 17

    class Options(IntFlag):
        OP_ALL = 0x80000050
        OP_NO_SSLv2 = 0
        OP_IGNORE_UNEXPECTED_EOF = 0x80
        OP_NO_TICKET = 0x4000
        OP_NO_COMPRESSION = 0x20000
        OP_SINGLE_DH_USE = 0
        OP_SINGLE_ECDH_USE = 0
        OP_ENABLE_MIDDLEBOX_COMPAT = 0x100000
        OP_CIPHER_SERVER_PREFERENCE = 0x400000
        OP_NO_SSLv3 = 0x2000000
        OP_NO_TLSv1 = 0x4000000
        OP_NO_TLSv1_2 = 0x8000000
        OP_NO_TLSv1_1 = 0x10000000
        OP_NO_TLSv1_3 = 0x20000000
        OP_NO_RENEGOTIATION = 0x40000000
        OP_ENABLE_KTLS = 0x8
        OP_LEGACY_SERVER_CONNECT = 0x4

    class VerifyFlags(IntFlag):
        VERIFY_DEFAULT = 0
        VERIFY_CRL_CHECK_LEAF = 0x4
        VERIFY_CRL_CHECK_CHAIN = 0xC
        VERIFY_X509_STRICT = 0x20
        VERIFY_ALLOW_PROXY_CERTS = 0x40
        VERIFY_X509_TRUSTED_FIRST = 0x8000
        VERIFY_X509_PARTIAL_CHAIN = 0x80000

    class VerifyMode(IntEnum):
        CERT_NONE = 0
        CERT_OPTIONAL = 1
        CERT_REQUIRED = 2

    class TLSVersion(IntEnum):
        MINIMUM_SUPPORTED = -2
        SSLv3 = 0x300
        TLSv1 = 0x301
        TLSv1_1 = 0x302
        TLSv1_2 = 0x303
        TLSv1_3 = 0x304
        MAXIMUM_SUPPORTED = -1

    class SSLErrorNumber(IntEnum):
        SSL_ERROR_SSL = 1
        SSL_ERROR_WANT_READ = 2
        SSL_ERROR_WANT_WRITE = 3
        SSL_ERROR_WANT_X509_LOOKUP = 4
        SSL_ERROR_SYSCALL = 5
        SSL_ERROR_ZERO_RETURN = 6
        SSL_ERROR_WANT_CONNECT = 7
        SSL_ERROR_EOF = 8
        SSL_ERROR_INVALID_ERROR_CODE = 10

    AlertDescription = IntEnum(
        "AlertDescription",
        [
            ("ALERT_DESCRIPTION_" + name, value)
            for name, value in (
                ("CLOSE_NOTIFY", 0), ("UNEXPECTED_MESSAGE", 10), ("BAD_RECORD_MAC", 20),
                ("RECORD_OVERFLOW", 22), ("DECOMPRESSION_FAILURE", 30),
                ("HANDSHAKE_FAILURE", 40), ("BAD_CERTIFICATE", 42),
                ("UNSUPPORTED_CERTIFICATE", 43), ("CERTIFICATE_REVOKED", 44),
                ("CERTIFICATE_EXPIRED", 45), ("CERTIFICATE_UNKNOWN", 46),
                ("ILLEGAL_PARAMETER", 47), ("UNKNOWN_CA", 48), ("ACCESS_DENIED", 49),
                ("DECODE_ERROR", 50), ("DECRYPT_ERROR", 51), ("PROTOCOL_VERSION", 70),
                ("INSUFFICIENT_SECURITY", 71), ("INTERNAL_ERROR", 80),
                ("USER_CANCELLED", 90), ("NO_RENEGOTIATION", 100),
                ("UNSUPPORTED_EXTENSION", 110), ("CERTIFICATE_UNOBTAINABLE", 111),
                ("UNRECOGNIZED_NAME", 112), ("BAD_CERTIFICATE_STATUS_RESPONSE", 113),
                ("BAD_CERTIFICATE_HASH_VALUE", 114), ("UNKNOWN_PSK_IDENTITY", 115),
            )
        ],
        module="ssl",
    )

    _ASN1Object = namedtuple("_ASN1Object", "nid shortname longname oid")

    class Purpose(_ASN1Object, Enum):
        SERVER_AUTH = (129, "serverAuth", "TLS Web Server Authentication", "1.3.6.1.5.5.7.3.1")
        CLIENT_AUTH = (130, "clientAuth", "TLS Web Client Authentication", "1.3.6.1.5.5.7.3.2")

    for enum_class in (_SSLMethod, Options, VerifyFlags, VerifyMode, TLSVersion,
                       SSLErrorNumber, Purpose):
        enum_class.__module__ = "ssl"
    for enum_class in (_SSLMethod, Options, VerifyFlags, VerifyMode, SSLErrorNumber,
                       AlertDescription):
        ns.update(enum_class.__members__)

    class SSLError(OSError):
        """An error of the TLS layer (none arise here: the host does TLS)."""

        library = None
        reason = None

    class SSLZeroReturnError(SSLError):
        pass

    class SSLWantReadError(SSLError):
        pass

    class SSLWantWriteError(SSLError):
        pass

    class SSLSyscallError(SSLError):
        pass

    class SSLEOFError(SSLError):
        pass

    class SSLCertVerificationError(SSLError, ValueError):
        verify_code = None
        verify_message = None

    for error in (SSLError, SSLZeroReturnError, SSLWantReadError, SSLWantWriteError,
                  SSLSyscallError, SSLEOFError, SSLCertVerificationError):
        error.__module__ = "ssl"

    def refuse_tls(*args, **kwargs):
        raise PermissionError(_TLS_REFUSED)

    class SSLContext:
        """A TLS configuration that libraries build and pass around. Warden's host does
        the TLS of every request and verifies the server's certificate against its own
        trust store whatever this says; a context cannot open a connection itself."""

        sslsocket_class = None
        sslobject_class = None

        def __init__(self, protocol=None, *args, **kwargs):
            if protocol is None:
                protocol = _SSLMethod.PROTOCOL_TLS
            self.protocol = _SSLMethod(protocol)
            client = self.protocol == _SSLMethod.PROTOCOL_TLS_CLIENT
            self._check_hostname = client
            self._verify_mode = VerifyMode.CERT_REQUIRED if client else VerifyMode.CERT_NONE
            self._options = Options(0x82520050)
            self._verify_flags = VerifyFlags.VERIFY_X509_TRUSTED_FIRST
            self._minimum_version = TLSVersion.MINIMUM_SUPPORTED
            self._maximum_version = TLSVersion.MAXIMUM_SUPPORTED
            self.post_handshake_auth = None
            self.hostname_checks_common_name = True
            self.keylog_filename = None
            self.sni_callback = None
            self.security_level = 2
            self.num_tickets = 2
            self._alpn_protocols = []
            self._ciphers = None
            self._ca_files = []

        @property
        def check_hostname(self):
            return self._check_hostname

        @check_hostname.setter
        def check_hostname(self, value):
            value = bool(value)
            if value and self._verify_mode == VerifyMode.CERT_NONE:
                self._verify_mode = VerifyMode.CERT_REQUIRED
            self._check_hostname = value

        @property
        def verify_mode(self):
            return self._verify_mode

        @verify_mode.setter
        def verify_mode(self, value):
            value = VerifyMode(value)
            if value == VerifyMode.CERT_NONE and self._check_hostname:
                raise ValueError(
                    "Cannot set verify_mode to CERT_NONE when check_hostname is enabled."
                )
            self._verify_mode = value

        @property
        def options(self):
            return self._options

        @options.setter
        def options(self, value):
            self._options = Options(value)

        @property
        def verify_flags(self):
            return self._verify_flags

        @verify_flags.setter
        def verify_flags(self, value):
            self._verify_flags = VerifyFlags(value)

        @property
        def minimum_version(self):
            return self._minimum_version

        @minimum_version.setter
        def minimum_version(self, value):
            self._minimum_version = TLSVersion(value)

        @property
        def maximum_version(self):
            return self._maximum_version

        @maximum_version.setter
        def maximum_version(self, value):
            self._maximum_version = TLSVersion(value)

        def load_verify_locations(self, cafile=None, capath=None, cadata=None):
            """Recorded only: the host verifies servers against its own trust store."""
            if cafile is None and capath is None and cadata is None:
                raise TypeError("cafile, capath and cadata cannot be all omitted")
            self._ca_files.append(cafile or capath)

        def load_default_certs(self, purpose=Purpose.SERVER_AUTH):
            pass

        def set_default_verify_paths(self):
            pass

        def load_cert_chain(self, certfile, keyfile=None, password=None):
            raise NotImplementedError(
                "client certificates are not supported: TLS is done by Warden's host, "
                "which presents none"
            )

        def load_dh_params(self, path):
            pass

        def set_ciphers(self, ciphers):
            self._ciphers = ciphers

        def get_ciphers(self):
            return []

        def set_alpn_protocols(self, protocols):
            self._alpn_protocols = list(protocols)

        def set_npn_protocols(self, protocols):
            pass

        def set_servername_callback(self, callback):
            self.sni_callback = callback

        def set_ecdh_curve(self, name):
            pass

        def cert_store_stats(self):
            return {"x509": 0, "crl": 0, "x509_ca": 0}

        def get_ca_certs(self, binary_form=False):
            return []

        def session_stats(self):
            return {}

        wrap_socket = refuse_tls
        wrap_bio = refuse_tls

    class SSLSocket:
        """Never made here: see SSLContext."""

        def __init__(self, *args, **kwargs):
            raise TypeError(
                f"{self.__class__.__name__} does not have a public constructor. "
                "Instances are returned by SSLContext.wrap_socket()."
            )

    class SSLObject:
        """Never made here: see SSLContext."""

        def __init__(self, *args, **kwargs):
            raise TypeError(
                f"{self.__class__.__name__} does not have a public constructor. "
                "Instances are returned by SSLContext.wrap_bio()."
            )

    class SSLSession:
        pass

    class MemoryBIO:
        """A memory buffer, as ssl.MemoryBIO (nothing here reads it through TLS)."""

        def __init__(self):
            self._data = bytearray()
            self.eof = False

        @property
        def pending(self):
            return len(self._data)

        def read(self, size=-1):
            if size is None or size < 0:
                size = len(self._data)
            data = bytes(self._data[:size])
            del self._data[:size]
            return data

        def write(self, data):
            self._data += data
            return memoryview(data).nbytes

        def write_eof(self):
            self.eof = True

    SSLContext.sslsocket_class = SSLSocket
    SSLContext.sslobject_class = SSLObject
    for cls in (SSLContext, SSLSocket, SSLObject, SSLSession, MemoryBIO):
        cls.__module__ = "ssl"

    def create_default_context(purpose=Purpose.SERVER_AUTH, *, cafile=None, capath=None,
                               cadata=None):
        if purpose == Purpose.SERVER_AUTH:
            context = SSLContext(_SSLMethod.PROTOCOL_TLS_CLIENT)
        else:
            context = SSLContext(_SSLMethod.PROTOCOL_TLS_SERVER)
        if cafile or capath or cadata:
            context.load_verify_locations(cafile, capath, cadata)
        context.verify_flags |= (
            VerifyFlags.VERIFY_X509_PARTIAL_CHAIN | VerifyFlags.VERIFY_X509_STRICT
        )
        return context

    def _create_unverified_context(protocol=None, *, cert_reqs=VerifyMode.CERT_NONE,
                                   check_hostname=False, purpose=Purpose.SERVER_AUTH,
                                   certfile=None, keyfile=None, cafile=None, capath=None,
                                   cadata=None):
        if protocol is None:
            client = purpose == Purpose.SERVER_AUTH
            protocol = _SSLMethod.PROTOCOL_TLS_CLIENT if client else _SSLMethod.PROTOCOL_TLS_SERVER
        context = SSLContext(protocol)
        context.check_hostname = check_hostname
        context.verify_mode = cert_reqs
        if cafile or capath or cadata:
            context.load_verify_locations(cafile, capath, cadata)
        return context

    DefaultVerifyPaths = namedtuple(
        "DefaultVerifyPaths",
        "cafile capath openssl_cafile_env openssl_cafile openssl_capath_env openssl_capath",
    )

    def get_default_verify_paths():
        return DefaultVerifyPaths(None, None, "SSL_CERT_FILE", "", "SSL_CERT_DIR", "")

    def get_server_certificate(addr, ssl_version=None, ca_certs=None, timeout=None):
        raise PermissionError(_TLS_REFUSED)

    PEM_HEADER = "-----BEGIN CERTIFICATE-----"
    PEM_FOOTER = "-----END CERTIFICATE-----"

    def DER_cert_to_PEM_cert(der_cert_bytes):
        text = binascii.b2a_base64(der_cert_bytes, newline=False).decode("ascii")
        lines = [text[i : i + 64] for i in range(0, len(text), 64)]
        return PEM_HEADER + "\n" + "\n".join(lines) + "\n" + PEM_FOOTER + "\n"

    def PEM_cert_to_DER_cert(pem_cert_string):
        if not pem_cert_string.startswith(PEM_HEADER):
            raise ValueError(f"Invalid PEM encoding; must start with {PEM_HEADER}")
        if not pem_cert_string.strip().endswith(PEM_FOOTER):
            raise ValueError(f"Invalid PEM encoding; must end with {PEM_FOOTER}")
        body = pem_cert_string.strip()[len(PEM_HEADER) : -len(PEM_FOOTER)]
        return binascii.a2b_base64(body.encode("ascii"))

    def RAND_bytes(n):
        return os.urandom(n)

    def RAND_status():
        return True

    def RAND_add(string, entropy):
        return None

    ns.update(
        __doc__=(
            "A stand-in for `ssl` in Warden's sandbox, which has no `_ssl`. TLS is done, "
            "and the server's certificate verified, by the Warden host that carries each "
            "HTTP request (see _warden_outbound): this module has the names that HTTP "
            "libraries use to build and pass around TLS settings, and cannot open a TLS "
            "connection itself."
        ),
        _SSLMethod=_SSLMethod,
        Options=Options,
        VerifyFlags=VerifyFlags,
        VerifyMode=VerifyMode,
        TLSVersion=TLSVersion,
        SSLErrorNumber=SSLErrorNumber,
        AlertDescription=AlertDescription,
        _ASN1Object=_ASN1Object,
        Purpose=Purpose,
        PROTOCOL_SSLv23=_SSLMethod.PROTOCOL_TLS,
        SSLError=SSLError,
        SSLZeroReturnError=SSLZeroReturnError,
        SSLWantReadError=SSLWantReadError,
        SSLWantWriteError=SSLWantWriteError,
        SSLSyscallError=SSLSyscallError,
        SSLEOFError=SSLEOFError,
        SSLCertVerificationError=SSLCertVerificationError,
        CertificateError=SSLCertVerificationError,
        socket_error=OSError,
        SSLContext=SSLContext,
        SSLSocket=SSLSocket,
        SSLObject=SSLObject,
        SSLSession=SSLSession,
        MemoryBIO=MemoryBIO,
        create_default_context=create_default_context,
        _create_default_https_context=create_default_context,
        _create_unverified_context=_create_unverified_context,
        _create_stdlib_context=_create_unverified_context,
        DefaultVerifyPaths=DefaultVerifyPaths,
        get_default_verify_paths=get_default_verify_paths,
        get_server_certificate=get_server_certificate,
        PEM_HEADER=PEM_HEADER,
        PEM_FOOTER=PEM_FOOTER,
        DER_cert_to_PEM_cert=DER_cert_to_PEM_cert,
        PEM_cert_to_DER_cert=PEM_cert_to_DER_cert,
        RAND_bytes=RAND_bytes,
        RAND_status=RAND_status,
        RAND_add=RAND_add,
        # Libraries check these at import: urllib3 wants an OpenSSL 1.1.1 or later,
        # requests wants SNI. The host's TLS offers all of it.
        OPENSSL_VERSION="OpenSSL 3.0.0 (stand-in: TLS is done by Warden's host)",
        OPENSSL_VERSION_INFO=(3, 0, 0, 0, 0),
        OPENSSL_VERSION_NUMBER=0x30000000,
        _OPENSSL_API_VERSION=(3, 0, 0, 0, 0),
        HAS_SNI=True,
        HAS_ALPN=True,
        HAS_ECDH=True,
        HAS_NPN=False,
        HAS_NEVER_CHECK_COMMON_NAME=True,
        HAS_SSLv2=False,
        HAS_SSLv3=False,
        HAS_TLSv1=False,
        HAS_TLSv1_1=False,
        HAS_TLSv1_2=True,
        HAS_TLSv1_3=True,
        HAS_PSK=False,
        HAS_PHA=False,
        CHANNEL_BINDING_TYPES=["tls-unique"],
    )


class Loader:
    """Loads the stand-in `ssl` module (see `fill`)."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        fill(module.__dict__)

    def is_package(self, name):
        return False

    def get_source(self, name):
        return None
