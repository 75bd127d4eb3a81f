"""The approval policy: who decides which tool calls, where their cards go, how people hear.

`SIGNOFF_POLICY` names a TOML file (default `signoff.toml` in the working
directory, when there is one):

    [defaults]
    approvers = ["S0ONCALL"]     # user ids U…/W… and user-group ids S…; empty: anyone
    requester_may_approve = false
    notify = "mention"           # "mention", "dm" or "none"

    [[rules]]                    # the first rule whose tools match and whose `when` holds wins
    name = "Large refunds"       # what the card calls the rule
    tools = ["issue_refund", "delete*"]
    when = 'args.amount > 1000'  # a CEL condition on the call (core.conditions)
    approvers = ["U0ALICE", "S0FINANCE"]
    channel = "C0FINANCE"        # the card goes there; the run's thread links to it
    summary = "Refund {amount} on order {order_id}"
    timeout = "2h"               # undecided after 2h: rejected (fail closed), never approved
    remind_every = "30m"         # the approvers are notified again while it waits
    escalate_after = "1h"        # then these may decide too, and are notified
    escalate_to = ["S0LEADS"]
    quorum = 2                   # distinct approvers needed to approve
    trust = "1h"                 # adds "Approve & trust for 1h": the same call again runs unasked
    trust_args = ["order_id"]    # (what "the same call" compares: these arguments; default all)
    trust_uses = 5               # (a grant lets at most this many calls through; default no cap)
    trust_scope = "anywhere"     # (where a grant holds; default "channel": the run's channel only)
    redact = ["args.customer.card_number"]  # hidden from Slack and logs, as a detected secret is
    reveal = true                # an approver may open "Show secret values" (audited)
    step_up = "passkey"          # Approve needs the approver's passkey on Signoff's page (bot.passkeys)
    step_up_trust = "passkey"    # so does Approve & trust (granting trust), whatever step_up says
    # or, instead of approvers and quorum: every entry met by distinct people
    # require = [{ name = "Finance", approvers = ["S0FIN"], count = 1 },
    #            { approvers = ["S0SEC"], count = 1 }]

    [[rules]]                    # decided by the policy, with no card: "approve" or "reject"
    tools = ["lookup_order"]
    decide = "approve"           # (`message`: what the agent is told of a reject)

    [questions]                  # a plain interrupt(value) expires only when this sets a timeout
    timeout = "4h"
    answer = "No one answered in time; carry on without an answer."

Durations are a whole number and a unit: `90s`, `30m`, `2h`, `7d`. Unset:
no time limit, no reminder, no escalation, quorum 1.

A rule with `decide` asks no one: each call it routes is decided as it says (an
approval record and an audit entry with outcome "auto" naming the rule, one line in
the run's thread), unless the action does not allow that decision: then it is asked
of `[defaults]`' approvers, and logged. `[defaults]` never decides.

A rule with `trust` adds **Approve & trust for <trust>** beside Approve: the approval that
decides the call (with a quorum or `require`, the one that completes it) also grants that
later calls of the same tool, by the same requester and graph, routed by the same rule, with
the same arguments (`trust_args`: the same values of those only) are approved with no card,
until the grant expires or is used `trust_uses` times (`core.grants`).

A rule leaves out what it does not change: it inherits `[defaults]`. Every
key is checked at start (an unknown key, a wrong type, a pattern that is not
a tool name or glob, a summary naming anything but an argument, a `when` that
is not CEL, names an unknown variable or cannot give true or false) and the
process refuses to start, naming the file, the key (and the rule's name) and
the problem. Which rule applies to an action is worked out once, when its card
goes out (`rule_for`: its `when` sees the call), and kept with the card's
terms; a `when` that fails on a call (a missing argument) does not apply,
and is logged once per rule and cause. Without
a file, `SIGNOFF_APPROVERS` and `SIGNOFF_REQUESTER_CANNOT_APPROVE` are read
as an implicit policy of the same shape.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import json
import string
import tomllib
from functools import cached_property
from pathlib import Path
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StringConstraints,
    ValidationError,
    field_validator,
    model_validator,
)

from core.approval_requirements import ApproverId, Quorum, Requirement, RuleName, require_alone
from core.conditions import Call, Condition, Verdict, compiled, verdicts
from core.logs import get_logger
from core.policy_errors import problem as _problem
from core.routes import Match, Route, route_fingerprint, tools_cover, tools_overlap, weaker_words
from core.secrets import Redaction

log = get_logger("policy")

ChannelId = Annotated[str, StringConstraints(pattern=r"^[CGD][A-Z0-9]{2,32}$")]
# Tool names with * (any run of characters) and ? (one character): the globs the decide script
# can match exactly as fnmatch does, in Lua.
ToolPattern = Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.*?-]{1,128}$")]
Notify = Literal["mention", "dm", "none"]
# 90s, 30m, 2h, 7d: a whole number (at most 6 digits) and a unit.
Duration = Annotated[str, StringConstraints(pattern=r"^[1-9][0-9]{0,5}[smhd]$")]
UNITS = {"s": 1, "m": 60, "h": 3_600, "d": 86_400}
# What a `decide` rule's reject tells the agent.
DecideMessage = Annotated[str, StringConstraints(min_length=1, max_length=2_000)]
# The keys that say how people are asked: a rule that decides asks no one.
ASKING = (
    "approvers",
    "requester_may_approve",
    "notify",
    "channel",
    "timeout",
    "remind_every",
    "escalate_after",
    "escalate_to",
    "quorum",
    "require",
    "trust",
    "trust_args",
    "trust_uses",
    "trust_scope",
    "reveal",
    "step_up",
    "step_up_trust",
)
TRUST_MAX = 30 * 86_400  # a grant lasts at most 30 days
ArgName = Annotated[str, StringConstraints(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")]
# the rule keys added since the first policy: a rule without them names what it named before them
ADDED_KEYS = "name when decide message require trust trust_args trust_uses trust_scope".split()
ADDED_KEYS += "fallthrough redact reveal step_up step_up_trust".split()
# how an approver proves it is them, at that moment (docs/security.md); "none": a click (the default)
StepUp = Literal["passkey", "none"]


def _passkey(step_up: str | None) -> str | None:
    """A route's step-up: "passkey", or None for a click ("none", or unset)."""
    return "passkey" if step_up == "passkey" else None


