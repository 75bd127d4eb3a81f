"""Who may decide what: checked on the server for every click and submission.

Anyone who can see a card can click it, so the clicker is authorised here,
by the policy file (or `SIGNOFF_APPROVERS` read as one): for each tool the
first rule whose tools match names its approvers (users U… and members of
user groups S…; none listed: anyone), and whether the person who started the
run may decide it. The policy turns a person into a `Gate`, which the
decide script in Redis applies to the action's tool in the same step that
records the decision. Group members come from the `GroupDirectory` (memory,
filled in the background), never from a Slack call on the click path; a
group that could not be fetched yet makes the answer "unknown", and the
decide script refuses such a click without writing anything.
"""

from __future__ import annotations

from collections.abc import Iterable

from agent_runner import policy_file
from agent_runner.records import UNKNOWN, Approval, Gate, GateRule, Terms
from bot.groups import GroupDirectory


class Policy:
    """The policy file's rules (`agent_runner.policy_file`), applied to people."""

    def __init__(self, rules: policy_file.Policy | None = None, directory: GroupDirectory | None = None):
        self.rules = rules or policy_file.Policy()
        self.directory = directory

    def gate(self, user: str) -> Gate:
        """What `user` may decide, per rule (True, False, or UNKNOWN while a group is not loaded)."""
        defaults = self.rules.route_of(None)
        return Gate(
            default=self._may(user, defaults.approvers),
            requester_cannot_decide=not defaults.requester_may_approve,
            default_escalated=self._escalated(user, defaults),
            default_escalate_after=defaults.escalate_after,
            rules=tuple(
                GateRule(
                    rule.tools,
                    self._may(user, route.approvers),
                    not route.requester_may_approve,
                    self._escalated(user, route),
                    route.escalate_after,
                )
                for rule, route in ((r, self.rules.route_of(r)) for r in self.rules.rules)
            ),
        )

    def terms(self, approval: Approval) -> Terms:
        """The policy's quorum, time limits, reminders and escalation for one approval."""
        start = approval.created_at
        actions = approval.request.actions
        if not actions:  # a question expires only when [questions] sets a timeout
            route = self.route("")
            limit = policy_file.seconds(self.rules.questions.timeout)
            timed = {0: limit} if limit else {}
            return Terms(
                expires_at={i: start + t for i, t in timed.items()},
                timeout=timed,
                remind_every=route.remind_every,
                escalations=_escalations([route]),
                question_answer=self.rules.questions.answer,
            )
        routes = [self.route(a.name) for a in actions]
        timed = {i: r.timeout for i, r in enumerate(routes) if r.timeout}
        return Terms(
            quorum={i: r.quorum for i, r in enumerate(routes) if r.quorum > 1},
            expires_at={i: start + t for i, t in timed.items()},
            timeout=timed,
            remind_every=min((r.remind_every for r in routes if r.remind_every), default=None),
            escalations=_escalations(routes),
        )

    def _escalated(self, user: str, route: policy_file.Route) -> bool | str:
        """Whether `user` may decide the route's tools once its escalation happened."""
        if not route.escalate_after or not route.escalate_to:
            return False
        return _gate_value(self.member(user, route.escalate_to))

    def route(self, tool: str) -> policy_file.Route:
        return self.rules.route(tool)

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


def _escalations(routes: list[policy_file.Route]) -> dict[int, tuple[str, ...]]:
    """Each rule's escalation, by when: a batch mixing rules escalates each at its own time."""
    levels: dict[int, dict[str, None]] = {}
    for route in routes:
        if route.escalate_after and route.escalate_to:
            levels.setdefault(route.escalate_after, {}).update(dict.fromkeys(route.escalate_to))
    return {after: tuple(ids) for after, ids in sorted(levels.items())}


def _gate_value(member: bool | None) -> bool | str:
    return UNKNOWN if member is None else member
