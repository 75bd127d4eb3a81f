"""The README's "Put your own agent behind Signoff", as a newcomer copies it: `myagent.py`,
`my.toml` and the `signoff try` line, taken from README.md itself (so the tests run what the
README says, not a copy that drifts from it)."""

from __future__ import annotations

import re
import shlex
import textwrap
from pathlib import Path

from tests.support.paths import ROOT

SECTION = "## Put your own agent behind Signoff"


def _section() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index(SECTION)
    return text[start : text.index("\n## ", start + len(SECTION))]


def readme_blocks(language: str) -> list[str]:
    """The section's fenced blocks in `language`, dedented as a reader copies them."""
    found = re.findall(rf"^( *)```{language}\n(.*?)^\1```$", _section(), flags=re.S | re.M)
    return [textwrap.dedent(body) for _, body in found]


def own_agent_folder(folder: Path) -> Path:
    """`folder` with the README's myagent.py and my.toml in it."""
    (agent,) = [block for block in readme_blocks("python") if block.startswith("# myagent.py")]
    (policy,) = readme_blocks("toml")
    (folder / "myagent.py").write_text(agent)
    (folder / "my.toml").write_text(policy)
    return folder


def try_command() -> list[str]:
    """The README's `signoff try …` line, as arguments (after `signoff`)."""
    lines = [line for block in readme_blocks("sh") for line in block.splitlines()]
    (command,) = [line for line in lines if line.startswith("signoff try ")]
    return shlex.split(command)[1:]