def seconds(duration: str | None) -> int | None:
    """A policy duration (`90s`, `30m`, `2h`, `7d`) in seconds."""
    return int(duration[:-1]) * UNITS[duration[-1]] if duration else None


def spoken(total: float) -> str:
    """A length of time for people: 45s, 30m, 2h, 1h 30m, 3d."""
    total = max(0, int(total))
    for unit, size, smaller in (("d", 86_400, "h"), ("h", 3_600, "m"), ("m", 60, "s")):
        if total >= size:
            whole, rest = divmod(total, size)
            part = rest // UNITS[smaller]
            return f"{whole}{unit}" + (f" {part}{smaller}" if part else "")
    return f"{total}s"


DEFAULT_FILE = "signoff.toml"
# a `when` not evaluated (`closed_match`): the call is routed as if it could not be read
NOT_EVALUATED = "not evaluated here: the card was routed under an earlier policy"
NO_ARGUMENTS = "an MCP server's question carries no arguments for a condition to read"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _redact_path(text: str) -> str:
    Redaction.parse(text)  # (ValueError: not a path into the arguments)
    return text


# `args.customer.card_number`, `args.cards[].number`, `args.*.pin` (core.secrets.Redaction)
RedactPath = Annotated[str, StringConstraints(max_length=300), AfterValidator(_redact_path)]


class Defaults(_Strict):
    approvers: tuple[ApproverId, ...] = ()
    # argument paths hidden as secrets for every tool (besides what is found by name and shape)
    redact: tuple[RedactPath, ...] = ()
    reveal: bool = False  # an approver may open "Show secret values"
    # [defaults] catches what no rule takes, what a `when` said no to included: when it is weaker
    # than such a rule, the author says so (`PolicyFile._silent_fallthroughs`).
    fallthrough: Literal["deliberate"] | None = None
    requester_may_approve: bool = True
    notify: Notify = "mention"
    timeout: Duration | None = None
    remind_every: Duration | None = None
    escalate_after: Duration | None = None
    escalate_to: tuple[ApproverId, ...] = ()
    quorum: Quorum = 1
    step_up: StepUp | None = None
    step_up_trust: StepUp | None = None


