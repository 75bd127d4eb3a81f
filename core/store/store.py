"""Redis access for the records and streams both sides share: the one door, in rooms.

`Store` builds the rooms and hands out the one client they share; a caller names the room
(`store.decisions.decide(...)`), and each room answers for its own keys (named in `core.keys`)
and runs its own scripts, written at its top (the few fragments several compose are in
`core.store.lua`). A room that needs another is given it when it is built:

* `runs`: a run's record (where it talks in Slack, who started it), its state and its plan;
* `queue`: the streams: a command or an event queued, a command marked done, streams read;
* `approvals`: an approval's record and its `approval` event, written in one step; read,
  listed while pending, closed;
* `decisions`: the decide script (the first decision wins; the one that completes the set
  queues the resume command, in the same step), for people, the policy and trust grants;
* `deadlines`: the policy's terms for an approval, and its deadlines, taken when due;
* `cards`: where a card is and when it became visible, its kept response_url, its refreshes;
* `grants`: trust grants; `audit`: the audit's chains read; `locks`: thread locks;
* `passkeys`: people's passkeys (credential id, public key, sign count) and one-time links;
* `retention`, `dead_letters`, `layout`, `migration`, `server`, `remote` (Agent Server runs).

Streams (one of each per partition, see `keys`; each consumed by a consumer group with work
leases, every partition read by every consumer): `commands` (group `runners`: start a run,
resume a pause, continue after a failure; a command that already took effect is a no-op),
`events` (group `bots`: a pause needs a card; a run finished, failed, or refused a decision
set), `audit` (no group: every decision, each partition's a hash chain, `core.audit_chain`).
The consumer framework is `core.streams`; the bot's own Slack state is `bot.slack`'s.

A decision is recorded by one Lua script, and an approval record and its event by another:
that is what makes "exactly one resume" and "a card for every approval" hold across double
clicks, crashes and replicas.
"""

from __future__ import annotations

from typing import Any

from core.config import Settings
from core.keys import Keys
from core.store.agent_server_runs import AgentServerRuns
from core.store.approvals import Approvals
from core.store.audit import Audit, FingerprintKey
from core.store.cards import Cards
from core.store.client import LOCAL_REDIS, default_partitions, redis_client
from core.store.dead_letters import DeadLetters
from core.store.deadlines import Deadlines
from core.store.decisions import Decisions
from core.store.grants import Grants
from core.store.layout import Layout
from core.store.locks import Locks
from core.store.migration import Migration
from core.store.passkeys import Passkeys
from core.store.queue import Queue
from core.store.retention import Retention
from core.store.runs import Runs
from core.store.server import Server


class Store:
    """Async access to records and streams; shared by runner and bot, the one door to Redis."""

    def __init__(self, client: Any, prefix: str = "signoff", partitions: int = 1):
        # Any: redis-py's types cannot tell that decode_responses=True makes every reply a str,
        # and the client is a `Redis` or a `RedisCluster`.
        self.redis: Any = client
        self.keys = keys = Keys(prefix, partitions)
        self.runs = Runs(client, keys)
        self.queue = Queue(client, keys)
        fingerprints = FingerprintKey(client, keys)
        self.approvals = Approvals(client, keys, self.queue, fingerprints)
        self.audit = Audit(client, keys, self.queue, fingerprints)
        self.decisions = Decisions(client, keys, self.approvals, self.runs, self.audit.chain_after)
        self.deadlines = Deadlines(client, keys)
        self.cards = Cards(client, keys, self.approvals)
        self.grants = Grants(client, keys, self.deadlines)
        self.locks = Locks(client, keys)
        self.retention = Retention(client, keys)
        self.dead_letters = DeadLetters(client, keys)
        self.layout = Layout(client, keys)
        self.migration = Migration(client, keys)
        self.server = Server(client)
        self.remote = AgentServerRuns(client, keys)
        self.passkeys = Passkeys(client, keys)

    @classmethod
    def from_url(cls, url: str, prefix: str = "signoff", partitions: int | None = None) -> Store:
        return cls(redis_client(url), prefix, partitions or default_partitions(url))

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        return cls.from_url(settings.redis_url or LOCAL_REDIS, settings.prefix, settings.partitions)

    async def close(self) -> None:
        await self.redis.aclose()

    async def ping(self) -> bool:
        """Whether Redis answers (readiness, and loops that report in between their work)."""
        return bool(await self.redis.ping())
