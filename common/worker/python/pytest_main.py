"""Runs one of det's Python test files under pytest, one JUnit <testcase> per test: the
`main` of the package's py_test targets and of det/pytorch/python_test.sh.

    pytest_main.py TEST_FILE [ARG...]

Under `bazel test` the results go to $XML_OUTPUT_FILE (the target's test.xml, which
tests/run.sh counts case by case). The test files stay plain unittest scripts that also run
as `python3 TEST_FILE ARG...`: before the tests run, the file's `if __name__ == "__main__":`
block runs in the module with sys.argv = [TEST_FILE, ARG...] and unittest.main doing
nothing, so what a file takes from its command line (sampler_test.py's tool path) it gets
here too. Modules are imported by their dotted path below this directory
(tests.core_test, det.pytorch.sampler_test), without touching sys.path. Without pytest
(another interpreter, --test_env=DET_TEST_PYTHON=...) the file runs as a script under
unittest, as before; Bazel then counts the target as one case.
"""

import ast
import os
import runpy
import sys
import unittest
from types import CodeType, ModuleType
from typing import Any, List, Optional

ROOT = os.path.dirname(os.path.abspath(__file__))


def _is_main_guard(test: ast.expr) -> bool:
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name)
            and test.left.id == "__name__" and len(test.ops) == 1
            and isinstance(test.ops[0], ast.Eq)
            and isinstance(test.comparators[0], ast.Constant)
            and test.comparators[0].value == "__main__")


def main_block(path: str) -> Optional[CodeType]:
    """The body of the file's top-level `if __name__ == "__main__":` blocks, or None."""
    with open(path, encoding="utf-8") as f:
        tree = ast.parse(f.read(), path)
    body: List[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.If) and _is_main_guard(node.test):
            body.extend(node.body)
    if not body:
        return None
    code: CodeType = compile(ast.Module(body=body, type_ignores=[]), path, "exec")
    return code


def run_main_block(module: ModuleType, path: str, args: List[str]) -> None:
    """Runs the file's main block in `module` with its command line, unittest.main a no-op."""
    code = main_block(path)
    if code is None:
        return
    saved_argv, saved_main = sys.argv, unittest.main
    sys.argv = [path] + args
    unittest.main = lambda *a, **k: None  # type: ignore[assignment]
    try:
        exec(code, module.__dict__)
    finally:
        sys.argv, unittest.main = saved_argv, saved_main


class _MainBlockPlugin:
    """Runs the test file's main block once pytest has imported it, before any test."""

    def __init__(self, path: str, args: List[str]) -> None:
        self.path = path
        self.args = args

    def pytest_collection_finish(self, session: Any) -> None:
        import pytest
        for item in session.items:
            module = item.getparent(pytest.Module)
            if module is not None and os.path.samefile(str(module.path), self.path):
                run_main_block(module.obj, self.path, self.args)
                return


def main(argv: List[str]) -> int:
    if not argv:
        print(__doc__, file=sys.stderr)
        return 2
    path, args = os.path.abspath(argv[0]), argv[1:]
    try:
        import pytest
    except ModuleNotFoundError:
        sys.argv = [path] + args
        sys.path.insert(0, os.path.dirname(path))
        runpy.run_path(path, run_name="__main__")
        return 0
    options = [
        path,
        "-c", os.devnull,             # no ini file from the tree: these options are all
        f"--rootdir={ROOT}",
        "--import-mode=importlib",
        "-p", "no:cacheprovider",     # writes nothing beside the tests
        "-p", "no:hypothesispytest",  # (Debian's python3-hypothesis: its .hypothesis/ too)
        "-v", "-rfEs", "--tb=short",
    ]
    xml = os.environ.get("XML_OUTPUT_FILE")
    if xml:
        suite = os.environ.get("TEST_TARGET", os.path.basename(path))
        options += [f"--junitxml={xml}", "-o", f"junit_suite_name={suite}",
                    "-o", "junit_family=xunit2"]
    return int(pytest.main(options, plugins=[_MainBlockPlugin(path, args)]))


if __name__ == "__main__":
    # Python put this file's directory, symlinks resolved, first on sys.path: in Bazel's
    # runfiles that is the source tree, which lacks the generated stubs and the native
    # library. The package comes from PYTHONPATH (or the py_test's imports) instead.
    if sys.path and os.path.realpath(sys.path[0]) == os.path.dirname(os.path.realpath(__file__)):
        del sys.path[0]
    sys.exit(main(sys.argv[1:]))
