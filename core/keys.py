"""Every Redis key Signoff uses, in one place (as arq keeps its key prefixes).

Both sides share these names: the runner writes runs, approvals, commands it
consumes and events it sends; the bot writes decisions and its Slack state.

The layout is a Redis Cluster's, whatever the server: Signoff's keys are split
into a fixed number of partitions (`SIGNOFF_PARTITIONS`), and every key of a
partition carries its hash tag (`signoff:{3.17}:…`), so all of them live in one
slot. A run belongs to the partition of its thread (`thread_hash`), and so does
every key of the run: its record and state, its approvals (an approval id
starts with its thread's hash), their decisions and votes, and the partition's
`commands` / `events` / `audit` streams and indexes (pending, idle, deadlines,
refresh lanes). Each Lua script and MULTI therefore touches one slot, which a
cluster requires, and a thread's commands and events stay in order in its
partition's streams. Consumers read every partition.

The tags are chosen so that partition k's slot lies in the k-th of N equal slot
ranges: on a cluster whose masters hold equal ranges (what `redis-cli --cluster
create` and `signoff redis --cluster` make), the partitions spread evenly.

A few keys belong to no run (a Slack thread's binding, dedupe marks, rate
limiters, group members, the layout record); each is used alone, one key per
command, so they may live in any slot.
"""

from __future__ import annotations

import re
import uuid
import zlib
from functools import cache
from typing import Literal

from redis.crc import key_slot

RUNNERS_GROUP = "runners"  # consumer group of the commands streams
BOTS_GROUP = "bots"  # consumer group of the events streams
SLOTS = 16384
MAX_PARTITIONS = 1024
LAYOUT_VERSION = 2  # 1: one of each stream, no hash tags (before partitions)

_APPROVAL_ID = re.compile(r"^[0-9a-f]{8}")


def thread_hash(thread_id: str) -> int:
    """Where a thread's keys go: partition `thread_hash(thread_id) % partitions`."""
    return zlib.crc32(thread_id.encode())


def new_approval_id(thread_id: str) -> str:
    """An approval id that says its thread's partition (its first 8 hex digits: the thread's
    hash), so a button's value alone finds the approval's keys, with any number of partitions."""
    return f"{thread_hash(thread_id):08x}{uuid.uuid4().hex[:12]}"


@cache
def partition_tags(count: int) -> tuple[str, ...]:
    """A hash tag per partition, partition k's slot in the k-th of `count` equal slot ranges."""
    if not 1 <= count <= MAX_PARTITIONS:
        raise ValueError(f"partitions must be 1 to {MAX_PARTITIONS}, not {count}")
    tags = []
    for k in range(count):
        low, high = k * SLOTS // count, (k + 1) * SLOTS // count
        tag = next(t for j in range(SLOTS * 4) if low <= key_slot((t := f"{k}.{j}").encode()) < high)
        tags.append(tag)
    return tuple(tags)


class Partition:
    """The keys one partition holds besides its runs': its streams and its indexes."""

    def __init__(self, prefix: str, index: int, tag: str):
        self.index = index
        self.base = f"{prefix}:{{{tag}}}"
        self.commands = f"{self.base}:commands"
        self.events = f"{self.base}:events"
        self.audit = f"{self.base}:audit"
        # The hash of the audit chain's newest entry (`core.audit_chain`), moved with each entry.
        self.audit_head = f"{self.base}:audit:head"
        # Entries a decision wrote, waiting (in order, moments) to be hashed onto the chain.
        self.audit_queued = f"{self.base}:audit:queued"
        self.dead_letters = f"{self.base}:deadletters"  # entries no consumer could handle
        # Finished (or failed) threads by when: purged after the retention (`retention`).
        self.idle = f"{self.base}:idle"
        # Threads whose purge began (thread id -> its Slack-thread binding key, or ""): a purge
        # cut off (a janitor killed mid-way) is finished by the next sweep.
        self.purging = f"{self.base}:purging"
        # Time limits, reminders and escalations by due time (ms): `expire:<approval id>:<index>`,
        # `remind:<approval id>`, `escalate:<approval id>:<after, s>`.
        self.deadlines = f"{self.base}:deadlines"
        self.deadline_claims = f"{self.base}:deadlines:claims"
        self.pending_all = f"{self.base}:pending"
        # Threads on an Agent Server with a run Signoff sent and has not seen end, by when sent:
        # the bot's poll (`bot.watch`) looks at them when no webhook said how they ended.
        self.remote_active = f"{self.base}:remote:active"
        self.refresh_claims = f"{self.base}:refresh:claims"
        # Trust grants kept in this partition, by expiry (ms): `core.grants`.
        self.grants = f"{self.base}:grants"

    def pending(self, channel: str) -> str:
        return f"{self.base}:pending:{channel}"

    def refresh_due(self, lane: str) -> str:
        """Cosmetic Slack updates waiting, by due time: lane `card` (card:<approval id>) goes
        before lane `status` (status:<thread id>)."""
        return f"{self.base}:refresh:{lane}"


