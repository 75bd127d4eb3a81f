"""Trust grants: "Approve & trust for 1h" lets the same call through again, unasked, for a while.

A rule with `trust` (`core.policy_file`) puts a second approve button on the card. The approval
that decides the call (with a quorum or `require`, the one that completes it) also writes a
grant: later calls of the same tool, by the same requester and graph, in the same channel (unless
the rule says `trust_scope = "anywhere"`), routed by the same rule (its content's fingerprint:
editing the rule ends its grants), whose compared arguments (all of them, or the rule's
`trust_args`) are equal, are approved without a card until the grant expires or has been used
`trust_uses` times. A grant never widens: the call must match it exactly, and its rule must
still offer trust.

Layout (`core.keys`): a grant lives in the partition of its match (the hash of what it
compares), so every grant for one match, its index and its use marks share a slot:

* `grant:<id>`: the grant (a hash), expiring with it;
* `grants:match:<match>`: the grants for one match, by expiry;
* `grants`: every grant of the partition, by expiry (`signoff trust list`, `/signoff trust`);
* `grantuse:<approval id>:<index>`: which grant an action used, so a second replica handling
  the same card uses the same grant (one use, not two).

Using a grant is two atomic steps in two slots: the use (here, in the grant's partition) and the
decision (the decide script, in the approval's, outcome `trusted`, naming the grant and who
granted it). A use whose decision then cannot be recorded (the action was decided another way
first) is not given back: a grant may lose a use to that race, never gain one.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict

from core.conditions import Call
from core.keys import thread_hash
from core.routes import Route


class Grant(BaseModel):
    """One trust grant, as stored."""

    model_config = ConfigDict(extra="ignore")

    id: str
    match: str
    tool: str
    requester: str
    graph: str
    channel: str = ""  # the channel it holds in ("": anywhere, `trust_scope = "anywhere"`)
    rule: str  # the rule's fingerprint
    rule_name: str  # the rule as people name it
    granted_by: str
    approval_id: str  # the approval whose decision granted it
    index: int
    compared: str  # JSON: the arguments a call must repeat
    approvers: str = ""  # the rule's approvers (ids, comma-separated): they may revoke it too
    created_at: float
    expires_at: int  # ms, Redis's clock
    uses: int | None = None  # how many calls it lets through (None: until it expires)
    uses_left: int | None = None
    used: int = 0

    @property
    def until(self) -> float:
        return self.expires_at / 1000


def compared(route: Route, args: Mapping[str, Any]) -> dict[str, Any] | None:
    """What a grant under `route` compares of a call's arguments: all of them, or the rule's
    `trust_args` (None when one is missing: such a call is neither trusted nor a grant's source)."""
    if route.trust_args is None:
        return dict(args)
    if any(name not in args for name in route.trust_args):
        return None
    return {name: args[name] for name in route.trust_args}


def match_of(route: Route, call: Call) -> str | None:
    """The match a call has under `route`: equal for calls one grant covers, and only for them.
    None when the route offers no trust, the run has no requester, or an argument is missing."""
    shown = compared(route, call.args)
    if route.trust is None or shown is None or not call.requester:
        return None
    key = {"rule": route.fingerprint, "tool": call.tool, "requester": call.requester, "graph": call.graph}
    if route.trust_scope != "anywhere":  # a grant made in #ops lets nothing through in #general
        key["channel"] = call.channel
    text = json.dumps({**key, "args": shown}, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def scope(match: str) -> str:
    """What places a match's keys in a partition (`Keys.of`), as a thread id places a run's."""
    return f"grant:{match}"


def grant_id(match: str, approval_id: str, index: int) -> str:
    """The id of the grant one action's approval makes: the same however often it is written
    (a retry, a second replica), and, like an approval id, it says its partition."""
    own = hashlib.sha256(f"{approval_id}:{index}".encode()).hexdigest()[:12]
    return f"{thread_hash(scope(match)):08x}{own}"
