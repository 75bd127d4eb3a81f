"""`signoff audit verify [FILE]` and `signoff audit --sign KEY`: an audit nobody can quietly edit.

`verify` checks every chain (`core.audit_chain`), of the live streams or of an export (JSON
lines), and names the first entry that does not verify: altered, removed or moved. Live, a
chain must begin with nothing before it or with what a retention checkpoint says was trimmed,
and end at the head Redis keeps; an export's chains begin where the export does (`--since`),
which its signature fixes. Entries written before the chain existed are counted, not covered.

An export's first and last lines say what it is and where each chain ends (its first entry, its
count and its head): an export cut at either end fails without a key. (A key is what shows that
nobody rewrote the whole file, those lines included.)

`--sign KEY` (an Ed25519 private key, PEM) writes a detached signature of an export's bytes
beside it (`FILE.sig`, the 64 raw bytes: `openssl pkeyutl -verify -rawin` checks it too), and
`verify FILE --key PUB` checks it before the chains; without `--key`, a signature beside the
file is said not to have been checked.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, TextIO

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from core.audit_chain import Broken, ChainCheck
from core.store import Store
from signoff.commands.audit import AUDIT_COLUMNS, audit_row


class KeyRefused(ValueError):
    """A key or file `--sign` / `--key` / verify cannot use, in one line."""


def _read(path: str, what: str) -> bytes:
    try:
        return Path(path).read_bytes()
    except OSError as exc:
        raise KeyRefused(f"{what} {path}: cannot read it ({exc.strerror})") from None


def private_key(path: str) -> Ed25519PrivateKey:
    """The signing key `--sign` names: an unencrypted Ed25519 private key in PEM."""
    try:
        key = serialization.load_pem_private_key(_read(path, "--sign"), password=None)
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyRefused(f"--sign {path}: not an unencrypted PEM private key") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise KeyRefused(f"--sign {path}: not an Ed25519 key (openssl genpkey -algorithm ed25519)")
    return key


def public_key(path: str) -> Ed25519PublicKey:
    """The key `--key` names: an Ed25519 public key in PEM."""
    try:
        key = serialization.load_pem_public_key(_read(path, "--key"))
    except (ValueError, TypeError, UnsupportedAlgorithm):
        raise KeyRefused(f"--key {path}: not a PEM public key") from None
    if not isinstance(key, Ed25519PublicKey):
        raise KeyRefused(f"--key {path}: not an Ed25519 public key")
    return key


def signature_path(export: str) -> str:
    return f"{export}.sig"


def sign(export: str, key: Ed25519PrivateKey) -> str:
    """Write the detached signature of the file `export`; returns where."""
    where = signature_path(export)
    Path(where).write_bytes(key.sign(Path(export).read_bytes()))
    return where


def signature_problem(export: str, key: Ed25519PublicKey) -> str | None:
    """Why the signature beside `export` does not verify it, or None when it does."""
    try:
        signature = Path(signature_path(export)).read_bytes()
    except OSError:
        return f"no signature at {signature_path(export)}"
    try:
        key.verify(signature, Path(export).read_bytes())
    except InvalidSignature:
        return "the signature does not match: the file or its signature changed, or another key signed it"
    return None


def file_problem(export: str) -> tuple[Broken | None, ChainCheck]:
    """The first entry of an export (JSON lines) that does not verify, if any: its first line
    says it is an unfiltered export, its last gives each chain's first entry, count and head."""
    check = ChainCheck(anchored=True)
    # (JSON lines end at "\n" only: an agent's U+2028 inside a value is not a line's end)
    lines = _read(export, "verify").decode("utf-8", errors="replace").removesuffix("\n").split("\n")
    header, end = _marker(lines[0] if lines else "", "export"), _marker(lines[-1] if lines else "", "end")
    # From the beginning (no --since), each chain must begin where the live one does: with
    # nothing before it, or what a retention checkpoint says was trimmed; from part-way, it
    # begins where the export does, and no entry may lack a hash.
    whole = header is not None and not header.get("since")
    check = ChainCheck(anchored=not whole, unchained=whole)
    if header is None:
        return Broken("?", "line 1", "not the first line of an export: its beginning was cut"), check
    if header.get("filtered"):
        return Broken(
            "?", "line 1", "a filtered export (--tool, --user) leaves entries out: export all"
        ), check
    if end is None or len(lines) < 2:
        return Broken("?", f"line {len(lines)}", "not the last line of an export: its end was cut"), check
    seen: dict[str, dict[str, Any]] = {}
    for number, line in enumerate(lines[1:-1], 2):
        where = f"line {number}"
        try:
            row = json.loads(line)
            entry = {str(k): str(v) for k, v in row["entry"].items()}
            chain, where = str(row["chain"]), f"line {number} ({row['id']})"
        except (ValueError, KeyError, TypeError, AttributeError):
            return Broken("?", where, "not a line of `signoff audit --format jsonl`"), check
        if not _says_its_entry(row, entry):
            return Broken(chain, where, "altered: its columns do not say what its entry does"), check
        if row.get("hash") is not None:
            entry.update(prev=str(row.get("prev") or ""), hash=str(row["hash"]))
        if broken := check.add(chain, where, entry):
            return broken, check
        ours = seen.setdefault(chain, {"first": str(row["id"]), "entries": 0, "head": None})
        ours["entries"] += 1
        ours["head"] = entry.get("hash") or ours["head"]
    for chain in list(check.chains):
        if broken := check.finish(chain):
            return broken, check
    chains = end.get("chains")
    said: dict[str, Any] = chains if isinstance(chains, dict) else {}
    for chain in sorted(set(said) | set(seen)):
        if said.get(chain) != seen.get(chain):
            return Broken(chain, f"line {len(lines)}", _cut(said.get(chain), seen.get(chain))), check
    return None, check


