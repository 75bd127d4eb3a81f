"""The model's Markdown -> Slack mrkdwn, escaped like all agent text. Pure.

Links become `label (url)` rather than `<url|label>`: a link label written by
the agent must not hide where it points.
"""

from __future__ import annotations

import re

from bot.cards import escape

_FENCE = re.compile(r"```.*?```", re.S)
_INLINE_CODE = re.compile(r"`[^`\n]+`")
_BOLD = re.compile(r"\*\*(.+?)\*\*|__(.+?)__")
_ITALIC = re.compile(r"(?<![\*\w])\*(?!\s)([^*\n]+?)(?<!\s)\*(?![\*\w])")
_STRIKE = re.compile(r"~~(.+?)~~")
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*$", re.M)
_BULLET = re.compile(r"^(\s*)[-*+]\s+", re.M)


def to_mrkdwn(markdown: str) -> str:
    text = escape(markdown)
    kept: list[str] = []

    def keep(match: re.Match[str]) -> str:
        kept.append(match.group(0))
        return f"\x00{len(kept) - 1}\x00"

    text = _FENCE.sub(keep, text)
    text = _INLINE_CODE.sub(keep, text)
    text = _LINK.sub(
        lambda m: m.group(1) if m.group(1) == m.group(2) else f"{m.group(1)} ({m.group(2)})", text
    )
    text = _BULLET.sub(lambda m: f"{m.group(1)}• ", text)
    text = _ITALIC.sub(lambda m: f"_{m.group(1)}_", text)
    text = _BOLD.sub(lambda m: f"*{m.group(1) or m.group(2)}*", text)
    text = _STRIKE.sub(lambda m: f"~{m.group(1)}~", text)
    text = _HEADING.sub(lambda m: f"*{m.group(1)}*", text)
    return re.sub("\x00(\\d+)\x00", lambda m: kept[int(m.group(1))], text)


def split_mrkdwn(text: str, limit: int = 3_500) -> list[str]:
    """Cut at paragraph or line ends; a code block cut in two is closed and reopened."""
    chunks, rest = [], text
    while len(rest) > limit:
        at = max(rest.rfind("\n\n", 0, limit), rest.rfind("\n", 0, limit))
        at = at if at > limit // 2 else limit
        chunk, rest = rest[:at], rest[at:].lstrip("\n")
        if chunk.count("```") % 2:
            chunk, rest = chunk + "\n```", "```\n" + rest
        chunks.append(chunk)
    return [*chunks, rest] if rest else chunks
