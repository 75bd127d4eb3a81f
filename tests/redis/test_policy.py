"""The policy file: read and refused at start, and applied by the decide script as Python reads it."""

from __future__ import annotations

import uuid
from unittest.mock import patch

import pytest

from bot.permissions import Permissions
from core.conditions import Condition
from core.config import Settings, SettingsError
from core.protocol import ActionReview, Approve, PendingRequest, RequestKind
from core.records import DecisionResult, Run, approval_for
from tests.support.files import write_policy
from tests.support.paths import ROOT

EXAMPLE = ROOT / "deploy" / "signoff.toml"


def test_the_shipped_example_is_a_valid_policy():
    policy = Settings.from_env({"SIGNOFF_POLICY": str(EXAMPLE)}).policy

    refund = policy.route("issue_refund")
    assert refund.channel and refund.summary and refund.approvers
    assert policy.route("some_other_tool").rule is None


def test_every_problem_in_a_policy_file_is_one_line_naming_the_file_and_the_key(tmp_path):
    path = write_policy(
        tmp_path,
        "[defaults]\napprovers = ['S0ONCALL', 'bob']\nnotfy = 'dm'\nnotify = 'pager'\n"
        "[[rules]]\ntools = ['issue_refund', 'del ete']\nchannel = '#finance'\n"
        "summary = 'Refund {amount!r} on {order.id}'\n",
    )

    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": path})

    assert refused.value.problems == [
        f"{path}: defaults.approvers[1]: not a user id (U…, W…) or user-group id (S…) (given 'bob')",
        f"{path}: defaults.notify: not one of 'mention', 'dm' or 'none' (given 'pager')",
        f"{path}: defaults.notfy: unknown key (given 'dm')",
        f"{path}: rules[0].tools[1]: not a tool name or glob (letters, digits, _ . - and the wildcards * ?) "
        "(given 'del ete')",
        f"{path}: rules[0].channel: not a channel id (C…, G…) (given '#finance')",
        f"{path}: rules[0].summary: {{amount}}: a summary names arguments only, like {{order_id}} "
        "(given 'Refund {amount!r} on {order.id}')",
    ]


def test_a_policy_files_problems_speak_the_files_words_with_an_example_not_pydantics(tmp_path):
    path = write_policy(
        tmp_path,
        "[[rules]]\ntools = 'send_email'\ntrust = '1 day'\ntrust_args = ['bad name']\n"
        "[[rules]]\ntools = ['refund']\nrequire = 'finance'\nquorum = 'two'\n",
    )

    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": path})

    assert refused.value.problems == [
        f"{path}: rules[0].tools: a list, in square brackets: tools = [\"send_email\"] (given 'send_email')",
        f"{path}: rules[0].trust: not a duration like 90s, 30m, 2h or 7d (given '1 day')",
        f"{path}: rules[0].trust_args[0]: not an argument name: letters, digits and _, not starting with a "
        "digit, like order_id (given 'bad name')",
        f"{path}: rules[0].trust_args: no entry left that can be read: name at least one, like "
        'trust_args = ["order_id"]',
        f"{path}: rules[1].quorum: not a whole number, like 2 (given 'two')",
        f"{path}: rules[1].require: a list of tables, like require = "
        "[{ approvers = [\"S0FINANCE\"], count = 1 }] (given 'finance')",
    ]
    assert not any("should" in p or "^" in p or "tuple" in p for p in refused.value.problems)


