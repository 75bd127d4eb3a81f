"""The audit chain: every audit entry carries the hash of the one before it in its partition.

Each partition's `audit` stream is one chain. An entry carries `prev` (the hash of the entry
before it, "" for the first) and `hash`: the SHA-256, in lowercase hex, of the entry's
**canonical encoding**, which is, in one place:

    for each field of the entry but `hash` (so `prev` included), sorted by name (bytewise):
        name "=" <the value's length in bytes, decimal> ":" value "\n"
    concatenated, UTF-8.

The length prefix makes the encoding unambiguous whatever a value holds (newlines, "="). The
scripts that append entries (`core.store.lua.APPEND_AUDIT`, in Redis's Lua) compute it, keep
the partition's newest hash in `audit:head` and move it in the same atomic step as the entry;
`entry_hash` here computes the same in Python, and is what hashes a click's decision onto the
chain after its ack (`core.store.audit.Audit.chain`: the decide script only queues it).

Retention trims a chain's oldest entries; the script that trims appends a **checkpoint** entry
(`outcome` "checkpoint") whose `trimmed` field is the hash of the last entry trimmed, so the
first entry left still verifies: its `prev` is what the newest checkpoint says was trimmed.

`ChainCheck` verifies chains entry by entry: an altered entry fails its hash, a removed or
moved one breaks the `prev` link of the entry after it. Entries written before the chain
existed have no `hash`: those before a chain's first chained entry are counted, not verified;
one after it fails (the chain began, then an entry came without it).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

CHECKPOINT = "checkpoint"  # the `outcome` of a checkpoint entry


def canonical(fields: Mapping[str, str]) -> bytes:
    """The bytes an entry's hash is taken over (see the module's docstring)."""
    parts = []
    for name in sorted(fields):  # str order is code point order: UTF-8's byte order
        if name == "hash":
            continue
        value = str(fields[name]).encode()
        parts.append(b"%s=%d:%s\n" % (name.encode(), len(value), value))
    return b"".join(parts)


def entry_hash(fields: Mapping[str, str]) -> str:
    return hashlib.sha256(canonical(fields)).hexdigest()


@dataclass(frozen=True)
class Broken:
    """The first entry of a chain that does not verify, and why, in words."""

    chain: str
    entry: str
    why: str

    def __str__(self) -> str:
        return f"chain {self.chain}, entry {self.entry}: {self.why}"


@dataclass
class _Chain:
    last: str | None = None  # the newest hash seen; None until the chain's first chained entry
    first_prev: str = ""
    first_entry: str = ""
    trimmed: str = ""  # what the newest checkpoint says was trimmed ("" before any)
    chained: int = 0
    unchained: int = 0  # entries written before the chain, ahead of its first chained entry


class ChainCheck:
    """Entries fed chain by chain in order (`add`); `finish` checks each chain's ends.

    `anchored`: a chain's first entry is taken as its anchor, whatever its `prev` (an export
    may begin part-way, `--since`; its signature fixes its first line). Otherwise (the live
    streams) the first chained entry must follow nothing ("") or what the newest checkpoint
    says was trimmed: the oldest entries cannot be removed unseen either.
    """

    def __init__(self, anchored: bool = False, unchained: bool = True):
        self.anchored = anchored
        # whether entries without a hash may come before a chain's first (written before chains
        # existed): an export from part-way (`--since`) begins after them, so it holds none
        self.allow_unchained = unchained
        self.chains: dict[str, _Chain] = {}

    def add(self, chain: str, entry: str, fields: Mapping[str, str]) -> Broken | None:
        state = self.chains.setdefault(chain, _Chain())
        if not fields.get("hash"):
            if state.last is None and self.allow_unchained:
                state.unchained += 1
                return None
            if state.last is None:
                return Broken(chain, entry, "it has no hash, in an export that begins part-way (altered)")
            return Broken(chain, entry, "it has no hash, yet the chain began before it (altered)")
        if entry_hash(fields) != fields["hash"]:
            return Broken(chain, entry, "altered: its hash is not that of what it says")
        prev = str(fields.get("prev", ""))
        if state.last is None:
            state.first_prev, state.first_entry = prev, entry
        elif prev != state.last:
            return Broken(chain, entry, "it does not follow the entry before it (one removed or moved)")
        if fields.get("outcome") == CHECKPOINT:
            state.trimmed = str(fields.get("trimmed", ""))
        state.last = str(fields["hash"])
        state.chained += 1
        return None

    def finish(self, chain: str, head: str | None = None, live: bool = False) -> Broken | None:
        """The chain's ends: its first entry follows nothing unseen (unless `anchored`), and
        (`live`) its newest entry is the head Redis keeps (else the newest were removed)."""
        state = self.chains.setdefault(chain, _Chain())
        if state.last is not None and not self.anchored and state.first_prev != state.trimmed:
            return Broken(
                chain,
                state.first_entry,
                "it follows an entry that is gone, and no checkpoint says it was trimmed",
            )
        if live and (head or None) != state.last:
            return Broken(chain, "(newest)", f"the chain's head is {head or 'missing'}: entries were removed")
        return None

    @property
    def chained(self) -> int:
        return sum(c.chained for c in self.chains.values())

    @property
    def unchained(self) -> int:
        return sum(c.unchained for c in self.chains.values())
