"""The audit chain through a real Redis, one server and a cluster: every entry chained by the
script that writes it, and an altered, removed or reordered entry found; a trimmed chain still
verifies from its checkpoint; entries from before the chain are counted, not covered."""

from __future__ import annotations

import hashlib
import io
import json
import random

import pytest

from core.audit_chain import CHECKPOINT, entry_hash
from core.protocol import Approve, Reject
from core.store.lua import SHA256
from signoff.commands.audit import audit, export_row
from signoff.commands.audit_verify import file_problem, live_problem
from tests.redis.test_grants import GRANT_POLICY, asked_again, gated, trusted_by
from tests.support.files import policy_permissions
from tests.support.people import BOB
from tests.support.records import two_action_approval


async def decided(store, approvals: int = 2) -> list[tuple[str, dict[str, str]]]:
    """`approvals` two-action approvals of one thread (one partition), each decided, one escalated:
    their audit entries, oldest first."""
    for n in range(approvals):
        approval = await two_action_approval(store)
        if n == 0:
            assert await store.deadlines.escalate(approval.approval_id, 60, ("U0ESC",))
        await store.decisions.decide(approval.approval_id, 0, Approve(), "U0A")
        await store.decisions.decide(approval.approval_id, 1, Reject(message=f"no {n}\nreally = no"), "U0B")
    return await audit_stream(store)


async def audit_stream(store) -> list[tuple[str, dict[str, str]]]:
    return list(await store.redis.xrange(store.keys.of("t1").audit))


async def rewrite(store, entries: list[tuple[str, dict[str, str]]]) -> None:
    """The stream written again as `entries` say, under their ids (what a person with Redis's
    password can do)."""
    stream = store.keys.of("t1").audit
    await store.redis.delete(stream)
    for entry_id, fields in entries:
        await store.redis.xadd(stream, fields, id=entry_id)


async def test_the_lua_sha256_is_hashlib_s_for_any_text(redis_url):
    import redis.asyncio as redis

    client = redis.Redis.from_url(redis_url)
    sha256 = client.register_script(SHA256 + "\nreturn sha256(ARGV[1])")
    rnd = random.Random(7)
    texts = [b"", b"abc", "héllo ✓ 🎉 نعم".encode(), b"\x00\xff\n=" * 40, b"x" * 100_000]
    texts += [rnd.randbytes(n) for n in (*range(0, 130), 1000, 4095, 4096, 4097)]
    try:
        for text in texts:
            assert (await sha256(args=[text])).decode() == hashlib.sha256(text).hexdigest(), len(text)
    finally:
        await client.aclose()


async def test_every_entry_is_chained_by_the_script_that_writes_it(store):
    entries = await decided(store)

    assert [f["outcome"] for _, f in entries] == ["escalated", "decided", "decided", "decided", "decided"]
    assert entries[0][1]["prev"] == ""
    for (_, before), (_, after) in zip(entries, entries[1:], strict=False):
        assert after["prev"] == before["hash"]
    assert all(f["hash"] == entry_hash(f) for _, f in entries)  # Lua and Python agree
    assert await store.redis.get(store.keys.of("t1").audit_head) == entries[-1][1]["hash"]
    broken, check = await live_problem(store)
    assert broken is None and (check.chained, check.unchained) == (5, 0)


async def test_an_altered_entry_fails_verify_named(store):
    entries = await decided(store)
    entry_id, fields = entries[2]
    await rewrite(store, [*entries[:2], (entry_id, {**fields, "user": "U0MALLORY"}), *entries[3:]])

    broken, _ = await live_problem(store)

    assert broken is not None and broken.entry == entry_id and "altered" in broken.why


@pytest.mark.parametrize("which", [0, 2, -1], ids=["oldest", "middle", "newest"])
async def test_a_removed_entry_fails_verify(store, which):
    entries = await decided(store)
    await store.redis.xdel(store.keys.of("t1").audit, entries[which][0])

    broken, _ = await live_problem(store)

    assert broken is not None
    expected = {0: entries[1][0], 2: entries[3][0], -1: "(newest)"}[which]
    assert broken.entry == expected, broken


