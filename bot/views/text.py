"""Untrusted text made safe for Slack, in one place. Pure.

Everything the agent, a tool or a request wrote reaches Slack through
`escape` (mrkdwn) or `visible` (plain text): control characters (NUL and
the rest, except tab and newline) are removed; Unicode format characters
(category Cf: bidi overrides such as U+202E, zero-width spaces, invisible
tag characters), line/paragraph separators, other default-ignorable or
blank-looking characters (Hangul fillers, variation selectors outside emoji),
private-use and unassigned code points are shown as `⟨U+202E⟩`, so
an approver sees what will really be sent; `& < >` are escaped so no text
pings a channel or disguises a link. A zero-width joiner between two
symbols is kept: it is how emoji such as 👩‍💻 are spelled.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from typing import Any

# Default-ignorable and blank-looking characters outside Cf: Hangul fillers, the combining
# grapheme joiner, Khmer inherent vowels, variation selectors, Mongolian selectors, braille blank.
_IGNORABLE = {0x034F, 0x115F, 0x1160, 0x17B4, 0x17B5, 0x2800, 0x3164, 0xFFA0}
_IGNORABLE |= {*range(0x180B, 0x1810), *range(0xFE00, 0xFE10), *range(0xE0100, 0xE01F0)}
_SHOWN_CATEGORIES = ("Cf", "Zl", "Zp", "Co", "Cn")  # format, separators, private use, unassigned


def _hidden_class() -> str:
    shown = [
        c
        for c in range(sys.maxunicode + 1)
        if c in _IGNORABLE or unicodedata.category(chr(c)) in _SHOWN_CATEGORIES
    ]
    ranges: list[tuple[int, int]] = []
    for c in shown:
        if ranges and ranges[-1][1] == c - 1:
            ranges[-1] = (ranges[-1][0], c)
        else:
            ranges.append((c, c))
    return "".join(re.escape(chr(a)) + (f"-{re.escape(chr(b))}" if b > a else "") for a, b in ranges)


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
_HIDDEN = re.compile(f"[{_hidden_class()}]")
_ZWJ = "\u200d"


def _is_symbol(char: str) -> bool:
    return unicodedata.category(char) in ("So", "Sk") or char == "\ufe0f"


def _shown(match: re.Match[str]) -> str:
    char, at, text = match.group(0), match.start(), match.string
    if char == _ZWJ and 0 < at < len(text) - 1 and _is_symbol(text[at - 1]) and _is_symbol(text[at + 1]):
        return char
    if char in "\ufe0e\ufe0f" and at > 0 and _is_symbol(text[at - 1]):
        return char  # an emoji's text or emoji presentation (❤️)
    return f"⟨U+{ord(char):04X}⟩"


def visible(text: Any) -> str:
    """Control characters removed, format characters shown: for plain_text fields."""
    plain = _CONTROL.sub("", str(text))
    if plain.isascii():  # (every character `_HIDDEN` names is beyond ASCII: a test says so)
        return plain
    return _HIDDEN.sub(_shown, plain)


def escape(text: Any) -> str:
    """`visible`, then mrkdwn's control characters neutralised: no pings, no disguised links."""
    return visible(text).replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def hidden(text: str) -> bool:
    """Whether `text` holds characters `visible` would remove or show differently."""
    return bool(_CONTROL.search(text)) or any(_shown(m) != m.group(0) for m in _HIDDEN.finditer(text))


def cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: max(0, limit - 1)] + "…"
