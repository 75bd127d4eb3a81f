"""The product code's shape: one job per file, functions a reader can hold, imports that point down.

Files stay under about 600 lines and functions under about 60, unless the function's docstring
says why it is longer ("Long: ..."). The layer rule itself is `lint-imports` in `make lint`; the
check here is the one a newcomer asks first: the runner never imports the bot or the demo.
"""

from __future__ import annotations

import ast
from pathlib import Path

from tests.support.paths import ROOT

PRODUCT = ("core", "bot", "agent_runner", "signoff", "signoff_demo", "slack_standin")
MAX_FILE_LINES = 600
MAX_FUNCTION_LINES = 60


def product_files() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))


def test_no_product_file_is_over_600_lines():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in product_files()
        if (lines := len(path.read_text().splitlines())) > MAX_FILE_LINES
    }
    assert not long, f"split these files by job: {long}"


def test_no_function_is_over_60_lines_without_saying_why():
    long = []
    for path in product_files():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            lines = (node.end_lineno or node.lineno) - node.lineno + 1
            if lines > MAX_FUNCTION_LINES and "Long:" not in (ast.get_docstring(node) or ""):
                long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, f"split these, or say why in the docstring ('Long: ...'): {long}"


def test_the_runner_and_the_core_never_import_the_bot_or_the_demo():
    found = []
    for package, barred in (("agent_runner", ("bot", "signoff_demo", "signoff")), ("core", PRODUCT[1:])):
        for path in (ROOT / package).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = (
                    [alias.name for alias in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module or ""]
                    if isinstance(node, ast.ImportFrom)
                    else []
                )
                found += [f"{path.relative_to(ROOT)} imports {n}" for n in names if n.split(".")[0] in barred]
    assert not found


def test_the_store_is_built_of_rooms_not_mixed_from_them():
    """Each room of the Store is a class of its own, given what it needs (no mixins); no module
    stubs someone else's methods under TYPE_CHECKING (a dependency hidden from its reader)."""
    rooms = {
        n.name
        for path in (ROOT / "core" / "store").glob("*.py")
        for n in ast.parse(path.read_text()).body
        if isinstance(n, ast.ClassDef)
    }
    mixed, stubs = [], []
    for path in product_files():
        tree = ast.parse(path.read_text())
        where = str(path.relative_to(ROOT))
        for n in tree.body:
            if isinstance(n, ast.ClassDef) and any(ast.unparse(b) in rooms for b in n.bases):
                mixed.append(f"{where}:{n.name}")
        if where.startswith("slack_standin/"):  # (the stand-in plays Slack: not the Store's concern)
            continue
        for node in ast.walk(tree):
            typing_only = isinstance(node, ast.If) and ast.unparse(node.test).endswith("TYPE_CHECKING")
            if typing_only:
                for inner in ast.walk(node):
                    if isinstance(inner, ast.FunctionDef | ast.AsyncFunctionDef):
                        stubs.append(f"{where}:{inner.lineno} {inner.name}")
    assert mixed == [] and stubs == [], (mixed, stubs)
