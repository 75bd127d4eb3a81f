"""Files a test writes (a policy) and reads (a tool's ledger)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bot.permissions import Permissions
from core.config import Settings


def write_policy(tmp_path: Path, text: str, name: str = "signoff.toml") -> str:
    """`text` as a policy file in `tmp_path`; its path."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def lines(path: Path) -> list[str]:
    """A ledger's lines (none while the file does not exist)."""
    return path.read_text().splitlines() if path.exists() else []


def policy_permissions(tmp_path: Path, text: str) -> Permissions:
    """What the bot makes of the policy `text` (written as a file, loaded as at start)."""
    return Permissions(Settings.from_env({"SIGNOFF_POLICY": write_policy(tmp_path, text)}).policy)


def audit_rows(text: str) -> list[dict[str, Any]]:
    """The entries of a `signoff audit` JSON export (its first and last lines say what it is)."""
    rows = [json.loads(line) for line in text.removesuffix("\n").split("\n")]
    assert rows and rows[0].get("signoff_audit") == "export" and rows[-1].get("signoff_audit") == "end"
    return rows[1:-1]