class Questions(_Strict):
    """Plain questions (`interrupt(value)`): they expire only when `timeout` is set, and then
    are answered with `answer` (which must fit the question's answer schema, else they wait)."""

    timeout: Duration | None = None
    answer: Annotated[str, StringConstraints(min_length=1, max_length=2_000)] = (
        "No one answered in time; carry on without an answer."
    )


class Rule(_Strict):
    name: RuleName | None = None
    tools: tuple[ToolPattern, ...] = Field(min_length=1)
    when: Annotated[str, StringConstraints(min_length=1, max_length=2_000)] | None = None
    approvers: tuple[ApproverId, ...] | None = None
    requester_may_approve: bool | None = None
    notify: Notify | None = None
    channel: ChannelId | None = None
    summary: Annotated[str, StringConstraints(min_length=1, max_length=300)] | None = None
    timeout: Duration | None = None
    remind_every: Duration | None = None
    escalate_after: Duration | None = None
    escalate_to: tuple[ApproverId, ...] | None = None
    quorum: Quorum | None = None
    require: tuple[Requirement, ...] | None = None
    decide: Literal["approve", "reject"] | None = None
    message: DecideMessage | None = None
    trust: Duration | None = None
    trust_args: tuple[ArgName, ...] | None = Field(default=None, min_length=1, max_length=20)
    trust_uses: Annotated[int, Field(ge=1, le=1_000)] | None = None
    # Where a grant holds: the channel its run was in ("channel", the default), or "anywhere".
    trust_scope: Literal["channel", "anywhere"] | None = None
    # argument paths hidden as secrets for this rule's tools (added to [defaults]'); whether an
    # approver may open "Show secret values"
    redact: tuple[RedactPath, ...] | None = None
    reveal: bool | None = None
    step_up: StepUp | None = None  # Approve (and Approve & trust, Approve all) needs a passkey
    step_up_trust: StepUp | None = None  # Approve & trust needs a passkey
    # A rule without `when` after a `when` rule for the same tools catches what that rule's
    # condition said no to; when it is weaker, the author says so (`_no_silent_fallthrough`).
    fallthrough: Literal["deliberate"] | None = None

    @model_validator(mode="after")
    def _decides_alone(self) -> Rule:
        if self.require is not None:
            require_alone(self.quorum, self.approvers, self.require or ())
        _trust_sound(self)
        if self.message is not None and self.decide != "reject":
            raise ValueError('message: only with decide = "reject" (what the agent is told)')
        asking = [key for key in ASKING if getattr(self, key) is not None]
        if self.decide and asking:
            raise ValueError(f"decide: a rule that decides asks no one, so it takes no {', '.join(asking)}")
        return self

    @field_validator("summary")
    @classmethod
    def _argument_names_only(cls, summary: str | None) -> str | None:
        for _, name, spec, conversion in string.Formatter().parse(summary or ""):
            if name is not None and (not name.isidentifier() or spec or conversion):
                raise ValueError(f"{{{name}}}: a summary names arguments only, like {{order_id}}")
        return summary

    @field_validator("when")
    @classmethod
    def _a_condition(cls, when: str | None) -> str | None:
        if when is not None:
            compiled(when)  # (ValueError: not CEL, an unknown name, not a boolean)
        return when

    @property
    def condition(self) -> Condition | None:
        return compiled(self.when) if self.when is not None else None

    def matches(self, tool: str) -> bool:
        return any(fnmatch.fnmatchcase(tool, pattern) for pattern in self.tools)


def _trust_sound(rule: Rule) -> None:
    """`trust_args` and `trust_uses` shape a `trust`; a grant lasts at most 30 days."""
    if rule.trust is None:
        for key in ("trust_args", "trust_uses", "trust_scope", "step_up_trust"):
            if getattr(rule, key) is not None:
                raise ValueError(f"{key}: only with trust (how long a grant lasts)")
    elif (seconds(rule.trust) or 0) > TRUST_MAX:
        raise ValueError(f"trust: at most 30d ({rule.trust} given)")


