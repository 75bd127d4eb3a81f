"""The test suite's own shape: every helper defined once (in tests/support), bench on support code.

An AST scan of tests/**.py: a top-level function that is not a test, a class, or an UPPER_CASE
constant defined in more than one module is a helper kept in two places, which drift apart.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict

from tests.support.paths import ROOT

TESTS = ROOT / "tests"
BENCH = ROOT / "bench"
CONSTANT = re.compile(r"^_?[A-Z][A-Z0-9_]*$")

# Names that may be defined in several modules, each with its reason.
ALLOWED = {
    "scene": "a module's own bot and runners, as its tests need them: a fixture pytest finds by name,"
    " each built with tests.support.harness.start_scene",
    "send_email": "a tool: its name is what the scripted model calls; each agent's tool does its own thing",
    "write_file": "a tool: its name is what the scripted model calls; each agent's tool does its own thing",
}


def is_fixture(node: ast.AST) -> bool:
    decorators = getattr(node, "decorator_list", [])
    return any("fixture" in ast.unparse(d) for d in decorators)


def definitions(module: ast.Module, conftest: bool) -> set[str]:
    """The module's top-level helpers: functions (not tests), classes, UPPER_CASE constants."""
    names: set[str] = set()
    for node in module.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            if node.name.startswith("test_") or (conftest and is_fixture(node)):
                continue
            names.add(node.name)
        elif isinstance(node, ast.ClassDef):
            if not node.name.startswith("Test"):
                names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name) and CONSTANT.match(name.id):
                        names.add(name.id)
    return names


def test_no_helper_is_defined_in_two_test_modules():
    where: dict[str, list[str]] = defaultdict(list)
    for path in sorted(TESTS.rglob("*.py")):
        module = ast.parse(path.read_text(), str(path))
        for name in definitions(module, conftest=path.name == "conftest.py"):
            where[name].append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1 and name not in ALLOWED}
    assert twice == {}, "define these once, in tests/support: " + "\n".join(
        f"{name}: {', '.join(paths)}" for name, paths in sorted(twice.items())
    )


def test_bench_imports_support_code_not_test_modules():
    wrong = []
    for path in sorted(BENCH.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            modules = (
                [node.module or ""]
                if isinstance(node, ast.ImportFrom)
                else [a.name for a in node.names]
                if isinstance(node, ast.Import)
                else []
            )
            for module in modules:
                if (module == "tests" or module.startswith("tests.")) and not (
                    module == "tests.support" or module.startswith("tests.support.")
                ):
                    wrong.append(f"{path.name}: {module}")
    assert wrong == []
