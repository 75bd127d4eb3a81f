"""A policy rule's `when` (CEL): checked when the policy loads, evaluated on one call, never
deciding anything when it fails."""

from __future__ import annotations

import dataclasses
import datetime
import hashlib
import textwrap
from pathlib import Path

import pytest

from core import policy_file
from core.conditions import Call, ConditionFailed, compiled
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import Run, approval_for
from tests.support.files import write_policy
from tests.support.paths import ROOT


@pytest.mark.parametrize(
    "when",
    [
        "args.amount > 1000",
        'args.path.startsWith("/tmp/")',
        "args.lines.exists(line, line.size() > 80)",
        "has(args.urgent) ? args.urgent : false",
        "args.flag",  # known only per call: a call where it is not a boolean does not apply
        'tool in ["delete", "drop"] && requester != "U0BOT" && channel == "C0OPS" && graph == "demo"',
        'now > timestamp("2024-01-01T00:00:00Z") && now.getHours() < 18',
        "type(args.amount) == int",
    ],
)
def test_a_condition_in_cel_on_the_call_compiles(when):
    assert compiled(when).source == when


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        ("args.amount >", "not CEL: a syntax error at '>' (column 13)"),
        (
            "amount > 1000",
            "names 'amount', which is not a variable (there are args, tool, requester, channel, graph, now)",
        ),
        ("line.size() > 1 && args.lines.exists(line, true)", "names 'line', which is not a variable"),
        ('args.name.lowerAscii() == "x"', "calls lowerAscii(), which Signoff's CEL does not have"),
        ("args.a.exists(x, args.b.exists(y, x == y))", "exists() inside another macro: its work grows"),
        ("args.amount + 1", "gives a sum, not true or false"),
        ("size(args)", "gives a number, not true or false"),
        ('"yes"', "gives text, not true or false"),
        ("args.ok ? 1 : 0", "gives a number, not true or false"),
        ("args.items.filter(x, x > 1)", "gives a list, not true or false"),
    ],
)
def test_a_condition_that_does_not_compile_names_an_unknown_name_or_is_no_boolean_is_refused(when, problem):
    with pytest.raises(ValueError) as refused:
        compiled(when)
    assert str(refused.value).startswith(problem)


def test_a_condition_nested_past_what_can_be_read_is_refused_in_one_line():
    with pytest.raises(ValueError, match="^nested too deeply to read$"):
        compiled("(" * 300 + "true" + ")" * 300)


def test_a_condition_says_true_or_false_for_a_call_and_fails_on_a_call_it_cannot_read():
    large = compiled("args.amount > 1000")

    assert large.holds(Call("issue_refund", {"amount": 5000})) is True
    assert large.holds(Call("issue_refund", {"amount": 1000.5})) is True
    assert large.holds(Call("issue_refund", {"amount": 20})) is False
    with pytest.raises(ConditionFailed, match="^the call has no 'amount'$"):
        large.holds(Call("issue_refund", {}))
    with pytest.raises(ConditionFailed, match="^`>` cannot take text and a whole number$"):
        large.holds(Call("issue_refund", {"amount": "lots"}))
    with pytest.raises(ConditionFailed, match="^`>` cannot take a list and a whole number$"):
        large.holds(Call("issue_refund", {"amount": [5000]}))
    with pytest.raises(ConditionFailed, match="gave int, not true or false"):
        compiled("args.flag").holds(Call("t", {"flag": 3}))
    with pytest.raises(ConditionFailed, match="arguments over 256,000 characters"):
        large.holds(Call("issue_refund", {"amount": 5000, "note": "x" * 300_000}))


# A Friday, 17:30 UTC: each variable of the call below has a value no other one has.
FRIDAY_1730 = datetime.datetime(2026, 3, 6, 17, 30, tzinfo=datetime.UTC).timestamp()
DEPLOY_CALL = Call("deploy", {"env": "prod"}, "U0RILEY", "C0OPS", "billing", FRIDAY_1730)


