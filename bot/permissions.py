"""Who may decide what: checked on the server for every click and submission.

Anyone who can see a card can click it, so the clicker is authorised here,
by the policy file (or `SIGNOFF_APPROVERS` read as one): for each call the
first rule whose tools match and whose `when` holds names its approvers (users
U… and members of user groups S…; none listed: anyone), and whether the person
who started the run may decide it. The policy turns a person into a `Gate`, which the
decide script in Redis applies in the same step that records the decision.

The rules are matched once, not per click: when a card goes out its terms
remember which rule of which policy (a fingerprint) routed each action, and a
person's gate says what they may do under each rule (one character per rule,
built once per person and kept until group memberships change). So a click
costs the same with 3,000 rules as with 3. Everything else Signoff says of a
card (its approvers, who is notified, refusals, the Home tab) reads the same
stored rules (`routes`). A card routed under an older policy is decided by the
live policy's answer for its calls.

Group members come from the `GroupDirectory` (memory, filled in the
background), never from a Slack call on the click path; a group that could not
be fetched yet makes the answer "unknown", and the decide script refuses such
a click without writing anything. Escalations are taken from the card's terms:
whoever the escalation notice told may decide, may.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Iterable
from typing import Any

from bot.groups import GroupDirectory
from core import policy_file
from core.condition_process import ConditionProcess
from core.conditions import verdicts
from core.protocol import RequestKind
from core.records import UNKNOWN, Approval, Gate, Terms, rule_of, rules_of
from core.routes import Match, Route

CACHED_GATES = 10_000  # people whose gate is kept (a workspace's approvers, many times over)


class Permissions:
    """The policy file's rules (`core.policy_file`), applied to people."""

    def __init__(
        self,
        rules: policy_file.PolicyFile | None = None,
        directory: GroupDirectory | None = None,
        conditions: ConditionProcess | None = None,
    ):
        self.rules = rules or policy_file.PolicyFile()
        self.directory = directory
        self.conditions = conditions  # where `when`s are evaluated (None: in this process)
        self._gates: dict[str, tuple[int, float, Gate]] = {}  # user -> (directory version, until, gate)
        # Read once per policy, so a person's gate costs what names them, not every rule: what
        # each rule grants anyone ("T": it names nobody, "F" otherwise), the rules naming each
        # id (a person, or a group), and whether each rule bars the requester.
        routes = self.rules.routes
        self._anyone = "".join("F" if route.approvers else "T" for route in routes)
        self._naming: dict[str, list[int]] = {}
        for n, route in enumerate(routes):
            for slack_id in dict.fromkeys(route.approvers):
                self._naming.setdefault(slack_id, []).append(n)
        self._barred = "".join("0" if route.requester_may_approve else "1" for route in routes)

    def gate(self, user: str) -> Gate:
        """What `user` may decide under each rule (True, False, or UNKNOWN while a group is not
        loaded), built once per person until group memberships change (or a group it read
        turns unreadable)."""
        version = self.directory.version if self.directory else 0
        cached = self._gates.get(user)
        if cached is not None and cached[0] == version and time.time() < cached[1]:
            return cached[2]
        gate = self._gate(user)
        if len(self._gates) >= CACHED_GATES:
            self._gates.clear()
        until = self.directory.fresh_until() if self.directory else float("inf")
        self._gates[user] = (version, until, gate)
        return gate

    def _gate(self, user: str) -> Gate:
        groups = self.directory.groups if self.directory else []
        members = {group: self.directory.members(group) for group in groups} if self.directory else {}
        routes = bytearray(self._anyone, "ascii")
        for group in (g for g in self._naming if g.startswith("S")):  # a group not read yet: unknown
            found = members.get(group, frozenset()) if self.directory else frozenset()
            for n in self._naming[group] if found is None else ():
                routes[n] = ord("U")  # (a rule naming the person, or a group they are in, wins below)
        ids = [user, *(g for g, m in members.items() if m is not None and user in m)]
        for slack_id in ids:
            for n in self._naming.get(slack_id, ()):
                routes[n] = ord("T")
        defaults = self.rules.default_route
        return Gate(
            default=self._may(user, defaults.approvers),
            requester_cannot_decide=not defaults.requester_may_approve,
            policy=self.rules.fingerprint,
            routes=routes.decode("ascii"),
            routes_barred=self._barred,
            ids=frozenset(ids),
            unknown=frozenset(g for g, m in members.items() if m is None),
            for_action=lambda approval, index: self.action_gate(user, approval, index),
        )

    def action_gate(self, user: str, approval: Approval, index: int) -> Gate:
        """`user`'s gate answering for action `index` by the live policy's rule for its call: for
        a card of another policy."""
        actions = approval.request.actions
        tool = actions[index].name if actions else approval.request.tool_name
        route = self.route_of(approval, index if actions else 0)
        return dataclasses.replace(
            self.gate(user),
            policy="",
            tools={tool: self._may(user, route.approvers)},
            barred_tools={tool: not route.requester_may_approve},
            for_action=None,
        )

    def routes(self, approval: Approval) -> list[Route]:
        """Each action's route (a question's: one), by the rule its card went out with."""
        return [self.rules.route_at(n) for n in rules_of(approval, self.rules)]

    def route_of(self, approval: Approval, index: int) -> Route:
        """Action `index`'s route (a question's: 0), by the rule its card went out with."""
        return self.rules.route_at(rule_of(approval, self.rules, index))

    def may_decide(self, approval: Approval, index: int, user: str) -> bool:
        """Whether `user` may decide action `index` now (as the decide script would let them),
        for what Signoff shows: the approvers of the action's rule, the card's escalation."""
        route = self.route_of(approval, index if approval.request.actions else 0)
        if not route.requester_may_approve and approval.requester == user:
            return False
        if self._may(user, route.approvers) is True:
            return True
        terms = approval.terms
        after = terms.escalate_after.get(index) if terms else None
        if terms is None or after is None or after not in approval.escalated:
            return False
        return self.member(user, terms.escalate_to.get(index, ())) is True

    async def matches(self, approval: Approval) -> list[Match]:
        """Which rule applies to each call of `approval` (a question: one), its `when`s evaluated
        in the condition process (`core.condition_process`: off the event loop, within a time
        budget), or here when there is none (tests, tools)."""
        calls = approval.calls()
        if approval.request.kind is RequestKind.ELICITATION:  # no arguments to read: no `when` runs
            return [self.rules.closed_match(call, policy_file.NO_ARGUMENTS) for call in calls]
        request = [(self.rules.conditions(call.tool), call) for call in calls]
        if self.conditions is None:
            found = [verdicts(conditions, call) for conditions, call in request]
        else:
            found = await self.conditions.verdicts(request)
        return [self.rules.match(call, verdict) for call, verdict in zip(calls, found, strict=True)]

    def terms(self, approval: Approval, matches: list[Match] | None = None) -> Terms:
        """The policy's quorum, time limits, reminders and escalation for one approval, and
        which rule routed each action (under this policy's fingerprint), given `matches`
        (worked out here, in this process, when not given)."""
        start = approval.created_at
        actions = approval.request.actions
        fingerprint = self.rules.fingerprint
        if matches is None:
            closed = approval.request.kind is RequestKind.ELICITATION  # (no arguments: fail closed)
            matches = [
                self.rules.closed_match(c) if closed else self.rules.match(c) for c in approval.calls()
            ]
        rules = [found.rule for found in matches]  # once: its `when`s saw the calls
        unread = {index: found.failed for index, found in enumerate(matches) if found.failed}
        routes = [self.rules.route_at(n) for n in rules]
        one_answer: Any = dict(policy=fingerprint, rules={0: rules[0]}, approvers={0: routes[0].approvers})
        if approval.request.kind is RequestKind.ELICITATION:  # its tool's rule; one answer, no quorum
            timed = {0: routes[0].timeout} if routes[0].timeout else {}
            return Terms(
                expires_at={i: start + t for i, t in timed.items()},
                timeout=timed,
                remind_every=routes[0].remind_every,
                escalations=_escalations(routes),
                **_escalation_of(routes),
                **one_answer,
                unread=unread,
            )
        if not actions:  # a question expires only when [questions] sets a timeout
            route = routes[0]
            limit = policy_file.seconds(self.rules.questions.timeout)
            timed = {0: limit} if limit else {}
            return Terms(
                expires_at={i: start + t for i, t in timed.items()},
                timeout=timed,
                remind_every=route.remind_every,
                escalations=_escalations([route]),
                **_escalation_of([route]),
                question_answer=self.rules.questions.answer,
                **one_answer,
                unread=unread,
            )
        timed = {i: r.timeout for i, r in enumerate(routes) if r.timeout}
        return Terms(
            quorum={i: _needed(r) for i, r in enumerate(routes) if _needed(r) > 1},
            require={i: r.require for i, r in enumerate(routes) if r.require},
            expires_at={i: start + t for i, t in timed.items()},
            timeout=timed,
            remind_every=min((r.remind_every for r in routes if r.remind_every), default=None),
            escalations=_escalations(routes),
            **_escalation_of(routes),
            policy=fingerprint,
            rules=dict(enumerate(rules)),
            approvers={i: r.approvers for i, r in enumerate(routes)},
            unread=unread,
            reveal=tuple(i for i, r in enumerate(routes) if r.reveal and actions[i].hidden),
            step_up=tuple(i for i, r in enumerate(routes) if r.step_up),
            step_up_trust=tuple(i for i, r in enumerate(routes) if r.step_up_trust and r.trust),
        )

    def _may(self, user: str, approvers: tuple[str, ...]) -> bool | str:
        return True if not approvers else _gate_value(self.member(user, approvers))

    def member(self, user: str, ids: Iterable[str]) -> bool | None:
        """Whether `user` is one of `ids`, directly or through a user group (S…); None if unknown."""
        ids = tuple(ids)
        if user in ids:
            return True
        unknown = False
        for group in (i for i in ids if i.startswith("S")):
            members = self.directory.members(group) if self.directory else frozenset()
            if members is None:
                unknown = True
            elif user in members:
                return True
        return None if unknown else False


def _needed(route: Route) -> int:
    """Distinct approvals an action of `route` needs: its quorum, or its entries' counts."""
    return route.approvals_needed


def _escalations(routes: list[Route]) -> dict[int, tuple[str, ...]]:
    """Each rule's escalation, by when: a batch mixing rules escalates each at its own time."""
    levels: dict[int, dict[str, None]] = {}
    for route in routes:
        if route.escalate_after and route.escalate_to:
            levels.setdefault(route.escalate_after, {}).update(dict.fromkeys(route.escalate_to))
    return {after: tuple(ids) for after, ids in sorted(levels.items())}


def _escalation_of(routes: list[Route]) -> dict[str, Any]:
    """Per action: its rule's escalation (when) and who may decide it once escalated."""
    escalating = [(i, r) for i, r in enumerate(routes) if r.escalate_after and r.escalate_to]
    return {
        "escalate_after": {i: r.escalate_after for i, r in escalating},
        "escalate_to": {i: r.escalate_to for i, r in escalating},
    }


def _gate_value(member: bool | None) -> bool | str:
    return UNKNOWN if member is None else member
