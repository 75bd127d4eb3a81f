"""`signoff try` and `module:attr` from the current folder, as the README's own-agent steps use
them: a policy that does not read is refused in one line before anything starts, a graph that
does not import too, and the folder's module is found by the doctor as by `signoff try`.
(The whole walk through, clicked in a browser: tests/browser/test_try.py.)"""

from __future__ import annotations

import subprocess
import sys

from langchain_core.messages import HumanMessage, ToolMessage

from signoff.testing import scripted_model
from signoff_demo.page import GROUPS
from signoff_demo.redis_server import free_port
from tests.support.commands import launch, line_with, newcomer_env, run, stop
from tests.support.own_agent import own_agent_folder, try_command


def test_a_policy_that_does_not_read_is_refused_in_one_line_before_anything_starts(tmp_path):
    folder = own_agent_folder(tmp_path)
    (folder / "my.toml").write_text('[[rules]]\ntools = ["issue_refund"]\nwhen = "args.amount >"\n')
    done = run([*try_command(), "--port", "9"], folder, newcomer_env(), timeout=60)
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.splitlines() == [
        "signoff: these settings make no sense, so nothing was started:",
        "  my.toml: rules[0].when: not CEL: a syntax error at '>' (column 13) (given 'args.amount >')",
    ]


def test_a_policy_file_that_is_not_there_is_named_as_given(tmp_path):
    folder = own_agent_folder(tmp_path)
    done = run(["try", "myagent:build", "--policy", "mine.toml"], folder, newcomer_env(), timeout=60)
    assert done.returncode == 2
    assert done.stderr.splitlines()[1:] == ["  --policy mine.toml: no such file"]


def test_a_graph_not_in_the_folder_is_refused_in_one_line(tmp_path):
    folder = own_agent_folder(tmp_path)
    done = run(["try", "theiragent:build", "--policy", "my.toml"], folder, newcomer_env(), timeout=60)
    assert done.returncode == 2
    assert done.stderr == (
        "signoff: cannot import 'theiragent' for graph 'theiragent:build': No module named 'theiragent'\n"
    )


def test_the_doctor_finds_the_folders_graph_and_says_its_model_was_not_called(tmp_path):
    folder = own_agent_folder(tmp_path)
    done = run(["doctor"], folder, newcomer_env(SIGNOFF_GRAPH="myagent:build", SIGNOFF_POLICY="my.toml"))
    assert "✓ graph myagent: loads; its model was not called" in done.stdout, done.stdout


def test_the_fake_model_asks_for_each_listed_call_in_turn_then_says_what_the_tool_returned():
    model = scripted_model(
        [
            {"name": "issue_refund", "args": {"order_id": 1, "amount": 5}},
            [{"name": "deploy", "args": {}}, {"name": "deploy", "args": {"env": "prod"}}],  # one turn
        ]
    )
    asked = [HumanMessage("go")]
    first = model.invoke(asked)
    assert [(c["name"], c["args"]) for c in first.tool_calls] == [
        ("issue_refund", {"order_id": 1, "amount": 5})
    ]
    asked += [first, ToolMessage("Refunded 5 on order 1", tool_call_id=first.tool_calls[0]["id"])]
    second = model.invoke(asked)
    assert [(c["name"], c["args"]) for c in second.tool_calls] == [
        ("deploy", {}),
        ("deploy", {"env": "prod"}),
    ]
    assert len({c["id"] for c in [*first.tool_calls, *second.tool_calls]}) == 3
    asked += [second, ToolMessage("Deployed", tool_call_id=second.tool_calls[1]["id"])]
    last = model.invoke(asked)
    assert (last.text, last.tool_calls) == ("Deployed", [])


def test_without_a_policy_file_it_says_so_at_start(tmp_path):
    folder = own_agent_folder(tmp_path.resolve())
    (folder / "my.toml").unlink()
    process = launch(["try", "myagent:build", "--port", str(free_port())], folder, newcomer_env())
    try:
        said = line_with(process, "Open http", 120)
    finally:
        code, out = stop(process)
    assert said.splitlines()[:2] == [
        f"Signoff try: graph myagent:build (from {folder})",
        "Policy: none (no --policy, no ./signoff.toml): anyone may approve, the requester too, "
        "and nothing expires",
    ]
    assert code == 0, said + out


def test_the_runner_builds_the_folders_graph_by_module_name(tmp_path):
    folder = own_agent_folder(tmp_path)
    built = subprocess.run(
        [
            sys.executable,
            "-P",  # no current folder on sys.path, as in the `signoff` script
            "-c",
            "from agent_runner.graphs import build_graph; build_graph('myagent:build', None)",
        ],
        cwd=folder,
        env=newcomer_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert built.returncode == 0, built.stderr


def test_the_pages_workspace_has_the_readmes_groups():
    assert GROUPS == {"S0FINANCE": ["U0ALICE", "U0DANA"], "S0SECURITY": ["U0BOB"]}