def _marker(line: str, kind: str) -> dict[str, Any] | None:
    """An export's first (`export`) or last (`end`) line, or None when `line` is not one."""
    try:
        found = json.loads(line)
    except ValueError:
        return None
    return found if isinstance(found, dict) and found.get("signoff_audit") == kind else None


def _cut(said: Any, seen: dict[str, Any] | None) -> str:
    """How a chain's entries differ from what the export's last line says of them."""
    if not isinstance(said, dict):
        return "its last line does not name this chain: lines were added or the end was replaced"
    if seen is None:
        return f"its last line says {said.get('entries')} entries of this chain, and none is left"
    if said.get("first") != seen["first"]:
        return f"its first entry should be {said.get('first')}, not {seen['first']}: its beginning was cut"
    return (
        f"its last line says {said.get('entries')} entries ending at {said.get('head')}, "
        f"not {seen['entries']} ending at {seen['head']}: entries were cut"
    )


def _says_its_entry(row: dict[str, Any], entry: dict[str, str]) -> bool:
    """Whether a line's readable columns are those of its entry (the hash covers the entry)."""
    try:
        return {c: row.get(c) for c in AUDIT_COLUMNS} == json.loads(json.dumps(audit_row(entry)))
    except (ValueError, KeyError, TypeError, AttributeError):
        return False


async def live_problem(store: Store) -> tuple[Broken | None, ChainCheck]:
    """The first entry of the live audit streams that does not verify, if any. A trim between
    reading a chain's head and its oldest entries can make them disagree: a chain that fails is
    read again once (one tampered with fails both times)."""
    broken, check = await _live_once(store)
    if broken:
        broken, check = await _live_once(store)
    return broken, check


async def _live_once(store: Store) -> tuple[Broken | None, ChainCheck]:
    """Each partition's head and newest entry read together, then its entries up to that one."""
    check = ChainCheck()
    heads, until = {}, {}
    for partition in store.keys.partitions:
        heads[partition.index], newest = await store.audit.tail(partition)
        until[partition.index] = newest or "0-0"  # (no entry is 0-0: nothing to read)
    async for index, entry_id, fields in store.queue.paged_by_partition(lambda p: p.audit, until=until):
        if broken := check.add(str(index), entry_id, fields):
            return broken, check
    for index, head in heads.items():
        if broken := check.finish(str(index), head, live=True):
            return broken, check
    return None, check


def report(out: TextIO, broken: Broken | None, check: ChainCheck, signed: bool = False) -> int:
    """Say what verified (0), or the first entry that does not (1)."""
    if broken:
        out.write(f"The audit does not verify: {broken}.\n")
        return 1
    before = f"; {check.unchained} written before the chain began, not covered" if check.unchained else ""
    chains = sum(1 for c in check.chains.values() if c.last is not None)
    out.write(f"Verified: {check.chained} entries in {chains} chain{'' if chains == 1 else 's'}{before}")
    out.write(" (signature good).\n" if signed else ".\n")
    return 0


def verify_file(export: str, key_path: str | None, out: TextIO) -> int:
    """`signoff audit verify FILE [--key PUB]`: the signature first, then the chains."""
    key: Any = public_key(key_path) if key_path else None
    if key is not None and (problem := signature_problem(export, key)):
        out.write(f"The audit does not verify: {problem}.\n")
        return 1
    broken, check = file_problem(export)
    code = report(out, broken, check, signed=key is not None)
    if key is None and Path(signature_path(export)).exists():
        out.write(
            f"Its signature ({signature_path(export)}) was not checked: give the public key with --key.\n"
        )
    return code


async def verify_live(store: Store, out: TextIO) -> int:
    """`signoff audit verify`: every partition's chain in Redis."""
    broken, check = await live_problem(store)
    return report(out, broken, check)