@pytest.mark.parametrize(
    ("when", "other"),
    [
        ('requester == "U0RILEY"', {"requester": "U0DANA"}),
        ('requester in ["U0INTERN", "U0RILEY"]', {"requester": "C0OPS"}),
        ('channel == "C0OPS"', {"channel": "C0FINANCE"}),
        ('graph == "billing"', {"graph": "demo"}),
        ('tool == "deploy"', {"tool": "drop_table"}),
        ('tool.startsWith("dep")', {"tool": "drop_table"}),
        ('now == timestamp("2026-03-06T17:30:00Z")', {"now": FRIDAY_1730 + 1}),
        ("now.getDayOfWeek() == 5 && now.getHours() == 17", {"now": FRIDAY_1730 + 86_400}),
        ("now.getDayOfWeek() == 5 && now.getHours() == 17", {"now": FRIDAY_1730 - 3_600}),
    ],
)
def test_a_condition_reads_the_call_s_requester_channel_graph_tool_and_time(when, other):
    """Each variable is bound to its own part of the call: a rule on the requester never reads
    the channel (or anything else), and `now` is when the approval was created."""
    condition = compiled(when)

    assert condition.holds(DEPLOY_CALL) is True
    assert condition.holds(dataclasses.replace(DEPLOY_CALL, **other)) is False


def test_a_rule_on_the_requester_routes_that_requester_s_calls_and_no_one_else_s(tmp_path):
    policy = policy_file.load(
        Path(
            write_policy(
                tmp_path,
                "[defaults]\nfallthrough = 'deliberate'\n"  # (anyone decides what the rules leave)
                "[[rules]]\nname = 'Interns'\ntools = ['deploy']\nwhen = 'requester == \"U0INTERN\"'\n"
                "approvers = ['U0LEAD']\n"
                "[[rules]]\nname = 'Ops channel'\ntools = ['deploy']\nwhen = 'channel == \"C0OPS\"'\n"
                "approvers = ['U0ALICE']\n",
            )
        )
    )
    request = PendingRequest(
        interrupt_id="i-1",
        kind=RequestKind.BATCHED,
        actions=(ActionReview(name="deploy", args={"env": "prod"}, allowed_decisions=("approve",)),),
    )

    def rule(requester: str, channel: str) -> int:
        run = Run(thread_id="t-1", graph="billing", channel=channel, requester=requester)
        (call,) = approval_for(request, run, "billing").calls()
        return policy.rule_for(call)

    assert rule("U0INTERN", "C0OPS") == 0
    assert rule("U0RILEY", "C0OPS") == 1
    assert rule("U0RILEY", "C0OTHER") == -1  # [defaults]


def test_the_first_rule_whose_tools_match_and_whose_when_holds_applies(tmp_path, monkeypatch):
    told: list[dict] = []
    monkeypatch.setattr(policy_file.log, "warning", lambda event, **kw: told.append({"event": event, **kw}))
    policy = policy_file.load(
        Path(
            write_policy(
                tmp_path,
                "[defaults]\nfallthrough = 'deliberate'\n"
                "[[rules]]\nname = 'Refunds in euros'\ntools = ['issue_refund']\nwhen = 'args.currency == \"EUR\"'\n"
                "approvers = ['U0ERIN', 'U0FRED']\nquorum = 2\n"
                "[[rules]]\nname = 'Large refunds'\ntools = ['issue_*']\nwhen = 'args.amount > 1000'\n"
                "channel = 'C0FINANCE'\napprovers = ['U0DANA']\n"
                "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE']\nfallthrough = 'deliberate'\n"
                "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0NEVER']\n",  # never reached
            )
        )
    )

    def rule(**args) -> int:
        return policy.rule_for(Call("issue_refund", args))

    assert rule(amount=5000, currency="EUR") == 0
    assert rule(amount=5000, currency="USD") == 1
    assert rule(amount=10, currency="USD") == 2
    assert policy.rule_for(Call("issue_credit", {"amount": 10})) == -1  # [defaults]
    assert policy.candidates("issue_refund") == (0, 1, 2)  # the rule past one without `when`: never

    # no currency: the first rule cannot read the call; it fails closed, to the strictest rule the
    # call could have matched (the euros rule: two approvals), and is said once
    assert [rule(amount=5000), rule(amount=7000), rule(amount=10)] == [0, 0, 0]
    assert policy.match(Call("issue_refund", {"amount": 10})).failed == (
        "Refunds in euros: the call has no 'currency'"
    )
    assert told == [
        {
            "event": "policy_condition_failed",
            "rule": "rules[0]",
            "name": "Refunds in euros",
            "when": 'args.currency == "EUR"',
            "tool": "issue_refund",
            "problem": "the call has no 'currency'",
        }
    ]
    assert policy.route_at(1).name == "Large refunds" and policy.route_at(1).channel == "C0FINANCE"