class PolicyFile(_Strict):
    defaults: Defaults = Defaults()
    rules: tuple[Rule, ...] = ()
    questions: Questions = Questions()

    @model_validator(mode="after")
    def _limits_make_sense(self) -> PolicyFile:
        problems = []
        for where, route in [("defaults", self.default_route), *self._rule_routes()]:
            if route.escalate_after is not None and not route.escalate_to:
                problems.append(f"{where}.escalate_after: needs escalate_to (who to escalate to)")
            people = set(route.approvers) | set(route.escalate_to)
            if route.approvers and not any(p.startswith("S") for p in people) and len(people) < route.quorum:
                problems.append(
                    f"{where}.quorum: {route.quorum} distinct approvers needed, {len(people)} named"
                )
        problems.extend(self._silent_fallthroughs())
        if problems:
            raise ValueError("; ".join(problems))
        return self

    def _silent_fallthroughs(self) -> list[str]:
        """A rule without `when` catches, for the tools it shares with a `when` rule above it,
        every call that condition said no to, and `[defaults]` catches what no such rule takes;
        if it is weaker (it approves by itself, needs fewer approvals, lets anyone or the
        requester approve), a call the agent spelled so the condition says no (`-50000`,
        `"prod\u200b"`) gets the weaker treatment. Refused unless it says
        `fallthrough = "deliberate"`. Checked per tool pattern of the `when` rule, against every
        rule below that may take one of its tools (globs that overlap: `issue_*` and `*_refund`),
        down to one that takes them all. (A `when` that cannot read a call never falls through:
        `match` fails closed.)"""
        problems: dict[str, None] = {}
        for n, rule in enumerate(self.rules):
            if rule.when is None:
                continue
            for pattern in rule.tools:
                covered = False
                for m in range(n + 1, len(self.rules)):
                    later = self.rules[m]
                    if later.when is not None or not any(tools_overlap(pattern, q) for q in later.tools):
                        continue
                    how = None if later.fallthrough else self.routes[m].weaker_than(self.routes[n])
                    if how is not None:
                        problems[weaker_words(self.rule_place(m), self.rule_place(n), how)] = None
                    if any(tools_cover(q, pattern) for q in later.tools):
                        covered = True
                        break
                how = (
                    None
                    if covered or self.defaults.fallthrough
                    else self.default_route.weaker_than(self.routes[n])
                )
                if how is not None:
                    problems[
                        f"[defaults] catches every {pattern} call the `when` of {self.rule_place(n)} "
                        f"says no to (no rule without `when` below it takes them), and {how}: end with a rule "
                        f'for {pattern} as strict as you mean, or set fallthrough = "deliberate" in [defaults]'
                    ] = None
        return list(problems)

    def _rule_routes(self) -> list[tuple[str, Route]]:
        return [(f"rules[{n}]", route) for n, route in enumerate(self.routes)]

    # Compiled once per load: a click never walks the rules (3,000 cost what 3 do).

    @cached_property
    def routes(self) -> tuple[Route, ...]:
        """Each rule's route, by rule index."""
        return tuple(self._route(rule, n) for n, rule in enumerate(self.rules))

    @cached_property
    def default_route(self) -> Route:
        return self._route(None, None)

    @cached_property
    def fingerprint(self) -> str:
        """Names this policy: a card remembers which rule routed each action under which policy."""
        dumped = self.model_dump(mode="json")
        for rule in dumped["rules"]:  # a rule without the keys added since names what it named before them
            for key in ADDED_KEYS:
                if rule[key] is None:
                    del rule[key]
        for key in ("fallthrough", "step_up", "step_up_trust"):
            if dumped["defaults"][key] is None:
                del dumped["defaults"][key]
        for key, unset in (("redact", []), ("reveal", False)):
            if dumped["defaults"][key] == unset:
                del dumped["defaults"][key]
        text = json.dumps(dumped, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    @cached_property
    def _by_tool(self) -> dict[str, tuple[int, ...]]:
        return {}

    @cached_property
    def _told(self) -> set[tuple[int, str]]:
        return set()

    def candidates(self, tool: str) -> tuple[int, ...]:
        """The rules whose tools match `tool`, in order, up to the first without a `when` (the
        rest could never apply) (memoized)."""
        found = self._by_tool.get(tool)
        if found is None:
            matching: list[int] = []
            for n, rule in enumerate(self.rules):
                if rule.matches(tool):
                    matching.append(n)
                    if rule.when is None:
                        break
            found = tuple(matching)
            if len(self._by_tool) < 10_000:  # tool names are few; never grow without bound
                self._by_tool[tool] = found
        return found

    def rule_for(self, call: Call) -> int:
        """The index of the rule that applies to the call (`match`); -1 for `[defaults]`."""
        return self.match(call).rule

    def closed_match(self, call: Call, why: str = NOT_EVALUATED) -> Match:
        """`match` with no `when` evaluated: the strictest rule the call could match (`why`: what
        the card says). For a card routed under another policy (the file changed while it waited),
        answered on a click's path, where no condition is evaluated (an agent's arguments could
        make one last seconds); for an MCP server's question, which carries no arguments."""
        unread = [why if self.rules[n].when else True for n in self.candidates(call.tool)]
        return self.match(call, unread)

    def conditions(self, tool: str) -> list[str | None]:
        """The `when`s to evaluate for a call of `tool`, in order (`candidates`; None: none)."""
        return [self.rules[n].when for n in self.candidates(tool)]

    def match(self, call: Call, found: list[Verdict] | None = None) -> Match:
        """The first rule whose tools match the call and whose `when` holds (-1: `[defaults]`),
        given the conditions' verdicts (`conditions`, evaluated elsewhere; here when not given).

        A `when` that cannot read the call (a string where a number was meant, a missing
        argument, a number that is not finite, a budget run out) fails closed: the call goes to
        the strictest of the rules it could have matched (that rule, the others that could not
        read it, and the rule it would otherwise reach: `Route.strictness`), never to a later
        rule on its own. Such a call is asked even where that rule decides (`decide`), and is
        offered no trust."""
        candidates = self.candidates(call.tool)
        if found is None:
            found = verdicts([self.rules[n].when for n in candidates], call)
        chosen, unread, problem = -1, [], ""
        for n, verdict in zip(candidates, found, strict=False):
            if verdict is True:
                chosen = n
                break
            if isinstance(verdict, str):
                if verdict != NOT_EVALUATED:
                    self._tell(n, call, verdict)
                unread.append(n)
                problem = problem or f"{self.rule_label(n)}: {verdict}"
        if not unread:
            return Match(chosen)
        strictest = max(
            [*unread, chosen], key=lambda n: (self.route_at(n).strictness, -n if n >= 0 else -len(self.rules))
        )
        return Match(strictest, problem)

    def _tell(self, n: int, call: Call, problem: str) -> None:
        if (n, problem) in self._told or len(self._told) >= 1_000:
            return
        self._told.add((n, problem))
        rule = self.rules[n]
        log.warning(
            "policy_condition_failed",
            rule=f"rules[{n}]",
            name=rule.name,
            when=rule.when,
            tool=call.tool,
            problem=problem,
        )

    def route_at(self, index: int) -> Route:
        """Rule `index`'s route; -1: `[defaults]`'."""
        return self.default_route if index < 0 else self.routes[index]

    def route(self, tool: str) -> Route:
        """The route of a call of `tool` with no arguments (tests, tools: an approval's actions are
        routed with their calls, `rule_for`)."""
        return self.route_at(self.rule_for(Call(tool)))

    def route_of(self, rule: Rule | None) -> Route:
        return self.default_route if rule is None else self.routes[self.rules.index(rule)]

    def _route(self, rule: Rule | None, index: int | None) -> Route:
        d = self.defaults
        if rule is None:
            return Route(
                d.approvers,
                d.requester_may_approve,
                d.notify,
                None,
                None,
                None,
                seconds(d.timeout),
                seconds(d.remind_every),
                seconds(d.escalate_after),
                d.escalate_to,
                d.quorum,
                reveal=d.reveal,
                step_up=_passkey(d.step_up),
                step_up_trust=_passkey(d.step_up_trust or d.step_up),
            )
        require = rule.require or ()
        approvers = tuple(dict.fromkeys(p for entry in require for p in entry.approvers))
        route = Route(
            approvers or (rule.approvers if rule.approvers is not None else d.approvers),
            rule.requester_may_approve if rule.requester_may_approve is not None else d.requester_may_approve,
            rule.notify or d.notify,
            rule.channel,
            rule.summary,
            index,
            seconds(rule.timeout or d.timeout),
            seconds(rule.remind_every or d.remind_every),
            seconds(rule.escalate_after or d.escalate_after),
            rule.escalate_to if rule.escalate_to is not None else d.escalate_to,
            rule.quorum or (1 if require else d.quorum),  # (`require` counts its own)
            rule.name,
            decide=rule.decide,
            message=rule.message,
            require=require,
            trust=seconds(rule.trust),
            trust_args=rule.trust_args,
            trust_uses=rule.trust_uses,
            trust_scope=rule.trust_scope or "channel",
            reveal=rule.reveal if rule.reveal is not None else d.reveal,
            step_up=_passkey(rule.step_up or d.step_up),
            step_up_trust=_passkey(rule.step_up_trust or d.step_up_trust)
            or _passkey(rule.step_up or d.step_up),
        )
        # (what is hidden from people, and who may look, is no part of what a grant lets through)
        said = rule.model_dump(mode="json", exclude={"redact", "reveal"})
        said = {k: v for k, v in said.items() if v is not None or not k.startswith("step_up")}
        return dataclasses.replace(route, fingerprint=route_fingerprint(said, route))

    def redactions(self, tool: str) -> tuple[Redaction, ...]:
        """The argument paths hidden for a call of `tool`: `[defaults]`' and every rule's for its
        tools, whatever its `when` (hiding more is never wrong)."""
        paths = [*self.defaults.redact]
        for rule in self.rules:
            if rule.redact and rule.matches(tool):
                paths += rule.redact
        return tuple(Redaction.parse(path) for path in dict.fromkeys(paths))

    @classmethod
    def implicit(cls, approvers: dict[str, tuple[str, ...]], requester_cannot_approve: bool) -> PolicyFile:
        """SIGNOFF_APPROVERS (tool or "*" -> ids) and SIGNOFF_REQUESTER_CANNOT_APPROVE as a policy."""
        return cls(
            defaults=Defaults(
                approvers=approvers.get("*", ()), requester_may_approve=not requester_cannot_approve
            ),
            rules=tuple(Rule(tools=(tool,), approvers=ids) for tool, ids in approvers.items() if tool != "*"),
        )

    @property
    def steps_up(self) -> bool:
        """Whether any rule (or `[defaults]`) asks for a passkey: the bot then needs a public URL."""
        routes = (self.default_route, *self.routes)
        return any(r.step_up or r.step_up_trust for r in routes if r.decide is None)

    def rule_label(self, index: int) -> str:
        """Rule `index` as people and the audit name it: its name, else the tools it is for, as
        the file's author chose them ("the rule for deploy"; its place in the file is
        `rule_place`'s, for the author's own messages)."""
        rule = self.rules[index]
        return rule.name or f"the rule for {' and '.join(rule.tools)}"

    def rule_place(self, index: int) -> str:
        """Rule `index` where the file's author finds it: its name, quoted, else its place in the
        file and its tools."""
        rule = self.rules[index]
        return f'"{rule.name}"' if rule.name else f"rules[{index}] ({', '.join(rule.tools)})"

    def ids(self) -> set[str]:
        """Every approver id the policy names (the group directory fetches the groups)."""
        named = set(self.defaults.approvers) | set(self.defaults.escalate_to)
        for rule in self.rules:
            named.update(rule.approvers or (), rule.escalate_to or ())
            named.update(p for entry in rule.require or () for p in entry.approvers)
        return named


class PolicyError(ValueError):
    """The policy file makes no sense: one line per problem, naming the file and the key."""

    def __init__(self, problems: list[str]):
        super().__init__("; ".join(problems))
        self.problems = problems


def load(path: Path) -> PolicyFile:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise PolicyError([f"{path}: cannot be read ({exc.strerror or exc})"]) from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PolicyError([f"{path}: not TOML: {exc}"]) from None
    try:
        return PolicyFile.model_validate(data)
    except ValidationError as exc:
        raise PolicyError(
            [line for error in exc.errors() for line in _problem(path, error, data).split("\n")]
        ) from None
