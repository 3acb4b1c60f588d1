"""_warden_bind (runtime/bind.py) under the host's CPython: binding a call's arguments."""

import dataclasses
import datetime
import enum
import sys
import typing
import unittest

import _warden_bind as bind


class Colour(enum.Enum):
    RED = "red"
    BLUE = "blue"


@dataclasses.dataclass
class Point:
    x: int
    y: int = 0


def place(point: Point, colour: Colour, when: datetime.date, tags: list[Point] = ()):
    return point, colour, when, tags


class BindProblems(unittest.TestCase):
    def test_what_cannot_bind_is_named(self):
        def f(a, b=1, *, c, d=2):
            pass

        self.assertIsNone(bind.bind_problem(f, {"a": 1, "c": 3}))
        self.assertEqual(bind.bind_problem(f, {"c": 3}), "missing required argument(s): a")
        self.assertEqual(
            bind.bind_problem(f, {"a": 1, "c": 3, "e": 5, "z": 0}),
            "unexpected argument(s): e, z",
        )

    def test_keyword_arguments_take_anything_and_positional_only_cannot_be_named(self):
        def any_kw(a, **rest):
            pass

        def positional(a, /, b):
            pass

        self.assertIsNone(bind.bind_problem(any_kw, {"a": 1, "zzz": 2}))
        self.assertIn("positional-only", bind.bind_problem(positional, {"a": 1, "b": 2}))

    def test_a_bound_methods_self_is_bound_already(self):
        class Tool:
            def forward(self, text, times=1):
                return text * times

        method = Tool().forward
        self.assertIsNone(bind.bind_problem(method, {"text": "a"}))
        self.assertEqual(bind.bind_problem(method, {}), "missing required argument(s): text")


class ToolMethods(unittest.TestCase):
    def test_smolagents_sets_up_once_then_forwards(self):
        class Shout:
            def setup(self):
                self.suffix = "!"

            def forward(self, text):
                return text.upper() + self.suffix

        self.assertEqual(bind.tool_method(Shout)(text="hi"), "HI!")

    def test_langchain_and_crewai_run_else_arun(self):
        class Sync:
            def _run(self, n):
                return n + 1

        class Async:
            async def _arun(self, n):
                return n + 2

        self.assertEqual(bind.tool_method(Sync)(n=1), 2)
        self.assertEqual(bind.tool_method(Async).__name__, "_arun")

    def test_a_class_with_no_such_method_is_refused(self):
        class Nothing:
            pass

        with self.assertRaisesRegex(TypeError, "defines no forward"):
            bind.tool_method(Nothing)


class TypedArguments(unittest.TestCase):
    def test_values_become_their_annotations_types(self):
        args = bind.typed_arguments(
            place,
            {
                "point": {"x": 1, "y": 2},
                "colour": "blue",
                "when": "2026-11-29",
                "tags": [{"x": 3}],
            },
            sys.modules.get,
        )
        self.assertEqual(args["point"], Point(1, 2))
        self.assertIs(args["colour"], Colour.BLUE)
        self.assertEqual(args["when"], datetime.date(2026, 11, 29))
        self.assertEqual(args["tags"], [Point(3, 0)])

    def test_a_name_that_does_not_resolve_leaves_the_other_parameters_typed(self):
        # As Letta writes it; on a Python without annotationlib (3.13, this host's).
        def remind(agent_state: "AgentState", point: Point) -> str:
            return point

        args = bind.typed_arguments(remind, {"point": {"x": 1}}, sys.modules.get)
        self.assertEqual(args["point"], Point(1, 0))

    def test_plain_json_annotations_pass_as_they_came(self):
        def plain(a: int, b: str, c: typing.Any = None):
            pass

        arguments = {"a": 1, "b": "x", "c": {"k": [1]}}
        self.assertEqual(bind.typed_arguments(plain, dict(arguments), sys.modules.get), arguments)

    def test_a_value_that_does_not_convert_is_an_argument_error(self):
        with self.assertRaises(bind._ArgumentError):
            bind.typed_arguments(place, {"point": {"x": 1}, "colour": "green",
                                         "when": "2026-11-29"}, sys.modules.get)


class FrameworkToolObjects(unittest.TestCase):
    """What an installed framework's decorator returns, in the shapes they have."""

    def test_the_function_a_tool_object_was_made_from_is_found(self):
        def weather(city: str) -> str:
            return city

        class FunctionTool:  # openai-agents: the function behind `__wrapped__`
            def __init__(self, f):
                self.name = f.__name__
                self.__wrapped__ = f

        class StructuredTool:  # LangChain: `func`, or `coroutine` when async
            def __init__(self, f):
                self.func, self.coroutine = None, f

        module = weather.__module__
        self.assertIs(bind.tool_function(FunctionTool(weather), module), weather)
        self.assertIs(bind.tool_function(StructuredTool(weather), module), weather)

    def test_a_library_function_or_a_plain_value_is_not_taken_for_the_tool(self):
        class Wrapper:
            func = staticmethod(__import__("json").dumps)  # a function from elsewhere

        class Raising:
            @property
            def fn(self):
                raise RuntimeError("a property that fails")

        module = self.__module__
        self.assertIsNone(bind.tool_function(Wrapper(), module))
        self.assertIsNone(bind.tool_function(Raising(), module))
        self.assertIsNone(bind.tool_function(42, module))


if __name__ == "__main__":
    unittest.main()
