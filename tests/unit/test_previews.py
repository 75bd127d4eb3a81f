"""Previews (`core.previews`): what a file call will do to the file, as a diff, and the edits
that will fail, said before anyone approves; what a hook returns, bounded and hashed."""

from __future__ import annotations

import asyncio
import json
import re
import sqlite3

import pytest

from core.config import preview_hooks
from core.previews import (
    ABSENT,
    Binary,
    Preview,
    argument_diff,
    digest,
    file_call,
    file_preview,
    file_text,
    from_hook,
    normal_path,
    state_file,
)
from tests.support.paths import ROOT

LAUNCH_PLAN = (
    "# Launch plan\n\n- Freeze on Thursday\n- Launch on Monday\n- Announce\n- Watch the dashboards\n"
)


def edit_args(old: str, new: str, replace_all: bool = False, path: str = "/plans/launch.md") -> dict:
    return {"file_path": path, "old_string": old, "new_string": new, "replace_all": replace_all}


def preview_of(name: str, args: dict, before) -> Preview:
    call = file_call(name, args)
    assert call is not None
    return file_preview(call, args, before)


def test_an_edit_is_the_lines_it_changes_with_a_little_context():
    preview = preview_of("edit_file", edit_args("Monday", "Tuesday"), LAUNCH_PLAN)

    assert preview.kind == "diff" and preview.warning == ""
    assert preview.summary == "edits /plans/launch.md: +1 −1 lines"
    assert preview.lines == [
        "@@ -1,6 +1,6 @@",
        " # Launch plan",
        " ",
        " - Freeze on Thursday",
        "-- Launch on Monday",
        "+- Launch on Tuesday",
        " - Announce",
        " - Watch the dashboards",
    ]


def test_an_edit_far_from_the_top_shows_only_its_neighbourhood():
    long = "".join(f"line {n}\n" for n in range(200))
    preview = preview_of("edit_file", edit_args("line 150\n", "line 150, edited\n", path="/a.txt"), long)

    assert preview.lines[0] == "@@ -148,7 +148,7 @@"
    assert len(preview.lines) == 9 and "-line 150" in preview.lines and "+line 150, edited" in preview.lines


@pytest.mark.parametrize(
    ("args", "before", "warning"),
    [
        (edit_args("Friday", "Saturday"), LAUNCH_PLAN, "this edit will fail: the text is not in the file"),
        (
            edit_args("- ", "* "),
            LAUNCH_PLAN,
            "this edit will fail: the text matches 4 times (and replace_all is not set)",
        ),
        (edit_args("", "x"), LAUNCH_PLAN, "this edit will fail: the text to replace is empty"),
        (edit_args("a", "b"), None, "this edit will fail: /plans/launch.md does not exist"),
    ],
)
def test_an_edit_that_will_fail_says_so_and_shows_what_it_asked(args, before, warning):
    preview = preview_of("edit_file", args, before)

    assert preview.warning == warning
    assert preview.summary == "edits /plans/launch.md (asked)"
    assert preview.lines == [f"-{line}" for line in args["old_string"].split("\n") if args["old_string"]] + [
        f"+{args['new_string']}"
    ]


def test_replace_all_changes_every_match_and_says_how_many():
    preview = preview_of("edit_file", edit_args("- ", "* ", replace_all=True), LAUNCH_PLAN)

    assert preview.warning == ""
    assert preview.summary == "edits /plans/launch.md: +4 −4 lines, in 4 places"


def test_a_new_file_is_created_with_its_lines():
    preview = preview_of("write_file", {"file_path": "notes//q3.md", "content": "# Q3\n\nNumbers.\n"}, None)

    assert preview.summary == "creates /notes/q3.md (3 lines)"
    assert preview.lines == ["+# Q3", "+", "+Numbers."]


def test_a_write_over_a_file_is_its_diff_and_the_same_text_is_no_change():
    over = preview_of(
        "write_file", {"file_path": "/plans/launch.md", "content": "# Launch plan\n\nSoon.\n"}, LAUNCH_PLAN
    )
    same = preview_of("write_file", {"file_path": "/plans/launch.md", "content": LAUNCH_PLAN}, LAUNCH_PLAN)

    assert over.summary == "overwrites /plans/launch.md: +1 −4 lines"
    assert over.lines[-5:] == [
        "-- Freeze on Thursday",
        "-- Launch on Monday",
        "-- Announce",
        "-- Watch the dashboards",
        "+Soon.",
    ]
    assert (same.summary, same.text) == ("writes /plans/launch.md as it is already: no change", "")