def test_a_condition_sees_each_action_as_the_approval_was_created():
    request = PendingRequest(
        interrupt_id="i-1",
        kind=RequestKind.BATCHED,
        actions=(
            ActionReview(name="issue_refund", args={"amount": 5000}, allowed_decisions=("approve",)),
            ActionReview(name="delete", args={"path": "/tmp/x"}, allowed_decisions=("approve",)),
        ),
    )
    run = Run(thread_id="t-1", graph="demo", channel="C0OPS", requester="U0RILEY")
    approval = approval_for(request, run, "demo")

    assert approval.calls() == [
        Call("issue_refund", {"amount": 5000}, "U0RILEY", "C0OPS", "demo", approval.created_at),
        Call("delete", {"path": "/tmp/x"}, "U0RILEY", "C0OPS", "demo", approval.created_at),
    ]
    question = approval.model_copy(
        update={"request": PendingRequest(interrupt_id="i-2", kind=RequestKind.QUESTION, question="why?")}
    )
    assert question.calls() == [Call("", {}, "U0RILEY", "C0OPS", "demo", approval.created_at)]


def test_a_policy_without_when_or_name_keeps_its_fingerprint_so_waiting_cards_keep_their_rules():
    rules = [{"tools": ["issue_refund"], "approvers": ["U0ALICE"], "summary": "Refund {amount} — now"}]
    policy = policy_file.PolicyFile.model_validate({"defaults": {"approvers": ["S0ONCALL"]}, "rules": rules})
    later_keys = {
        "name",
        "when",
        "decide",
        "message",
        "require",
        "trust",
        "trust_args",
        "trust_uses",
        "trust_scope",
        "fallthrough",
        "redact",
        "reveal",
        "step_up",
        "step_up_trust",
    }
    # (the old dump: without the keys rules and [defaults] took since)
    as_before = policy.model_dump_json(
        exclude={
            "rules": {"__all__": later_keys},
            "defaults": {"fallthrough", "redact", "reveal", "step_up", "step_up_trust"},
        }
    )

    assert policy.fingerprint == hashlib.sha256(as_before.encode()).hexdigest()[:16]
    named = policy_file.PolicyFile.model_validate({"rules": [{**rules[0], "name": "Refunds"}]})
    assert named.fingerprint != policy_file.PolicyFile.model_validate({"rules": rules}).fingerprint


def test_the_readme_s_policy_example_says_what_its_sentence_says(tmp_path):
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    snippet = readme.split("```toml\n", 1)[1].split("```", 1)[0]
    policy = policy_file.load(Path(write_policy(tmp_path, snippet)))

    large, small, between = (policy.rule_for(Call("issue_refund", {"amount": n})) for n in (5000, 50, 500))

    assert large == 0 and small == 1 and between == 2  # 101..1000: one of finance
    assert policy.rule_for(Call("issue_refund", {"amount": -5})) == 2  # (what the `when`s said no to)
    assert [(r.name, r.count) for r in policy.rules[0].require or ()] == [("Finance", 1), ("Security", 1)]
    assert policy.routes[small].decide == "approve"
    deploy = policy.route("deploy")
    assert deploy.trust == 3_600 and deploy.trust_args is None and deploy.trust_uses is None


