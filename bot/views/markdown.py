"""The model's Markdown -> Slack mrkdwn, through a real parser. Pure.

markdown-it-py parses (CommonMark plus tables and strikethrough, raw HTML
as text) and this module renders the tokens as mrkdwn; every piece of text
goes through `escape`, so nothing the model writes pings anyone, and links
become `label (url)` rather than `<url|label>`: a link label written by the
agent must not hide where it points. Slack's own `markdown` block would
convert links into disguised ones, which is why it is not used.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.token import Token

from bot.views.text import escape, visible

_PARSER = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])
_MARKS = {"strong": "*", "em": "_", "s": "~"}
_MARKDOWN_MARKS = {"strong": "**", "em": "_", "s": "~~"}
# What Markdown would read as formatting in plain text (an underscore inside a word it does not)
_ACTIVE = re.compile(r"[\\`*~\[\]]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9])")


def to_mrkdwn(markdown: str) -> str:
    source = visible(markdown)
    return _Renderer(source.split("\n")).blocks(_PARSER.parse(source)).strip("\n")


def to_markdown(markdown: str) -> str:
    """The model's Markdown, rebuilt as the Markdown Slack's streaming methods take: the same
    rules as `to_mrkdwn` (every text escaped: no mention, no `<url|label>`; links shown as
    `label (url)`), and the model's own text never read as formatting (backslash-escaped)."""
    source = visible(markdown)
    return _Renderer(source.split("\n"), markdown=True).blocks(_PARSER.parse(source)).strip("\n")


class _Renderer:
    def __init__(self, lines: list[str], markdown: bool = False) -> None:
        self.markdown = markdown  # standard Markdown out (the streaming methods), else mrkdwn
        self.marks = _MARKDOWN_MARKS if markdown else _MARKS
        self.lines = lines  # the source, to keep its blank lines between blocks
        self.lists: list[list[int]] = []  # per open list: [next number], or [] for bullets
        self.quotes: list[int] = []  # where each open quote starts in the output
        self.links: list[tuple[int, str]] = []  # where each open link's label starts, and its href
        self.row: list[str] | None = None  # the cells of the table row being read

    def blocks(self, tokens: Sequence[Token]) -> str:
        out: list[str] = []
        blank = -1  # the length of `out` when a blank line was last added
        for token in tokens:
            kind = token.type
            if kind != "inline" and token.map and token.nesting >= 0 and out and out[-1].endswith("\n"):
                start = token.map[0]
                if start > 0 and not self.lines[start - 1].strip() and blank != len(out):
                    out.append("\n")  # the source has a blank line here: so does Slack
                    blank = len(out)
            if kind == "inline":
                text = self.inline(token.children or [])
                if self.row is not None:
                    self.row.append(text)
                else:
                    out.append(text)
            elif kind == "heading_open":
                out.append(self.marks["strong"])
            elif kind == "heading_close":
                out.append(self.marks["strong"] + "\n")
            elif kind == "paragraph_close":
                out.append("\n")
            elif kind in ("bullet_list_open", "ordered_list_open"):
                if self.lists and out and not out[-1].endswith("\n"):
                    out.append("\n")
                self.lists.append([int(token.attrGet("start") or 1)] if kind == "ordered_list_open" else [])
            elif kind in ("bullet_list_close", "ordered_list_close"):
                self.lists.pop()
            elif kind == "list_item_open":
                numbering = self.lists[-1]
                mark = f"{numbering[0]}." if numbering else "-" if self.markdown else "•"
                if numbering:
                    numbering[0] += 1
                out.append("    " * (len(self.lists) - 1) + mark + " ")
            elif kind in ("fence", "code_block"):
                code = escape(token.content.rstrip("\n"))
                fence = _fence(code, 3) if self.markdown else "```"  # (Markdown: nothing closes it early)
                out.append(f"{fence}\n{code}\n{fence}\n")
            elif kind == "hr":
                out.append("───\n")
            elif kind == "blockquote_open":
                self.quotes.append(len(out))
            elif kind == "blockquote_close":
                at = self.quotes.pop()
                quoted = "".join(out[at:]).strip("\n")
                quote = "> " if self.markdown else "&gt; "
                out[at:] = ["\n".join(f"{quote}{line}" for line in quoted.split("\n")) + "\n"]
            elif kind == "tr_open":
                self.row = []
            elif kind == "tr_close" and self.row is not None:
                out.append(" | ".join(self.row) + "\n")
                self.row = None
            elif kind == "thead_close":
                out.append("───\n")
        return "".join(out)

    def inline(self, tokens: Sequence[Token]) -> str:
        out: list[str] = []
        for token in tokens:
            kind = token.type
            if kind in ("text", "html_inline"):
                said = escape(token.content)
                out.append(_ACTIVE.sub(lambda m: "\\" + m.group(0), said) if self.markdown else said)
            elif kind == "code_inline":
                code = escape(token.content)
                if self.markdown:  # a fence longer than any backtick run in it, so it cannot end early
                    fence = _fence(code, 1)
                    out.append(f"{fence} {code} {fence}" if "`" in code else f"`{code}`")
                else:
                    out.append(f"`{code}`")
            elif kind in ("softbreak", "hardbreak"):
                out.append("\n")
            elif kind.removesuffix("_open") in self.marks:
                out.append(self.marks[kind.removesuffix("_open")])
            elif kind.removesuffix("_close") in self.marks:
                out.append(self.marks[kind.removesuffix("_close")])
            elif kind == "link_open":
                self.links.append((len(out), escape(token.attrGet("href") or "")))
            elif kind == "link_close":
                at, href = self.links.pop()
                label = "".join(out[at:])
                out[at:] = [label if label == href else f"{label} ({href})" if label else href]
            elif kind == "image":  # its alt text rendered as any text (it may hold a link)
                alt, src = self.inline(token.children or []), escape(token.attrGet("src") or "")
                out.append(f"{alt} ({src})" if alt else src)
        return "".join(out)


def _fence(code: str, least: int) -> str:
    """Backticks enough to open and close `code`: more than its longest run of them."""
    longest = max((len(run) for run in re.findall(r"`+", code)), default=0)
    return "`" * max(least, longest + 1)


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