def test_files_as_state_backends_keep_them():
    values = {
        "files": {
            "/a.md": {"content": "one\ntwo", "encoding": "utf-8"},
            "/old.md": {"content": ["legacy", "lines"]},  # deepagents' earlier shape
            "/logo.png": {"content": "iVBORw0KGgo=", "encoding": "base64"},
        }
    }
    read = lambda path: state_file(values, file_call("write_file", {"file_path": path, "content": ""}))  # noqa: E731

    assert (read("/a.md"), read("/old.md"), read("/missing.md")) == ("one\ntwo", "legacy\nlines", None)
    assert isinstance(read("/logo.png"), Binary)
    assert file_text(None) is None and state_file({}, file_call("edit_file", edit_args("a", "b"))) is None
    binary = preview_of("write_file", {"file_path": "/logo.png", "content": "x"}, Binary())
    assert (binary.summary, binary.text) == ("changes /logo.png (a binary file: no diff)", "")


def test_only_file_tools_with_their_arguments_are_read():
    assert file_call("write_file", {"path": "/a", "content": "x"}) is None  # someone else's write_file
    assert file_call("edit_file", {"file_path": "/a", "old_string": "x"}) is None
    assert (
        file_call("write_file", {"file_path": "../etc/passwd", "content": "x"}) is None
    )  # the tool refuses it
    assert file_call("send_email", {"file_path": "/a", "content": "x"}) is None
    assert [normal_path(p) for p in ("a/b", "/./a//b", "~/x", "C:/x", "/a/../b")] == [
        "/a/b",
        "/a/b",
        None,
        None,
        None,
    ]


def test_the_anthropic_text_editor_is_read_too():
    key = file_call("str_replace_based_edit_tool", {"command": "create", "path": "/a.md", "file_text": "x"})
    assert key is not None and key.state_key == "text_editor_files"
    replaced = preview_of(
        "str_replace_based_edit_tool",
        {"command": "str_replace", "path": "/a", "old_str": "two", "new_str": "2"},
        "one\ntwo\n",
    )
    inserted = preview_of(
        "str_replace_based_edit_tool",
        {"command": "insert", "path": "/a", "insert_line": 1, "new_str": "1.5"},
        "one\ntwo",
    )
    missing = preview_of(
        "str_replace_based_edit_tool",
        {"command": "str_replace", "path": "/a", "old_str": "9", "new_str": "8"},
        "one",
    )

    assert "-two" in replaced.lines and "+2" in replaced.lines
    assert inserted.lines[1:] == [" one", "+1.5", " two"]
    assert missing.warning == "this edit will fail: the text is not in the file"
    assert file_call("str_replace_based_edit_tool", {"command": "view", "path": "/a"}) is None
    memory = file_call("memory", {"command": "str_replace", "path": "/memories/a.md", "old_str": "x"})
    assert memory is not None and memory.state_key == "memory_files"  # its memory tool, too


def test_a_preview_is_cut_at_its_limit_on_a_line_and_hashed_as_shown():
    text = "\n".join(f"+line {n}" for n in range(1_000))
    preview = Preview.of("diff", text, summary="creates /big", limit=2_000)

    assert preview.truncated and len(preview.text) <= 2_000 and text.startswith(preview.text)
    assert preview.text.endswith(preview.lines[-1]) and preview.lines[-1].startswith("+line ")
    assert preview.sha256 == digest(preview.model_dump())
    assert Preview.of("diff", text + "!", summary="creates /big", limit=10_000).sha256 != preview.sha256
    canonical = {k: v for k, v in preview.model_dump().items() if k != "sha256"}
    assert json.dumps(canonical, sort_keys=True)  # (what an auditor hashes: sha256 of this, compact, UTF-8)


def test_what_a_hook_returns_becomes_a_preview_or_says_what_was_wrong():
    text = from_hook("EXPLAIN: seq scan on orders", "app.previews:explain")
    markdown = from_hook({"kind": "markdown", "text": "**To**: a@b.c", "summary": "an email"}, "app:email")
    preview = from_hook(Preview.of("diff", "+x"), "app:plan")

    assert (text.kind, text.text, text.source) == (
        "text",
        "EXPLAIN: seq scan on orders",
        "app.previews:explain",
    )
    assert (markdown.kind, markdown.summary) == ("markdown", "an email")
    assert (preview.kind, preview.source) == ("diff", "app:plan")
    assert from_hook(None, "app:none") is None  # no preview for this call
    assert from_hook(42, "app:n").warning == "the preview hook returned int, not text"
    assert from_hook({"kind": "html", "text": "<b>"}, "app:h").warning.startswith(
        "the preview hook returned kind 'html'"
    )
    assert from_hook("x" * 5_000, "app:big", limit=1_000).truncated


