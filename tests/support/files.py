"""Files a test writes (a policy) and reads (a tool's ledger)."""

from __future__ import annotations

from pathlib import Path


def write_policy(tmp_path: Path, text: str, name: str = "signoff.toml") -> str:
    """`text` as a policy file in `tmp_path`; its path."""
    path = tmp_path / name
    path.write_text(text)
    return str(path)


def lines(path: Path) -> list[str]:
    """A ledger's lines (none while the file does not exist)."""
    return path.read_text().splitlines() if path.exists() else []
