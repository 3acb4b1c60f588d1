"""_warden_encode (runtime/encode.py) under the host's CPython: results as JSON."""

import dataclasses
import datetime
import decimal
import enum
import json
import sys
import typing
import unittest
import uuid

import _warden_encode as encode


def to_json(value, depth=100):
    return encode.to_json(value, "result", set(), json.dumps, sys.modules.get, depth)


class Size(enum.IntEnum):
    SMALL = 1


class Pair(typing.NamedTuple):
    left: int
    right: str


@dataclasses.dataclass
class Row:
    name: str
    at: datetime.datetime


class Encoding(unittest.TestCase):
    def test_the_documented_conversions(self):
        when = datetime.datetime(2026, 11, 29, 1, 2, 3)
        self.assertEqual(
            to_json({
                "bytes": b"\x00\xff",
                "enum": Size.SMALL,
                "date": when.date(),
                "delta": datetime.timedelta(minutes=1, milliseconds=500),
                "uuid": uuid.UUID(int=1),
                "decimal": decimal.Decimal("1.50"),
                "pair": Pair(1, "b"),
                "rows": (Row("a", when),),
                "set": {3, 1, 2},
                1: "an int key",
                None: "a None key",
            }),
            {
                "bytes": "AP8=",
                "enum": 1,
                "date": "2026-11-29",
                "delta": 60.5,
                "uuid": "00000000-0000-0000-0000-000000000001",
                "decimal": "1.50",
                "pair": {"left": 1, "right": "b"},
                "rows": [{"name": "a", "at": "2026-11-29T01:02:03"}],
                "set": [1, 2, 3],
                "1": "an int key",
                "null": "a None key",
            },
        )

    def test_a_model_dumps_itself(self):
        class Model:
            def model_dump(self):
                return {"ok": True}

        self.assertEqual(to_json([Model()]), [{"ok": True}])

    def test_what_json_cannot_hold_is_refused_with_its_path(self):
        loop = []
        loop.append(loop)
        cases = [
            (float("nan"), "result is nan"),
            ({"a": [float("inf")]}, "result['a'][0] is inf"),
            (loop, "refers back to itself"),
            ({(1, 2): 0}, "has a key of type tuple"),
            (object(), "builtins.object, which has no JSON form"),
            ([[[]]], "nests deeper"),
        ]
        for value, message in cases:
            with self.subTest(message=message):
                with self.assertRaisesRegex(encode._Unserializable, message.replace("[", r"\[")):
                    to_json(value, depth=2)


if __name__ == "__main__":
    unittest.main()