def test_the_readme_s_agent_snippet_pauses_before_its_marked_tool(tmp_path):
    """Step 1 of "Put your own agent behind Signoff": the code, as printed, makes an agent that
    pauses before issue_refund, on its own fake model or on the one it is given."""
    from langchain_core.messages import AIMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from agent_runner.graphs import load_target
    from signoff_demo.scripted_model import ScriptedChatModel, tool_call

    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text()
    code = textwrap.dedent(readme.split("```python\n", 1)[1].split("```", 1)[0])  # (in a list item)
    assert code.startswith("# myagent.py\n")
    (tmp_path / "myagent.py").write_text(code)
    build = load_target(f"{tmp_path / 'myagent.py'}:build")
    call = tool_call("issue_refund", {"order_id": 7, "amount": 70}, "c1")
    given = build(model=ScriptedChatModel(turns=[AIMessage(content="", tool_calls=[call])]))

    for agent, amount in ((build(), 5000), (given, 70)):
        paused = agent.copy(update={"checkpointer": InMemorySaver()}).invoke(
            {"messages": [("user", "refund it")]}, {"configurable": {"thread_id": "t"}}
        )
        (interrupt,) = paused["__interrupt__"]
        (asked,) = interrupt.value["action_requests"]
        assert (asked["name"], asked["args"]["amount"]) == ("issue_refund", amount)


# Failing closed, never weaker ---------------------------------------------------------------

SHIPPED_POLICIES = [ROOT / "signoff_demo" / "signoff.toml", ROOT / "deploy" / "signoff.toml"]


@pytest.mark.parametrize("path", SHIPPED_POLICIES, ids=lambda p: p.parent.name)
@pytest.mark.parametrize("amount", ["50000", 2**63, [50000], float("nan"), float("inf"), None], ids=repr)
def test_a_refund_no_condition_can_read_goes_to_the_strictest_refund_rule_of_each_shipped_policy(
    path, amount
):
    # (as sent, when no tool schema converted it: an Agent Server's graph)
    policy = policy_file.load(path)
    found = policy.match(Call("issue_refund", {"order_id": "1", "amount": amount}))

    assert policy.rule_label(found.rule) == "Large refunds"  # the most approvals, #finance
    assert found.failed.startswith("Large refunds: ")


@pytest.mark.parametrize("path", SHIPPED_POLICIES, ids=lambda p: p.parent.name)
def test_a_negative_refund_is_not_approved_by_a_shipped_policy(path):
    policy = policy_file.load(path)
    rule = policy.rule_for(Call("issue_refund", {"order_id": "1", "amount": -50000}))

    assert policy.rule_label(rule) == "Other refunds" and policy.route_at(rule).decide == "reject"


@pytest.mark.parametrize(
    ("stricter", "weaker"),
    [
        ("approvers = ['U0A']", "decide = 'approve'"),
        ("approvers = ['U0A', 'U0B']\nquorum = 2", "approvers = ['U0A']"),
        (
            "require = [{ approvers = ['S0FIN'], count = 1 }, { approvers = ['S0SEC'], count = 1 }]",
            "approvers = ['U0A']",
        ),
        ("approvers = ['U0A']", "approvers = []"),
        ("approvers = ['U0A']\nrequester_may_approve = false", "approvers = ['U0A']"),
    ],
)
def test_a_when_that_cannot_read_a_call_sends_it_to_the_stricter_rule_whichever_comes_first(
    tmp_path, stricter, weaker
):
    def policy(first: str, second: str):
        return policy_file.load(
            Path(
                write_policy(
                    tmp_path,
                    "[defaults]\nrequester_may_approve = true\n"
                    f"[[rules]]\ntools = ['t']\nwhen = 'args.x > 1'\n{first}\n"
                    f"[[rules]]\ntools = ['t']\n{second}\nfallthrough = 'deliberate'\n",
                )
            )
        )

    unreadable = Call("t", {"x": "2"})
    assert policy(stricter, weaker).match(unreadable).rule == 0
    assert policy(weaker, stricter).match(unreadable).rule == 1
    assert policy(stricter, weaker).match(Call("t", {"x": 0})).rule == 1  # read: the `when` said no


