"""What trust looks like without Redis: which calls one grant covers (`core.grants.match_of`), the
card's Approve & trust button and what it says under a quorum, and `/signoff trust`'s list."""

from __future__ import annotations

import json
from dataclasses import replace

from bot.trust import grant_blocks, offers
from bot.views.cards import CardView, approval_card
from bot.views.trust import granted_line, trust_words
from core.conditions import Call
from core.grants import Grant, match_of
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import Run, approval_for
from tests.support.files import policy_permissions

TRUSTING = (
    "[defaults]\napprovers = ['U0ALICE', 'U0BOB']\n"
    "[[rules]]\nname = 'Deploys'\ntools = ['deploy']\ntrust = '1h'\ntrust_args = ['service']\n"
    "[[rules]]\ntools = ['restart']\ntrust = '30m'\nquorum = 2\n"
    "[[rules]]\ntools = ['wipe']\n"
)


def card_of(tmp_path, name: str, requester: str | None = "U0RILEY", **args):
    permissions = policy_permissions(tmp_path, TRUSTING)
    request = PendingRequest(
        interrupt_id="i-1",
        kind=RequestKind.BATCHED,
        actions=(ActionReview(name=name, args=args, allowed_decisions=("approve", "reject")),),
    )
    approval = approval_for(
        request, Run(thread_id="t-1", graph="ops", channel="C1", requester=requester), "ops"
    )
    approval = approval.model_copy(update={"terms": permissions.terms(approval)})
    trust = offers(permissions.rules, approval)
    _, blocks = approval_card(approval, view=CardView(trust=trust))
    decide = [b.to_dict() for b in blocks if (b.block_id or "").startswith("decide:0")]
    return [e for b in decide for e in b["elements"]]


def test_one_grant_covers_only_the_same_tool_requester_graph_rule_and_compared_arguments(tmp_path):
    policy = policy_permissions(tmp_path, TRUSTING).rules
    route = policy.route("deploy")
    base = Call("deploy", {"service": "api", "version": "1"}, "U0RILEY", "C1", "ops", 0)
    same = match_of(route, base)

    assert same is not None
    assert match_of(route, replace(base, args={"service": "api", "version": "2"})) == same  # trust_args
    assert match_of(route, replace(base, args={"service": "web"})) != same
    assert match_of(route, replace(base, requester="U0DANA")) != same
    assert match_of(route, replace(base, graph="other")) != same
    assert match_of(route, replace(base, requester="")) is None  # no requester: no trust
    assert match_of(route, replace(base, args={"version": "1"})) is None  # nothing to compare
    assert match_of(policy.route("wipe"), replace(base, tool="wipe")) is None  # the rule offers none
    edited = policy_permissions(tmp_path, TRUSTING.replace("trust = '1h'", "trust = '2h'")).rules
    assert match_of(edited.route("deploy"), base) != same  # an edited rule ends its grants


def test_the_card_offers_trust_beside_approve_and_says_how_a_quorum_grants(tmp_path):
    deploy = card_of(tmp_path, "deploy", service="api")
    restart = card_of(tmp_path, "restart", service="api")

    assert [e["action_id"] for e in deploy] == ["approve:0", "trust:0", "reject:0"]
    assert deploy[1]["text"]["text"] == "Approve & trust for 1h"
    assert "confirm" not in deploy[1]  # confirmed in a modal, once the clicker may (`trust_words`)
    permissions = policy_permissions(tmp_path, TRUSTING)
    said = {}
    for name in ("deploy", "restart"):
        request = PendingRequest(
            interrupt_id="i-1",
            kind=RequestKind.BATCHED,
            actions=(
                ActionReview(name=name, args={"service": "api"}, allowed_decisions=("approve", "reject")),
            ),
        )
        approval = approval_for(
            request, Run(thread_id="t-1", graph="ops", channel="C1", requester="U0RILEY"), "ops"
        )
        approval = approval.model_copy(update={"terms": permissions.terms(approval)})
        said[name] = trust_words(approval, 0, permissions.rules.route(name))[1]
    assert "The same call (the same service) by the same requester and graph" in said["deploy"]
    assert "Several approvals" not in said["deploy"]
    assert restart[1]["text"]["text"] == "Approve & trust for 30m"
    assert "trust is granted by the approval that completes them" in said["restart"]
    assert [e["action_id"] for e in card_of(tmp_path, "wipe")] == ["approve:0", "reject:0"]
    assert [e["action_id"] for e in card_of(tmp_path, "deploy", requester=None, service="a")] == [
        "approve:0",
        "reject:0",
    ]


def grant(**changes) -> Grant:
    fields = {
        "id": "0" * 20,
        "match": "m",
        "tool": "deploy <!channel>",
        "requester": "U0RILEY",
        "graph": "ops",
        "rule": "r",
        "rule_name": "Deploys",
        "granted_by": "U0ALICE",
        "approval_id": "a",
        "index": 0,
        "compared": json.dumps({"service": "api"}),
        "approvers": "U0ALICE,U0BOB",
        "created_at": 0,
        "expires_at": 1_800_000_000_000,
        "uses": 3,
        "uses_left": 2,
    }
    return Grant(**{**fields, **changes})


def test_what_slack_is_told_of_a_grant_escapes_the_agent_s_words(tmp_path):
    line = granted_line(grant())

    assert "<!channel>" not in line and "&lt;!channel&gt;" in line
    assert line.startswith("🤝 <@U0ALICE> trusted `deploy &lt;!channel&gt;`: the same call (same service)")
    assert "at most 3 times" in line


def test_the_list_offers_revoke_to_the_granter_and_the_rule_s_approvers_only(tmp_path):
    permissions = policy_permissions(tmp_path, TRUSTING)

    def revoke_buttons(user: str) -> int:
        _, blocks = grant_blocks([grant()], user, permissions)
        return sum(
            1 for b in blocks if (b.to_dict().get("accessory") or {}).get("action_id") == "trust_revoke"
        )

    assert (revoke_buttons("U0ALICE"), revoke_buttons("U0BOB"), revoke_buttons("U0RILEY")) == (1, 1, 0)
    head, _ = grant_blocks([], "U0ALICE", permissions)
    assert head == "No trust grants you may see are live."
    _, seen = grant_blocks([grant()], "U0DANA", permissions)  # neither granter, approver nor requester
    assert seen == []
