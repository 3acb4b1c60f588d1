"""_warden_http_client (runtime/http_client.py) and _warden_ssl (runtime/ssl_standin.py) under
the host's CPython: the requests http.client writes, taken apart as the door's frames
need them, against fixture files; the stand-in `ssl`."""

import json
import pathlib
import unittest

import _warden_http_client as http_client
import _warden_ssl

FIXTURES = pathlib.Path(__file__).parent / "fixtures"


class Requests(unittest.TestCase):
    """Each fixture `NAME.http` is one request as http.client writes it; `NAME.json` is
    what the door's frame takes from it (the body's framing headers are the host's to
    set, so they are not among its headers)."""

    def fixtures(self):
        found = sorted(FIXTURES.glob("*.http"))
        self.assertGreaterEqual(len(found), 2)
        for path in found:
            yield path, path.read_bytes(), json.loads(path.with_suffix(".json").read_text())

    def test_each_request_is_taken_apart_as_sent(self):
        for path, raw, expected in self.fixtures():
            with self.subTest(path.name):
                buffer = bytearray(raw)
                head = http_client._parse_head(buffer)
                method, target, headers, body = http_client._take_request(buffer, head, True)
                self.assertEqual(
                    {"method": method, "target": target,
                     "headers": [list(h) for h in headers], "body": body.decode()},
                    expected,
                )
                self.assertEqual(buffer, b"", "the whole request was taken")

    def test_a_request_not_all_arrived_waits_and_takes_nothing(self):
        for path, raw, _ in self.fixtures():
            for cut in (10, len(raw) - 2):
                with self.subTest(path.name, cut=cut):
                    buffer = bytearray(raw[:cut])
                    head = http_client._parse_head(buffer)
                    self.assertIsNone(http_client._take_request(buffer, head, True))
                    self.assertEqual(bytes(buffer), raw[:cut])

    def test_a_chunked_body_is_read_whole_or_not_at_all(self):
        body = bytearray(b"3\r\nabc\r\n0\r\nTrailer: x\r\n\r\n")
        self.assertEqual(http_client._dechunk(body, 0), (b"abc", len(body)))
        self.assertIsNone(http_client._dechunk(bytearray(b"3\r\nab"), 0))
        self.assertIsNone(http_client._dechunk(bytearray(b"zz\r\nab\r\n"), 0))


class SslStandIn(unittest.TestCase):
    def setUp(self):
        self.ssl = {}
        _warden_ssl.fill(self.ssl)

    def test_libraries_find_what_they_build_at_import(self):
        ssl = self.ssl
        context = ssl["create_default_context"]()
        self.assertEqual(context.verify_mode, ssl["CERT_REQUIRED"])
        self.assertTrue(context.check_hostname)
        for name in ("SSLContext", "SSLError", "PROTOCOL_TLS_CLIENT", "OP_NO_SSLv3",
                     "HAS_SNI", "TLSVersion", "Purpose", "MemoryBIO"):
            self.assertIn(name, ssl)

    def test_a_tls_connection_of_its_own_is_refused_naming_the_way_that_works(self):
        context = self.ssl["create_default_context"]()
        with self.assertRaisesRegex(PermissionError, "carried out.*by the host"):
            context.wrap_socket(object(), server_hostname="example.com")


if __name__ == "__main__":
    unittest.main()
