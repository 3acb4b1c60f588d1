"""_warden_warm (runtime/warm.py) under the host's CPython: a tool imported for its warm
state, refused when its own module-level code raised or read the environment."""

import linecache
import os
import random
import sys
import tempfile
import traceback
import unittest

import _warden_warm as warm


class ImportTool(unittest.TestCase):
    def setUp(self):
        self.folder = tempfile.TemporaryDirectory()
        self.addCleanup(self.folder.cleanup)
        self.addCleanup(sys.modules.pop, "__warden_tool__", None)

    def tool(self, source):
        path = os.path.join(self.folder.name, "tool.py")
        with open(path, "w") as f:
            f.write(source)
        return path

    def imported(self, source):
        return warm.import_tool(self.tool(source), sys, os, linecache, traceback)

    def test_a_plain_tool_is_imported_with_its_lines_cached(self):
        path = self.tool("import json\n\nLIMIT = 3\n\ndef top(xs: list) -> list:\n    return xs[:LIMIT]\n")
        real = os.environ
        self.assertIsNone(warm.import_tool(path, sys, os, linecache, traceback))
        module = sys.modules["__warden_tool__"]
        self.assertEqual(module.top([1, 2, 3, 4]), [1, 2, 3])
        self.assertEqual(module.__file__, path)
        self.assertEqual(linecache.cache[path][2][2], "LIMIT = 3\n")
        self.assertIs(os.environ, real)  # the real mapping is back

    def test_module_level_code_that_raises_is_refused_with_its_traceback(self):
        real = os.environ
        refused = self.imported("import json\n\nraise RuntimeError('no config file')\n")
        self.assertEqual(refused["type"], "RuntimeError")
        self.assertEqual(refused["message"], "no config file")
        self.assertIn("line 3", refused["traceback"])
        self.assertNotIn("__warden_tool__", sys.modules)
        self.assertIs(os.environ, real)

    def test_each_way_of_reading_the_environment_is_refused(self):
        for read in (
            "os.environ['HOME']",
            "os.environ.get('API_KEY')",
            "os.getenv('API_KEY', 'x')",
            "'API_KEY' in os.environ",
            "dict(os.environ)",
            "len(os.environ)",
            "os.environ.copy()",
        ):
            with self.subTest(read=read):
                refused = self.imported(f"import os\n\nKEY = {read}\n\ndef f():\n    return 1\n")
                self.assertIsNotNone(refused, read)
                self.assertEqual(refused["type"], "ReadsEnvironment")
                self.assertNotIn("__warden_tool__", sys.modules)

    def test_reading_the_environment_in_a_function_or_a_library_is_not_refused(self):
        source = (
            "import os\n"
            "import tempfile\n\n"
            "WHERE = tempfile.gettempdir()\n"  # reads TMPDIR, in the standard library
            "ENV = os.environ\n\n"  # a reference, read per call
            "def key():\n"
            "    return ENV.get('API_KEY')\n"
        )
        self.assertIsNone(self.imported(source))
        os.environ["API_KEY"] = "per call"
        self.addCleanup(os.environ.pop, "API_KEY", None)
        self.assertEqual(sys.modules["__warden_tool__"].key(), "per call")

    def test_a_long_message_is_clipped(self):
        refused = self.imported("raise ValueError('x' * 40000)\n")
        self.assertEqual(len(refused["message"]), 16000)


class FreshState(unittest.TestCase):
    def test_the_random_module_is_reseeded(self):
        random.seed(7)
        seeded = random.random()
        random.seed(7)
        warm.fresh_state(sys.modules.get)
        self.assertNotEqual(random.random(), seeded)

    def test_modules_not_loaded_are_left_alone(self):
        warm.fresh_state(lambda name: None)


if __name__ == "__main__":
    unittest.main()