def test_a_weaker_rule_catching_what_a_when_says_no_to_is_refused_at_start_naming_both_unless_deliberate(
    tmp_path,
):
    large = (
        "[defaults]\napprovers = ['U0ALICE', 'U0DANA']\nquorum = 2\n"
        "[[rules]]\nname = 'Large refunds'\ntools = ['issue_refund']\nwhen = 'args.amount > 1000'\n"
        "approvers = ['U0ALICE', 'U0DANA']\nquorum = 2\n"
    )
    path = tmp_path / "signoff.toml"

    def problems(text: str) -> list[str]:
        try:
            policy_file.load(Path(write_policy(tmp_path, text)))
        except policy_file.PolicyError as refused:
            return [p.removeprefix(f"{path}: ") for p in refused.problems]
        return []

    weaker = "[[rules]]\nname = 'Small refunds'\ntools = ['issue_*']\ndecide = 'approve'\n"
    assert problems(large + weaker) == [
        '"Small refunds" catches every call the `when` of "Large refunds" above it says no to, and approves '
        'by itself: give it a `when` of its own (an allow-list), or set fallthrough = "deliberate" on it'
    ]
    assert problems(large + weaker + "fallthrough = 'deliberate'\n") == []
    assert (
        problems(large + weaker.replace("decide", "when = 'args.amount > 0'\ndecide")) == []
    )  # an allow-list
    # globs that overlap without matching each other, and a catch-all hidden behind a narrower one
    assert (
        len(
            problems(large.replace("['issue_refund']", "['issue_*']") + weaker.replace("issue_*", "*_refund"))
        )
        == 1
    )
    hidden = large.replace("['issue_refund']", "['issue_refund', 'wire_transfer']") + (
        "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE', 'U0DANA']\nquorum = 2\n"
        "[[rules]]\nname = 'Wires'\ntools = ['wire_transfer']\ndecide = 'approve'\n"
    )
    assert problems(hidden) == [
        '"Wires" catches every call the `when` of "Large refunds" above it says no to, and approves by itself: '
        'give it a `when` of its own (an allow-list), or set fallthrough = "deliberate" on it'
    ]
    # no rule below takes what the `when` said no to: [defaults] does, and it is weaker
    assert problems(large.replace("quorum = 2\n[[rules]]", "quorum = 1\n[[rules]]", 1)) == [
        '[defaults] catches every issue_refund call the `when` of "Large refunds" says no to (no rule without '
        "`when` below it takes them), and needs 1 approval, not 2: end with a rule for issue_refund as strict "
        'as you mean, or set fallthrough = "deliberate" in [defaults]'
    ]
    assert (
        problems(
            large.replace("quorum = 2\n[[rules]]", "quorum = 1\nfallthrough = 'deliberate'\n[[rules]]", 1)
        )
        == []
    )


@pytest.mark.parametrize(
    ("when", "problem"),
    [
        ("args.tags.all(t, t in args.allowed)", "in inside a macro: its work grows with the product"),
        ("args.tags.exists(t, args.text.contains(t))", "contains() inside a macro"),
        ('args.tags.all(t, t.matches("^a"))', "matches() inside a macro"),
        ('args.tags.all(t, matches(t, "^a"))', "matches() inside a macro"),
    ],
)
def test_work_that_grows_with_two_sizes_inside_a_macro_is_refused_at_start(when, problem):
    with pytest.raises(ValueError) as refused:
        compiled(when)
    assert str(refused.value).startswith(problem)


def test_linear_work_inside_a_macro_and_in_at_the_top_compile():
    for when in ('args.tags.all(t, t.startsWith("a"))', '"x" in args.tags', 'args.to.matches("^a$")'):
        assert compiled(when).source == when


def test_a_call_over_the_value_bound_or_with_a_number_that_is_not_finite_is_not_evaluated():
    condition = compiled("args.amount > 1000")
    with pytest.raises(ConditionFailed, match="^arguments of over 5,000 values are not evaluated$"):
        condition.holds(Call("t", {"amount": 5, "tags": list(range(5_000))}))
    for amount in (float("nan"), float("inf"), -float("inf")):
        with pytest.raises(ConditionFailed, match="is never compared$"):
            condition.holds(Call("t", {"amount": amount}))
        with pytest.raises(ConditionFailed):
            compiled("args.amount <= 1000").holds(Call("t", {"amount": amount}))