class Keys:
    """Every Redis key Signoff uses, in one place."""

    def __init__(self, prefix: str = "signoff", partitions: int = 1):
        self.prefix = prefix
        self.partitions = tuple(Partition(prefix, k, tag) for k, tag in enumerate(partition_tags(partitions)))

    @property
    def count(self) -> int:
        return len(self.partitions)

    def consumed(self, stream: Literal["commands", "events"]) -> dict[str, str]:
        """A consumed stream of every partition -> its partition's dead-letter stream."""
        return {getattr(p, stream): p.dead_letters for p in self.partitions}

    def of(self, thread_id: str) -> Partition:
        """The partition of a thread, and of every key of its run."""
        return self.partitions[thread_hash(thread_id) % self.count]

    def of_approval(self, approval_id: str) -> Partition:
        """The partition of an approval (its thread's). An id that is not one of Signoff's (a
        forged button) is looked for in the first partition, where it is not found."""
        found = _APPROVAL_ID.match(approval_id)
        return self.partitions[int(found.group(), 16) % self.count if found else 0]

    def of_item(self, item: str) -> Partition:
        """The partition of a deadline or a refresh mark: `<kind>:<approval or thread id>[:…]`."""
        kind, _, rest = item.partition(":")
        ident = rest.partition(":")[0]
        return self.of(ident) if kind == "status" else self.of_approval(ident)

    # a run's keys -----------------------------------------------------------------

    def run(self, thread_id: str) -> str:
        return f"{self.of(thread_id).base}:run:{thread_id}"

    def run_state(self, thread_id: str) -> str:
        """The run's state (running / waiting / finished / failed), its detail and its Slack status line."""
        return f"{self.of(thread_id).base}:runstate:{thread_id}"

    def thread_lock(self, thread_id: str) -> str:
        return f"{self.of(thread_id).base}:lock:thread:{thread_id}"

    def thread_approvals(self, thread_id: str) -> str:
        """The thread's approvals by creation time (for tool idempotency keys)."""
        return f"{self.of(thread_id).base}:thread:{thread_id}:approvals"

    def posts(self, thread_id: str) -> str:
        """Slack messages of one run: post id -> ts once posted, or the poster's claim while posting."""
        return f"{self.of(thread_id).base}:posts:{thread_id}"

    def by_interrupt(self, thread_id: str, interrupt_id: str) -> str:
        return f"{self.of(thread_id).base}:interrupt:{interrupt_id}"

    def command_done(self, thread_id: str, command_id: str) -> str:
        return f"{self.of(thread_id).base}:done:{command_id}"

    def remote_told(self, thread_id: str, run_id: str) -> str:
        """Set once the end of an Agent Server run (finished, failed) was told to Slack."""
        return f"{self.of(thread_id).base}:remote:told:{run_id}"

    # an approval's keys (in its thread's partition) -----------------------------------

    def approval(self, approval_id: str) -> str:
        return f"{self.of_approval(approval_id).base}:approval:{approval_id}"

    def decided(self, approval_id: str) -> str:
        """Who decided each action, when, and how (`Decided` records)."""
        return f"{self.approval(approval_id)}:decided"

    def decisions(self, approval_id: str) -> str:
        """Each action's decision exactly as sent: what the resume command carries."""
        return f"{self.approval(approval_id)}:decisions"

    def votes(self, approval_id: str) -> str:
        """Approvals counted towards a quorum: `<index>:<user>` -> their `Decided` record."""
        return f"{self.approval(approval_id)}:votes"

    # a trust grant's keys (in its match's partition: `core.grants`) ----------------------

    def of_match(self, match: str) -> Partition:
        """The partition of a grant match: its grants, their index and their use marks."""
        return self.of(f"grant:{match}")

    def grant(self, grant_id: str) -> str:
        """A grant (its id says its partition, as an approval id does)."""
        return f"{self.of_approval(grant_id).base}:grant:{grant_id}"

    def grant_match(self, match: str) -> str:
        """The grants for one match, by expiry."""
        return f"{self.of_match(match).base}:grants:match:{match}"

    def grant_use(self, match: str, approval_id: str, index: int) -> str:
        """Which grant action `index` of an approval used (with its match's grants)."""
        return f"{self.of_match(match).base}:grantuse:{approval_id}:{index}"

    # keys of no run: each used alone -------------------------------------------------

    @property
    def layout(self) -> str:
        """How this deployment's keys are laid out (version, partitions): checked at every start."""
        return f"{self.prefix}:layout"

    def slack_thread(self, channel: str, root_ts: str) -> str:
        """A Slack thread -> the LangGraph thread it is bound to."""
        return f"{self.prefix}:slackthread:{channel}:{root_ts}"

    def slack_thread_graph(self, channel: str, root_ts: str) -> str:
        """The graph an agent thread chose ("Use <graph>") for the runs it starts."""
        return f"{self.prefix}:slackthread:{channel}:{root_ts}:graph"

    @property
    def fingerprint_key(self) -> str:
        """The key of the audit's fingerprints of secrets (`core.secrets.fingerprint`)."""
        return f"{self.prefix}:audit:fingerprint_key"

    def dedupe(self, name: str) -> str:
        return f"{self.prefix}:dedupe:{name}"

    def rate(self, name: str) -> str:
        """A rate limiter shared by every bot replica (one Slack workspace)."""
        return f"{self.prefix}:rate:{name}"

    def passkeys(self, user: str) -> str:
        """A person's passkeys: credential id (base64url) -> its public key, sign count, label
        (`core.store.passkeys`)."""
        return f"{self.prefix}:passkeys:{user}"

    def link(self, token_hash: str) -> str:
        """A one-time link's record (a step-up or an enrolment page), under its token's SHA-256."""
        return f"{self.prefix}:link:{token_hash}"

    @property
    def groups(self) -> str:
        """User group id -> its members (JSON), refreshed from Slack in the background."""
        return f"{self.prefix}:groups"

    @property
    def groups_refresh(self) -> str:
        return f"{self.prefix}:groups:refreshing"