async def test_a_reordered_entry_fails_verify(store):
    entries = await decided(store)
    ids = [entry_id for entry_id, _ in entries]
    swapped = [entries[0], entries[2], entries[1], *entries[3:]]
    await rewrite(store, [(entry_id, fields) for entry_id, (_, fields) in zip(ids, swapped, strict=True)])

    broken, _ = await live_problem(store)

    assert broken is not None and broken.entry == ids[1] and "does not follow" in broken.why


async def test_a_trimmed_chain_verifies_from_its_checkpoint(store):
    entries = await decided(store)
    partition = store.keys.of("t1")
    cutoff = int(entries[3][0].split("-")[0])  # the entries of an earlier millisecond go

    trimmed = await store.retention.trim_audit(partition, cutoff)

    left = await audit_stream(store)
    assert trimmed >= 1 and left[0] == next(e for e in entries if int(e[0].split("-")[0]) >= cutoff)
    checkpoint = left[-1][1]
    assert checkpoint["outcome"] == CHECKPOINT and checkpoint["trimmed"] == left[0][1]["prev"]
    assert (await live_problem(store))[0] is None
    assert CHECKPOINT not in [e["outcome"] for e in await store.audit.entries()]  # not a decision

    await decided(store, approvals=1)  # then more, and everything trimmed: the checkpoint alone
    assert await store.retention.trim_audit(partition, int(left[-1][0].split("-")[0]) + 10**9) > 0
    assert [f["outcome"] for _, f in await audit_stream(store)] == [CHECKPOINT]
    assert (await live_problem(store))[0] is None


async def test_an_entry_removed_after_a_trim_fails_verify(store):
    entries = await decided(store)
    await store.retention.trim_audit(store.keys.of("t1"), int(entries[3][0].split("-")[0]))
    left = await audit_stream(store)
    await store.redis.xdel(store.keys.of("t1").audit, left[0][0])  # the oldest left: not trimmed

    broken, _ = await live_problem(store)

    assert broken is not None and broken.entry == left[1][0]


async def test_entries_from_before_the_chain_are_counted_and_one_after_it_fails(store):
    stream = store.keys.of("t1").audit
    old = {"approval_id": "a0", "thread_id": "t1", "interrupt_id": "i0", "index": "0", "tool": "t"}
    old |= {"user": "U0OLD", "at": "1.0", "decision": "null", "outcome": "decided", "original_args": "null"}
    for _ in range(3):
        await store.redis.xadd(stream, old)  # as a Signoff older than the chain wrote them
    await decided(store, approvals=1)

    broken, check = await live_problem(store)
    assert broken is None and (check.chained, check.unchained) == (3, 3)

    await store.redis.xadd(stream, old)  # one without the chain after it began
    broken, _ = await live_problem(store)
    assert broken is not None and "no hash" in broken.why


def tampered(name: str, value: str) -> str:
    """`value` changed as someone with Redis's password might change it, still readable by
    `signoff audit` (a time, an index, JSON stay what they were), so only the hash can tell."""
    if name == "at":
        return repr(float(value) + 1.0)
    if name == "index":
        return str(int(value) + 1)
    try:
        parsed = json.loads(value)
    except ValueError:
        return value + "x"  # text: a person, a tool, an id, an outcome
    return json.dumps({"was": parsed})  # JSON: a decision, arguments


async def every_kind_of_entry(tmp_path, store) -> list[tuple[str, str, dict[str, str]]]:
    """Chains holding every kind of entry the scripts write: a retention checkpoint, escalated,
    decided (a reject with its reason), a trust grant, a call approved under it, its revocation.
    (stream, entry id, fields) of each, oldest first in each chain."""
    older = await decided(store, approvals=1)
    await store.retention.trim_audit(store.keys.of("t1"), int(older[-1][0].split("-")[0]) + 1)  # a checkpoint
    await decided(store)
    policy = policy_permissions(tmp_path, GRANT_POLICY)
    grant, _ = await trusted_by(store, policy, gated("deploy", service="api"))
    assert (await asked_again(store, policy, gated("deploy", service="api"))).decided
    assert await store.grants.revoke(grant.id, BOB)
    found = []
    for partition in store.keys.partitions:
        found += [(partition.audit, i, f) for i, f in await store.redis.xrange(partition.audit)]
    outcomes = {f["outcome"] for _, _, f in found}
    assert outcomes == {"escalated", "decided", CHECKPOINT, "granted", "trusted", "revoked"}
    return found


