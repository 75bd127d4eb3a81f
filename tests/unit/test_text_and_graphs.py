"""The answer's Markdown as Slack shows it; graphs from langgraph.json."""

from __future__ import annotations

import json
import os

import pytest
from langgraph.checkpoint.memory import InMemorySaver

from agent_runner.graphs import build_graph
from bot.views.markdown import split_mrkdwn, to_mrkdwn
from core.config import Settings
from core.graphs import GraphLoadError, default_graph, graph_specs


def test_markdown_becomes_mrkdwn_and_stays_harmless():
    answer = (
        "# Summary\n**Refund issued** for *order 12*, see [the ledger](https://books.example/12).\n"
        "- first\n- second <!channel>\n`a*b*` and ~~old~~\n```\nx = **1**\n```"
    )

    assert to_mrkdwn(answer) == (
        "*Summary*\n*Refund issued* for _order 12_, see the ledger (https://books.example/12).\n"
        "• first\n• second &lt;!channel&gt;\n`a*b*` and ~old~\n```\nx = **1**\n```"
    )


def test_long_answers_split_at_lines_and_keep_code_blocks_closed():
    text = "Intro\n\n```\n" + "\n".join(f"line {n}" for n in range(1_500)) + "\n```\nOutro"

    chunks = split_mrkdwn(text, limit=3_500)

    assert len(chunks) > 1 and all(len(c) <= 3_510 for c in chunks)
    assert all(c.count("```") % 2 == 0 for c in chunks)
    assert "".join(chunks).count("line 1499") == 1


def test_graphs_come_from_langgraph_json_with_env_and_dependencies(tmp_path, monkeypatch):
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "helpers.py").write_text("GREETING = 'hello'\n")
    (tmp_path / "agent.py").write_text(
        "from helpers import GREETING\n"
        "from tests.support.graphs import build_memory_agent\n"
        "def make(checkpointer=None):\n    return build_memory_agent(checkpointer)\n"
    )
    (tmp_path / ".env").write_text("SIGNOFF_TEST_ENV_FILE=from-dotenv\n")
    (tmp_path / "langgraph.json").write_text(
        json.dumps({"dependencies": ["./lib"], "graphs": {"helper": "./agent.py:make"}, "env": ".env"})
    )
    monkeypatch.delenv("SIGNOFF_TEST_ENV_FILE", raising=False)
    settings = Settings.from_env(
        {
            "SIGNOFF_GRAPHS_FILE": str(tmp_path / "langgraph.json"),
            "SIGNOFF_GRAPH": "tests.support.graphs:build_flaky_agent",
        }
    )

    specs = graph_specs(settings)
    graph = build_graph(specs["helper"], InMemorySaver())

    assert list(specs) == ["helper", "flaky"]
    assert default_graph(settings, specs) == "helper"
    assert os.environ["SIGNOFF_TEST_ENV_FILE"] == "from-dotenv"
    assert (
        graph.invoke({"messages": [{"role": "user", "content": "hi"}]}, {"configurable": {"thread_id": "1"}})[
            "messages"
        ][-1].content
        == "You said: hi"
    )


def test_a_graph_is_named_as_people_chose_not_after_its_factory(tmp_path, monkeypatch):
    def named(graph: str, graphs_file: str = str(tmp_path / "none.json")) -> list[str]:
        return list(
            graph_specs(Settings.from_env({"SIGNOFF_GRAPH": graph, "SIGNOFF_GRAPHS_FILE": graphs_file}))
        )

    assert named("myagent:build") == ["myagent"]  # the module, not "build"
    assert named("app/refunds.py:graph") == ["refunds"]
    assert named("tools.bot:make_graph") == ["bot"]
    assert named("signoff_demo.agent:build_demo_agent") == ["demo"]  # a name of its own
    # the key its langgraph.json gives it, once, however SIGNOFF_GRAPH spells it
    (tmp_path / "langgraph.json").write_text(json.dumps({"graphs": {"refunds": "./myagent.py:build"}}))
    monkeypatch.chdir(tmp_path)  # (myagent:build, run next to myagent.py)
    assert named("myagent:build", str(tmp_path / "langgraph.json")) == ["refunds"]


def test_a_missing_default_graph_or_module_is_a_clear_error(tmp_path):
    settings = Settings.from_env(
        {
            "SIGNOFF_GRAPHS_FILE": str(tmp_path / "none.json"),
            "SIGNOFF_DEFAULT_GRAPH": "x",
            "SIGNOFF_GRAPH": "signoff_demo.agent:build_demo_agent",
        }
    )

    with pytest.raises(GraphLoadError, match="SIGNOFF_DEFAULT_GRAPH='x' is not one of \\['demo'\\]"):
        default_graph(settings, graph_specs(settings))
    with pytest.raises(GraphLoadError, match="cannot import 'no_such_module'"):
        build_graph("no_such_module:graph", InMemorySaver())


def test_a_configured_model_drives_the_same_demo_tools(monkeypatch):
    import langchain.chat_models

    from signoff_demo import agent as demo_agent
    from signoff_demo.scripted_model import ScriptedChatModel

    asked = []

    def fake_init(spec):
        asked.append(spec)
        return ScriptedChatModel(script=demo_agent.demo_script)

    monkeypatch.setattr(langchain.chat_models, "init_chat_model", fake_init)
    monkeypatch.setenv("SIGNOFF_DEMO_MODEL", "anthropic:claude-sonnet-4-6")
    agent = demo_agent.build_demo_agent(InMemorySaver())

    paused = agent.invoke(
        {"messages": [{"role": "user", "content": "Refund order 5 for 5000"}]},
        {"configurable": {"thread_id": "m"}},
        version="v2",
    ).interrupts

    assert asked == ["anthropic:claude-sonnet-4-6"]
    assert paused[0].value["action_requests"][0]["name"] == "issue_refund"


def test_the_demo_agent_emails_the_whole_address_it_was_given():
    from signoff_demo.agent import plan

    (call,) = plan('Email ops@subsidiary.acme-corporation.example.com "numbers are in".')

    assert call["args"]["to"] == "ops@subsidiary.acme-corporation.example.com"


def test_the_demo_agent_tells_a_subagents_report_as_its_own_lines():
    from langchain_core.messages import ToolMessage

    from signoff_demo.agent import for_people

    report = "Here is what I did:\n- ❌ I did not run issue_refund; the reviewer said: too much"
    told = for_people(ToolMessage(content=report, tool_call_id="call_task", name="task"))

    assert told == "❌ I did not run issue_refund; the reviewer said: too much"  # not "✅ Here is what I did"
    rejected = "User rejected the tool call for `send_email` with id c1. with reason: not now"
    assert for_people(ToolMessage(content=rejected, tool_call_id="c1")) == (
        "❌ I did not run send_email; the reviewer said: not now"
    )
