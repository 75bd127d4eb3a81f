"""`signoff audit verify` and `signoff audit --sign`, run as an operator and an auditor run them:
an export that verifies, with and without its signature; one changed byte, line or signature
that does not; keys it cannot use refused in one line."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.asymmetric.rsa import generate_private_key

from core.protocol import Approve, Reject
from tests.support.files import audit_rows
from tests.support.harness import Harness, signoff
from tests.support.records import two_action_approval


def key_files(tmp_path) -> tuple[str, str]:
    key = Ed25519PrivateKey.generate()
    private, public = tmp_path / "audit.pem", tmp_path / "audit.pub"
    private.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    public.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return str(private), str(public)


async def decide_some(scene: Harness, count: int = 3) -> None:
    for n in range(count):
        approval = await two_action_approval(scene.store)
        await scene.store.decisions.decide(approval.approval_id, 0, Approve(), "U0A")
        await scene.store.decisions.decide(approval.approval_id, 1, Reject(message=f"not {n}"), "U0B")


async def test_a_signed_export_verifies_and_fails_when_one_byte_changes(redis_url, tmp_path):
    private, public = key_files(tmp_path)
    export = tmp_path / "audit.jsonl"
    async with Harness(redis_url) as scene:
        await decide_some(scene)
        live = await signoff(scene, "audit", "verify")
        made = await signoff(scene, "audit", "--output", str(export), "--sign", private)
        good = await signoff(scene, "audit", "verify", str(export), "--key", public)
        text = export.read_bytes()
        export.write_bytes(text.replace(b'"U0B"', b'"U0C"', 1))  # one byte
        changed = await signoff(scene, "audit", "verify", str(export), "--key", public)
        export.write_bytes(text)
        unsigned_check = await signoff(scene, "audit", "verify", str(export))

    assert (live.returncode, live.stdout) == (0, "Verified: 6 entries in 1 chain.\n"), live.stderr
    assert made.returncode == 0 and (tmp_path / "audit.jsonl.sig").stat().st_size == 64, made.stderr
    rows = audit_rows(text.decode())
    assert [r["user"] for r in rows] == ["U0A", "U0B"] * 3
    assert rows[0]["prev"] == "" and all(b["prev"] == a["hash"] for a, b in zip(rows, rows[1:], strict=False))
    assert (good.returncode, good.stdout) == (0, "Verified: 6 entries in 1 chain (signature good).\n")
    assert changed.returncode == 1 and "signature does not match" in changed.stdout
    assert (unsigned_check.returncode, unsigned_check.stdout) == (
        0,
        "Verified: 6 entries in 1 chain.\n"
        f"Its signature ({export}.sig) was not checked: give the public key with --key.\n",
    )


@pytest.mark.skipif(not shutil.which("openssl"), reason="no openssl here")
async def test_an_auditor_without_signoff_checks_the_signature_with_openssl(redis_url, tmp_path):
    private, public = key_files(tmp_path)
    export = tmp_path / "audit.jsonl"
    async with Harness(redis_url) as scene:
        await decide_some(scene, 1)
        await signoff(scene, "audit", "-o", str(export), "--sign", private)
    command = ["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", public, "-rawin", "-in", str(export)]

    checked = subprocess.run([*command, "-sigfile", f"{export}.sig"], capture_output=True, text=True)

    assert checked.returncode == 0, checked.stdout + checked.stderr


@pytest.mark.parametrize("change", ["altered", "removed", "reordered", "column"])
async def test_an_export_with_an_entry_changed_fails_verify_naming_it(redis_url, tmp_path, change):
    export = tmp_path / "audit.jsonl"
    async with Harness(redis_url) as scene:
        await decide_some(scene)
        await signoff(scene, "audit", "-o", str(export))
        lines = export.read_text().splitlines()
        third = json.loads(lines[2])
        if change == "altered":  # the entry and its column, consistently: only the hash tells
            third["entry"]["user"] = third["user"] = "U0MALLORY"
            lines[2] = json.dumps(third)
        elif change == "column":  # the column a reader reads, the entry left
            third["user"] = "U0MALLORY"
            lines[2] = json.dumps(third)
        elif change == "removed":
            del lines[2]
        else:
            lines[2], lines[3] = lines[3], lines[2]
        export.write_text("\n".join(lines) + "\n")

        checked = await signoff(scene, "audit", "verify", str(export))

    assert checked.returncode == 1
    assert checked.stdout.startswith("The audit does not verify: chain 0, entry line 3 ("), checked.stdout


@pytest.mark.parametrize(
    ("cut", "said"),
    [
        ("the first entry", "it follows an entry that is gone"),
        ("the last entry", "entries were cut"),
        ("the first line", "not the first line of an export: its beginning was cut"),
        ("the last line", "not the last line of an export: its end was cut"),
        ("every line but the first and last", "and none is left"),
    ],
)
async def test_an_export_cut_at_either_end_fails_verify_without_a_key(redis_url, tmp_path, cut, said):
    export = tmp_path / "audit.jsonl"
    async with Harness(redis_url) as scene:
        await decide_some(scene)
        await signoff(scene, "audit", "-o", str(export))
        lines = export.read_text().splitlines()
        kept = {
            "the first entry": [lines[0], *lines[2:]],
            "the last entry": [*lines[:-2], lines[-1]],
            "the first line": lines[1:],
            "the last line": lines[:-1],
            "every line but the first and last": [lines[0], lines[-1]],
        }[cut]
        export.write_text("\n".join(kept) + "\n")

        checked = await signoff(scene, "audit", "verify", str(export))

    assert checked.returncode == 1 and checked.stdout.startswith("The audit does not verify: "), (
        checked.stdout
    )
    assert said in checked.stdout


async def test_a_filtered_export_is_not_verified_as_if_it_were_whole(redis_url, tmp_path):
    export = tmp_path / "audit.jsonl"
    async with Harness(redis_url) as scene:
        await decide_some(scene)
        await signoff(scene, "audit", "-o", str(export), "--user", "U0A")
        checked = await signoff(scene, "audit", "verify", str(export))

    assert (
        checked.returncode == 1 and "a filtered export (--tool, --user) leaves entries out" in checked.stdout
    )


async def test_keys_and_files_it_cannot_use_are_refused_in_one_line(redis_url, tmp_path):
    rsa = tmp_path / "rsa.pem"
    rsa.write_bytes(
        generate_private_key(65537, 2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
        )
    )
    (tmp_path / "junk.pem").write_text("not a key\n")
    out = str(tmp_path / "a.jsonl")
    async with Harness(redis_url) as scene:
        results = [
            await signoff(scene, "audit", "-o", out, "--sign", str(rsa)),
            await signoff(scene, "audit", "-o", out, "--sign", str(tmp_path / "junk.pem")),
            await signoff(scene, "audit", "-o", out, "--sign", str(tmp_path / "missing.pem")),
            await signoff(scene, "audit", "--sign", str(rsa)),
            await signoff(scene, "audit", "verify", out, "--key", str(tmp_path / "junk.pem")),
            await signoff(scene, "audit", "verify", str(tmp_path / "missing.jsonl")),
        ]

    for result in results:
        assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
        assert result.stderr.startswith("signoff: ") and "Traceback" not in result.stderr
    assert "not an Ed25519 key" in results[0].stderr and "--output FILE" in results[3].stderr