async def test_changing_any_field_of_any_entry_fails_verify_naming_that_entry(tmp_path, store):
    """Every field the scripts audit is in the entry's hash: whichever one is changed (the
    outcome, the time, the rule, who granted…), `signoff audit verify` names the entry, in Redis
    and in an export, even when the export's readable columns are changed to match."""
    entries = await every_kind_of_entry(tmp_path, store)
    assert (await live_problem(store))[0] is None
    tried = 0
    for stream, entry_id, fields in entries:
        chain = [(i, f) for s, i, f in entries if s == stream]
        for name in fields:
            await store.redis.delete(stream)
            for other_id, other in chain:
                changed = {**other, name: tampered(name, other[name])} if other_id == entry_id else other
                await store.redis.xadd(stream, changed, id=other_id)

            broken, _ = await live_problem(store)

            assert broken is not None and broken.entry == entry_id, (name, fields[name], broken)
            assert "altered" in broken.why, (name, broken)
            tried += 1
        await store.redis.delete(stream)
        for other_id, other in chain:
            await store.redis.xadd(stream, other, id=other_id)
    assert tried > 60 and (await live_problem(store))[0] is None

    out = io.StringIO()
    await audit(store, out)
    lines = out.getvalue().splitlines()
    export = tmp_path / "audit.jsonl"
    for number, line in enumerate(lines[1:-1], 2):  # (the first and last lines say what it is)
        row = json.loads(line)
        fields = {**row["entry"], "prev": row["prev"], "hash": row["hash"]}
        for name in fields:
            changed = export_row(row["chain"], row["id"], {**fields, name: tampered(name, fields[name])})
            export.write_text("\n".join([*lines[: number - 1], json.dumps(changed), *lines[number:]]) + "\n")

            broken, _ = file_problem(str(export))

            assert broken is not None and broken.entry == f"line {number} ({row['id']})", (name, broken)
            assert "altered" in broken.why, (name, broken)


@pytest.mark.parametrize("since", [None, "1h"])
async def test_an_export_whose_entries_lost_their_hashes_fails_verify(store, tmp_path, since):
    """With its hashes and links set to null, every entry but a chain's last could be rewritten at
    will, were such entries taken as written before the chain began: they are not, whether the
    export is whole (its chain must begin as the live one does) or begins part-way (`--since`)."""
    approval = await two_action_approval(store)
    await store.decisions.decide(approval.approval_id, 0, Approve(), "U0ALICE")
    await store.decisions.decide(approval.approval_id, 1, Reject(message="fraud"), "U0ALICE")
    out = io.StringIO()
    await audit(store, out, since=since)
    header, first, last, end = out.getvalue().removesuffix("\n").split("\n")
    row = json.loads(first)
    row["prev"] = row["hash"] = None
    row["user"] = row["entry"]["user"] = "U0CFO"
    export = tmp_path / "audit.jsonl"
    export.write_text("\n".join([header, json.dumps(row), last, end]) + "\n")

    broken, _ = file_problem(str(export))

    assert broken is not None, "a forged entry verified"


async def test_a_line_separator_an_agent_wrote_leaves_the_export_verifiable(store, tmp_path):
    approval = await two_action_approval(store)
    await store.redis.hset(
        store.keys.approval(approval.approval_id), "args:1", '{"body": "hi\u2028there\u0085"}'
    )
    await store.decisions.decide(approval.approval_id, 1, Reject(message="no\u2029thanks"), "U0ALICE")
    out = io.StringIO()
    await audit(store, out)
    export = tmp_path / "audit.jsonl"
    export.write_text(out.getvalue(), encoding="utf-8")

    broken, check = file_problem(str(export))

    assert broken is None and check.chained == 1