def test_a_policy_file_that_is_not_toml_or_is_missing_is_refused(tmp_path):
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": write_policy(tmp_path, "[defaults\n")})
    assert refused.value.problems[0].startswith(f"{tmp_path}/signoff.toml: not TOML: ")

    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": str(tmp_path / "nope.toml")})
    assert refused.value.problems == [f"SIGNOFF_POLICY={str(tmp_path / 'nope.toml')!r}: no such file"]


def test_a_quorum_of_twenty_is_read_and_twenty_one_is_refused_naming_the_file_and_the_key(tmp_path):
    path = write_policy(
        tmp_path, "[defaults]\nquorum = 20\n[[rules]]\ntools = ['issue_refund']\nquorum = 20\n"
    )
    policy = Settings.from_env({"SIGNOFF_POLICY": path}).policy
    assert (policy.route("issue_refund").quorum, policy.route("send_email").quorum) == (20, 20)

    path = write_policy(
        tmp_path, "[defaults]\nquorum = 21\n[[rules]]\ntools = ['issue_refund']\nquorum = 21\n"
    )
    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": path})

    assert refused.value.problems == [
        f"{path}: defaults.quorum: at most 20 (given 21)",
        f"{path}: rules[0].quorum: at most 20 (given 21)",
    ]


def test_approvers_in_two_places_are_refused(tmp_path):
    path = write_policy(tmp_path, "[defaults]\napprovers = ['U0ALICE']\n")

    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": path, "SIGNOFF_APPROVERS": '{"*": ["U0BOB"]}'})

    assert refused.value.problems == [
        f"SIGNOFF_APPROVERS: the policy file {path} says who approves; set it there, not in both"
    ]


def test_signoff_toml_in_the_working_directory_is_read_by_default(tmp_path, monkeypatch):
    write_policy(tmp_path, "[defaults]\napprovers = ['U0ALICE']\n")
    monkeypatch.chdir(tmp_path)

    assert Settings.from_env({}).policy.route("anything").approvers == ("U0ALICE",)


def test_the_old_settings_are_the_same_policy(tmp_path):
    old = Settings.from_env(
        {
            "SIGNOFF_APPROVERS": '{"send_email": ["S0FINANCE"], "*": ["U0CAROL"]}',
            "SIGNOFF_REQUESTER_CANNOT_APPROVE": "1",
        }
    ).policy
    new = Settings.from_env(
        {
            "SIGNOFF_POLICY": write_policy(
                tmp_path,
                "[defaults]\napprovers = ['U0CAROL']\nrequester_may_approve = false\n"
                "[[rules]]\ntools = ['send_email']\napprovers = ['S0FINANCE']\n",
            )
        }
    ).policy

    assert old == new


def test_the_first_matching_rule_wins_and_rules_inherit_the_defaults(tmp_path):
    policy = Settings.from_env(
        {
            "SIGNOFF_POLICY": write_policy(
                tmp_path,
                "[defaults]\napprovers = ['S0ONCALL']\nrequester_may_approve = false\nnotify = 'dm'\n"
                "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE']\nchannel = 'C0FINANCE'\n"
                "[[rules]]\ntools = ['issue_*', 'delete*']\nrequester_may_approve = true\nnotify = 'none'\n",
            )
        }
    ).policy

    refund, delete, other = (policy.route(t) for t in ("issue_refund", "delete_file", "search"))
    assert (refund.approvers, refund.requester_may_approve, refund.notify, refund.channel, refund.rule) == (
        ("U0ALICE",),
        False,
        "dm",
        "C0FINANCE",
        0,
    )
    assert (delete.approvers, delete.requester_may_approve, delete.notify, delete.rule) == (
        ("S0ONCALL",),
        True,
        "none",
        1,
    )
    assert (other.approvers, other.rule) == (("S0ONCALL",), None)


async def test_a_person_s_gate_follows_the_rules_requester_rule_included(tmp_path, store):
    policy = Permissions(
        Settings.from_env(
            {
                "SIGNOFF_POLICY": write_policy(
                    tmp_path,
                    "[defaults]\nrequester_may_approve = false\n"
                    "[[rules]]\ntools = ['issue_*']\napprovers = ['U0ALICE']\n"
                    "[[rules]]\ntools = ['search']\nrequester_may_approve = true\n",
                )
            }
        ).policy
    )
    tools = ("issue_refund", "search", "send_email")
    approval = await waiting(store, *tools, requester="U0BOB")
    await store.deadlines.set_terms(approval, policy.terms(approval))
    approval = await store.approvals.get(approval.approval_id)

    async def in_redis(user: str) -> list[bool]:
        verdicts = [
            await store.decisions.check(approval.approval_id, i, "approve", user, policy.gate(user))
            for i in range(len(tools))
        ]
        return [v.result is DecisionResult.ALLOWED for v in verdicts]

    # (issue_refund: Alice only; search: anyone, the requester too; send_email: anyone but the requester)
    assert await in_redis("U0ALICE") == [True, True, True]
    assert await in_redis("U0BOB") == [False, True, False]  # Bob asked
    assert await in_redis("U0CAROL") == [False, True, True]
    for user in ("U0ALICE", "U0BOB", "U0CAROL"):  # the Home tab says what the decide script does
        assert [policy.may_decide(approval, i, user) for i in range(len(tools))] == await in_redis(user)


async def waiting(store, *tools: str, requester: str = "U0RILEY", args: tuple[dict, ...] = ()):
    request = PendingRequest(
        interrupt_id=uuid.uuid4().hex,
        kind=RequestKind.BATCHED,
        actions=tuple(
            ActionReview(name=t, args=args[n] if args else {"n": 1}, allowed_decisions=("approve", "reject"))
            for n, t in enumerate(tools)
        ),
    )
    run = Run(thread_id=f"t-{uuid.uuid4().hex[:8]}", graph="demo", channel="C1", requester=requester)
    approval, _ = await store.approvals.create(approval_for(request, run, "demo"))
    return approval


async def test_a_card_routed_under_an_older_policy_is_decided_by_the_policy_of_now(tmp_path, store):
    def policy_of(text: str) -> Permissions:
        return Permissions(Settings.from_env({"SIGNOFF_POLICY": write_policy(tmp_path, text)}).policy)

    older = policy_of("[[rules]]\ntools = ['send_email']\napprovers = ['U0ALICE']\n")
    newer = policy_of(
        "[[rules]]\ntools = ['delete']\napprovers = ['U0CAROL']\n[[rules]]\ntools = ['send_*']\napprovers = ['U0BOB']\n"
    )
    approval = await waiting(store, "send_email")
    await store.deadlines.set_terms(approval, older.terms(approval))  # the card went out under the older one

    alice = await store.decisions.decide(approval.approval_id, 0, Approve(), "U0ALICE", newer.gate("U0ALICE"))
    bob = await store.decisions.decide(approval.approval_id, 0, Approve(), "U0BOB", newer.gate("U0BOB"))

    assert (alice.result, bob.result) == (DecisionResult.NOT_APPROVER, DecisionResult.COMPLETE)


def test_a_when_that_is_not_cel_names_an_unknown_variable_or_gives_no_boolean_refuses_to_start(tmp_path):
    path = write_policy(
        tmp_path,
        "[[rules]]\nname = 'Large refunds'\ntools = ['issue_refund']\nwhen = 'args.amount >'\n"
        "[[rules]]\ntools = ['delete']\nwhen = 'path.startsWith(\"/tmp/\")'\n"
        "[[rules]]\nname = 'Sums'\ntools = ['add']\nwhen = 'args.a + args.b'\n"
        "[[rules]]\nname = \"two\\nlines\"\ntools = ['x']\n",
    )

    with pytest.raises(SettingsError) as refused:
        Settings.from_env({"SIGNOFF_POLICY": path})

    assert refused.value.problems == [
        f"{path}: rules[0] ('Large refunds').when: not CEL: a syntax error at '>' (column 13) "
        "(given 'args.amount >')",
        f"{path}: rules[1].when: names 'path', which is not a variable (there are args, tool, requester, "
        "channel, graph, now) (given 'path.startsWith(\"/tmp/\")')",
        f"{path}: rules[2] ('Sums').when: gives a sum, not true or false (given 'args.a + args.b')",
        f"{path}: rules[3].name: not a name: one line of at most 80 characters (given 'two\\nlines')",
    ]


async def test_each_action_is_decided_under_the_rule_its_when_chose_when_the_card_went_out(tmp_path, store):
    policy = Permissions(
        Settings.from_env(
            {
                "SIGNOFF_POLICY": write_policy(
                    tmp_path,
                    "[defaults]\napprovers = ['U0ALICE']\n"
                    "[[rules]]\nname = 'Large refunds'\ntools = ['issue_refund']\n"
                    "when = 'args.amount > 1000'\napprovers = ['U0DANA']\nquorum = 1\n"
                    "[[rules]]\ntools = ['issue_refund']\n"
                    "when = 'has(args.currency) && args.currency == \"EUR\"'\napprovers = ['U0ERIN']\n",
                )
            }
        ).policy
    )
    amounts = ({"amount": 5000}, {"amount": 20}, {"amount": 20, "currency": "EUR"})
    approval = await waiting(store, "issue_refund", "issue_refund", "issue_refund", args=amounts)
    await store.deadlines.set_terms(approval, policy.terms(approval))
    approval = await store.approvals.get(approval.approval_id)

    assert approval.terms.rules == {0: 0, 1: -1, 2: 1}  # worked out once, kept with the card
    assert [r.name for r in policy.routes(approval)] == ["Large refunds", None, None]

    async def in_redis(user: str) -> list[bool]:
        verdicts = [
            await store.decisions.check(approval.approval_id, i, "approve", user, policy.gate(user))
            for i in range(3)
        ]
        return [v.result is DecisionResult.ALLOWED for v in verdicts]

    assert await in_redis("U0DANA") == [True, False, False]
    assert await in_redis("U0ALICE") == [False, True, False]
    assert await in_redis("U0ERIN") == [False, False, True]
    for user in ("U0DANA", "U0ALICE", "U0ERIN"):  # the Home tab says what the decide script does
        assert [policy.may_decide(approval, i, user) for i in range(3)] == await in_redis(user)


async def test_a_card_of_an_older_policy_is_decided_by_the_strictest_rule_of_now_no_when_evaluated(
    tmp_path, store
):
    """A click is no place to evaluate a condition (an agent's arguments could make it last
    seconds): a card routed under another policy is decided, until then, by the strictest rule
    each of its calls could match under the policy of now."""

    def policy_of(text: str) -> Permissions:
        return Permissions(Settings.from_env({"SIGNOFF_POLICY": write_policy(tmp_path, text)}).policy)

    older = policy_of("[[rules]]\ntools = ['issue_refund']\napprovers = ['U0ALICE']\n")
    newer = policy_of(
        "[[rules]]\ntools = ['issue_refund']\nwhen = 'args.amount > 1000'\napprovers = ['U0DANA']\n"
        "[[rules]]\ntools = ['issue_refund']\napprovers = ['U0BOB']\n"  # as strict: the first one wins
    )
    approval = await waiting(store, "issue_refund", "issue_refund", args=({"amount": 5000}, {"amount": 20}))
    await store.deadlines.set_terms(approval, older.terms(approval))  # the card went out under the older one

    with patch.object(Condition, "holds", side_effect=AssertionError("evaluated on a click")):
        alice = await store.decisions.decide(
            approval.approval_id, 0, Approve(), "U0ALICE", newer.gate("U0ALICE")
        )
        bob = await store.decisions.decide(approval.approval_id, 1, Approve(), "U0BOB", newer.gate("U0BOB"))
        dana = await store.decisions.decide(
            approval.approval_id, 0, Approve(), "U0DANA", newer.gate("U0DANA")
        )
        small = await store.decisions.decide(
            approval.approval_id, 1, Approve(), "U0DANA", newer.gate("U0DANA")
        )

    assert [v.result for v in (alice, bob, dana, small)] == [
        DecisionResult.NOT_APPROVER,  # the older policy's approver: not of now
        DecisionResult.NOT_APPROVER,  # the later rule's, for the small refund: not without the `when`
        DecisionResult.RECORDED,
        DecisionResult.COMPLETE,
    ]