def test_an_argument_diff_is_a_unified_diff_for_texts_of_several_lines():
    assert argument_diff("a\nb\nc\n", "a\nB\nc\n") == ["@@ -1,3 +1,3 @@", " a", "-b", "+B", " c"]
    assert argument_diff("/a.md", "/b.md") == ["-/a.md", "+/b.md"]
    assert argument_diff(ABSENT, {"x": 1}) == ['+{"x": 1}']
    assert argument_diff(5, ABSENT) == ["-5"]
    assert argument_diff(None, "x") == ["-null", "+x"]


def documented(section: str, opening: str) -> str:
    """The code block of docs/running.md's `section` that starts with `opening`."""
    text = (ROOT / "docs" / "running.md").read_text()
    body = text.split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return next(b for b in re.findall(r"```\w*\n(.*?)```", body, re.S) if b.startswith(opening))


def test_the_documented_preview_hooks_make_the_previews_they_say(tmp_path):
    hooks: dict = {}
    exec(documented("Previews: what a call will do", "# previews.py"), hooks)  # noqa: S102 (our own docs)
    hooks["DATABASE"] = str(tmp_path / "app.db")
    with sqlite3.connect(hooks["DATABASE"]) as db:
        db.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY, customer TEXT)")
        db.execute("CREATE INDEX by_customer ON orders (customer)")
    config = json.loads(documented("Previews: what a call will do", '{\n  "graphs"'))
    assert preview_hooks(config["signoff"]["previews"]) == config["signoff"]["previews"]

    def call(name: str, **args) -> dict:
        return {"name": name, "args": args, "id": "call-1"}

    plan = from_hook(
        hooks["explain"](call("run_sql", query="SELECT * FROM orders WHERE customer = 'x'"), {}), "h"
    )
    email = from_hook(
        asyncio.run(hooks["rendered_email"](call("send_email", to="a@b.c", subject="Hi", body="Text"), {})),
        "h",
    )
    scaling = from_hook(hooks["scaling_plan"](call("scale_service", service="api", replicas=3), {}), "h")

    assert plan is not None and "USING COVERING INDEX by_customer" in plan.text
    deleting = from_hook(hooks["explain"](call("run_sql", query="DELETE FROM orders WHERE id = 1"), {}), "h")
    assert deleting is not None and deleting.text  # planned, never run
    with pytest.raises(sqlite3.ProgrammingError):  # one statement only
        hooks["explain"](call("run_sql", query="SELECT 1; DROP TABLE orders"), {})
    with sqlite3.connect(hooks["DATABASE"]) as db:
        assert db.execute("SELECT count(*) FROM orders").fetchone() == (0,)  # the table is still there
    assert email is not None and email.kind == "markdown" and email.summary == "an email to a@b.c"
    assert scaling is not None and scaling.kind == "diff"
    assert scaling.lines[1:3] == ["-   replicas = 1", "+   replicas = 3"]


DEPLOY_TOKEN = "ghp_abcdefghijklmnopqrstuvwxyz0123456789"


def test_a_preview_of_a_call_carrying_a_secret_is_masked_as_its_arguments_and_hashed_so():
    from core.protocol import ActionReview, PendingRequest, RequestKind
    from core.records import concealed
    from core.secrets import mask

    def review(name: str, args: dict, preview: Preview) -> ActionReview:
        return ActionReview(name=name, args=args, allowed_decisions=("approve",), preview=preview)

    write = {"file_path": "/deploy.md", "content": f"# Deploy\nkey: {DEPLOY_TOKEN}\nthen ship\n"}
    key = {"host": "db", "private_key": "-----BEGIN KEY-----\nMIIEsecretbody\n-----END KEY-----"}
    diff = preview_of("write_file", write, None)
    hook = from_hook(
        {"kind": "diff", "text": "\n".join(f"+{line}" for line in key["private_key"].split("\n"))}, "h"
    )
    echo = from_hook(f"connects with {key['private_key']} and hunter2hunter", "h")
    request = PendingRequest(
        interrupt_id="i",
        kind=RequestKind.BATCHED,
        actions=(review("write_file", write, diff), review("connect", key, hook), review("echo", {}, echo)),
    )

    shown = concealed(request, known=["hunter2hunter"])
    texts = [a.preview.text for a in shown.actions if a.preview is not None]
    assert texts[0] == "+# Deploy\n+key: ••••6789\n+then ship"  # the token only: the file stays readable
    # a secret by its name, whole, and line by line as a diff shows it; the run's known secret
    assert texts[1] == "\n".join(f"+{mask(line)}" for line in key["private_key"].split("\n"))
    assert texts[2] == f"connects with {mask(key['private_key'])} and {mask('hunter2hunter')}"
    assert "MIIEsecretbody" not in str([a.preview for a in shown.actions])
    for action in shown.actions:
        assert action.preview is not None and action.preview.sha256 == digest(action.preview.model_dump())
    assert shown.actions[0].preview.sha256 != diff.sha256  # the hash is of what is shown
