"""The audit chain's canonical encoding and its check, without Redis (the chain through Redis:
tests/redis/test_audit_chain.py)."""

from __future__ import annotations

from core.audit_chain import ChainCheck, canonical, entry_hash


def test_the_canonical_encoding_is_every_field_but_the_hash_sorted_and_length_prefixed():
    fields = {"user": "U0A", "prev": "", "hash": "ignored", "decision": 'a\nb="é"'}

    assert canonical(fields) == 'decision=8:a\nb="é"\nprev=0:\nuser=3:U0A\n'.encode()
    assert canonical({"a": "1\nb=2"}) != canonical({"a": "1", "b": "2"})


def chain(count: int) -> list[dict[str, str]]:
    entries, prev = [], ""
    for n in range(count):
        fields = {"user": f"U{n}", "outcome": "decided", "prev": prev}
        fields["hash"] = prev = entry_hash(fields)
        entries.append(fields)
    return entries


def test_an_export_begins_where_it_begins_the_live_chain_with_nothing_before_it():
    tail = chain(4)[2:]  # an export `--since` part-way
    anchored, live = ChainCheck(anchored=True), ChainCheck()
    for n, fields in enumerate(tail):
        assert anchored.add("0", str(n), fields) is None and live.add("0", str(n), fields) is None

    assert anchored.finish("0") is None
    broken = live.finish("0", tail[-1]["hash"], live=True)
    assert broken is not None and broken.entry == "0" and "gone" in broken.why
