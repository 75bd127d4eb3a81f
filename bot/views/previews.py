"""What a call will do, on its card and in **View the whole change** (`core.previews`). Pure.

On a card: a line saying what the call does ("edits /plans/launch.md: +1 −1 lines", and a
warning when it will fail), then its first lines in a `rich_text_preformatted` block (a diff's
`-` / `+` lines as written), each cut at `CARD_WIDTH` characters with a `…` marker so a phone
shows the card without a sideways scroll. The modal pages through the whole of it,
`PAGE_LINES` lines a page, with ◀ / ▶ buttons that name the page they go to
(`preview_page:<page>`), as the review modal does.

An edit shows before and after: beside the one-line changes (`card_words.edited_changes`),
every argument whose change one line cannot show (a text of several lines, or a long one) is
shown as its own diff (`edit_block`), both sides masked as the arguments are (`ActionReview.shown`).

Text safety: a rich_text text element is shown as written and never parsed (no mention, no
link, no `&lt;`), so agent text goes through `visible` (control characters removed, hidden ones
shown as ⟨U+…⟩); a Markdown preview goes through `to_mrkdwn`, which escapes everything it
writes; a summary and a warning through `escape`.
"""

from __future__ import annotations

from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    MarkdownTextObject,
    RichTextBlock,
    RichTextElementParts,
    RichTextPreformattedElement,
    SectionBlock,
)
from slack_sdk.models.views import View

from bot.views.markdown import split_mrkdwn, to_mrkdwn
from bot.views.text import cut, escape, visible
from core.previews import ABSENT, Preview, argument_diff
from core.protocol import ActionReview
from core.records import Approval

CARD_WIDTH = 40  # characters of a line on a card: what a 390 px phone shows in a code block
CARD_LINES = 12  # lines a card shows at most
PAGE_LINES = 100  # lines a page of the modal shows
PAGE_WIDTH = 400  # characters of a line in the modal (Slack wraps them there)
BLOCK_TEXT = 2_900  # characters of one preformatted block (a section's 3,000, with a margin)
ONE_LINE = 80  # what `edited_changes` shows of a value in its one line
WHOLE = "View the whole change"
MARK = "…"


def summary_line(preview: Preview, shown: int | None = None, after_edit: bool = False) -> str:
    """What the call does, in mrkdwn (escaped): its summary, how much the card shows, whether the
    text was cut at the size limit, and its warning."""
    what = preview.summary or ("Preview" if preview.source == "file" else f"Preview ({preview.source})")
    line = f"📄 *{escape(cut(what, 300))}*"
    total = len(preview.lines)
    if shown is not None and 0 < shown < total:
        line += f" _(first {shown} of {total:,} lines)_"
    if preview.truncated:
        line += f" _(cut at {len(preview.text):,} characters: the rest is not kept)_"
    if after_edit:
        line += "\n_The call as the agent asked it: the edit below changes it._"
    if preview.warning:
        line += f"\n⚠️ *{escape(cut(preview.warning, 300))}*"
    return line


def card_blocks(
    preview: Preview, index: int, value: str, budget: int, room: int, after_edit: bool = False
) -> list[Block]:
    """A card's preview of action `index`: its line (with **View the whole change** when there
    is text to read) and, with `room` for a second block, its first lines within `budget`
    characters. No block at all without room (`summary_line` then goes in the action's text)."""
    if room < 1:
        return []
    lines = [] if after_edit or room < 2 else _card_lines(preview, budget)
    accessory = ButtonElement(text=WHOLE, action_id=f"preview:{index}", value=value) if preview.text else None
    blocks: list[Block] = [
        SectionBlock(
            block_id=f"preview:{index}",
            text=MarkdownTextObject(text=summary_line(preview, len(lines) or None, after_edit)),
            accessory=accessory,
        )
    ]
    if lines:
        blocks.append(_lines_block(preview, lines, f"lines:{index}"))
    return blocks


def _card_lines(preview: Preview, budget: int) -> list[str]:
    """The lines a card shows, within `budget` characters (its line's share taken first)."""
    most = max(0, min(CARD_LINES, (budget - 350) // (CARD_WIDTH + 1)))
    return [_line(line, CARD_WIDTH) for line in preview.lines[:most]]


def _line(line: str, width: int) -> str:
    shown = visible(line).replace("\t", "    ")
    return shown if len(shown) <= width else shown[: width - 1] + MARK


def _lines_block(preview: Preview, lines: list[str], block_id: str) -> Block:
    if preview.kind == "markdown":
        return SectionBlock(
            block_id=block_id, text=MarkdownTextObject(text=cut(to_mrkdwn("\n".join(lines)), 2_900))
        )
    return _preformatted(lines, block_id)


def _preformatted(lines: list[str], block_id: str | None = None) -> RichTextBlock:
    text = "\n".join(lines) or " "
    return RichTextBlock(
        block_id=block_id,
        elements=[RichTextPreformattedElement(elements=[RichTextElementParts.Text(text=text)])],
    )


# The modal -----------------------------------------------------------------------------


def pages(preview: Preview) -> int:
    return max(1, -(-len(preview.lines) // PAGE_LINES))


def preview_modal(approval: Approval, index: int, page: int = 0) -> View:
    """**View the whole change**: page `page` of action `index`'s preview."""
    action = approval.request.actions[index]
    preview = action.preview or Preview()
    count = pages(preview)
    page = min(max(0, page), count - 1)
    first = page * PAGE_LINES
    lines = preview.lines[first : first + PAGE_LINES]
    edited = index in approval.proposals or (
        index in approval.decided and approval.decided[index].decision.get("type") == "edit"
    )
    where = f"`{escape(cut(action.name, 60))}`"
    if count > 1:
        where += f" · lines {first + 1:,}–{first + len(lines):,} of {len(preview.lines):,}"
    blocks: list[Block] = [
        SectionBlock(text=MarkdownTextObject(text=summary_line(preview, after_edit=edited))),
        ContextBlock(elements=[MarkdownTextObject(text=where)]),
    ]
    if preview.kind == "markdown":
        blocks += [
            SectionBlock(text=MarkdownTextObject(text=part))
            for part in split_mrkdwn(to_mrkdwn("\n".join(lines)), BLOCK_TEXT)
        ]
    else:
        blocks += _chunks([_line(line, PAGE_WIDTH) for line in lines])
    buttons = []
    value = f"{approval.approval_id}:{index}"
    if page > 0:
        buttons.append(
            ButtonElement(text=f"◀ Page {page}", action_id=f"preview_page:{page - 1}", value=value)
        )
    if page + 1 < count:
        buttons.append(
            ButtonElement(
                text=f"Page {page + 2} of {count} ▶", action_id=f"preview_page:{page + 1}", value=value
            )
        )
    if buttons:
        blocks.append(ActionsBlock(block_id="pages", elements=buttons))
    return View(
        type="modal",
        callback_id="preview",
        title="The whole change",
        close="Close",
        private_metadata=value,
        blocks=blocks[:100],
    )


def _chunks(lines: list[str]) -> list[Block]:
    """Preformatted blocks of whole lines, each within `BLOCK_TEXT` characters."""
    blocks: list[Block] = []
    chunk: list[str] = []
    size = 0
    for line in lines:
        if chunk and size + len(line) + 1 > BLOCK_TEXT:
            blocks.append(_preformatted(chunk))
            chunk, size = [], 0
        chunk.append(line)
        size += len(line) + 1
    if chunk:
        blocks.append(_preformatted(chunk))
    return blocks


# Edits ---------------------------------------------------------------------------------


def edit_lines(original: dict[str, Any], edited: dict[str, Any]) -> list[str]:
    """The arguments an edit changed that one line cannot show (several lines, or longer than
    `ONE_LINE`), each as a diff under its name."""
    lines: list[str] = []
    for name in dict.fromkeys([*original, *edited]):
        before, after = original.get(name, ABSENT), edited.get(name, ABSENT)
        if before == after or not (_long(before) or _long(after)):
            continue
        lines.append(f"{name}:")
        lines += argument_diff(before, after)
    return lines


def _long(value: Any) -> bool:
    return isinstance(value, str) and ("\n" in value or len(value) > ONE_LINE)


def edit_block(original: dict[str, Any], edited: dict[str, Any], index: int, budget: int) -> Block | None:
    """The edit's diff, argument by argument, on a card (within `budget` characters); None when
    its one-line changes show it all."""
    lines = edit_lines(original, edited)
    if not lines:
        return None
    most = max(4, min(3 * CARD_LINES, budget // (CARD_WIDTH + 1)))
    shown = [_line(line, CARD_WIDTH) for line in lines[:most]]
    if len(lines) > most:
        shown.append(f"… {len(lines) - most:,} more lines: View full arguments")
    return _preformatted(shown, f"edit:{index}")


def edited_args(approval: Approval, index: int) -> dict[str, Any] | None:
    """The arguments an action runs with instead of the asked ones: a decided edit's, or the
    edit waiting for its quorum; None when neither."""
    decided = approval.decided.get(index)
    if decided is not None:
        if decided.decision.get("type") != "edit":
            return None
        return dict(decided.decision.get("edited_action", {}).get("args") or {})
    proposal = approval.proposals.get(index)
    if proposal is None:
        return None
    return dict(proposal.decision.get("edited_action", {}).get("args") or {})


def action_extras(
    approval: Approval, index: int, action: ActionReview, value: str, budget: int, room: int
) -> tuple[list[Block], list[Block], str]:
    """What a card adds to action `index`, within `room` blocks and about `budget` characters:
    the preview of what it does (blocks to show below its text), the diff of an edit that
    changes it (below the decision), and the preview's line for the action's own text when no
    block of its own fits (else "")."""
    edited = edited_args(approval, index)
    shown_edit = action.shown(edited) if edited is not None else None  # its secrets masked, as asked
    diff = (
        edit_block(action.args, shown_edit, index, budget - 350) if shown_edit is not None and room else None
    )
    shown: list[Block] = []
    if action.preview is not None:
        shown = card_blocks(
            action.preview, index, value, budget, room - (1 if diff else 0), edited is not None
        )
    said = summary_line(action.preview, after_edit=edited is not None) if action.preview and not shown else ""
    return shown, [diff] if diff is not None else [], said


def extras_in(blocks: list[Block]) -> int:
    """How many of `blocks` a preview or an edit's diff added (a card counts its 50)."""
    return sum(1 for b in blocks if (b.block_id or "").split(":")[0] in ("preview", "lines", "edit"))


def compact_line(preview: Preview) -> str:
    """A preview in the one line a large batch's row has room for (mrkdwn, escaped)."""
    line = f"📄 {escape(cut(preview.summary or 'preview', 120))}"
    return line + (f" · ⚠️ {escape(cut(preview.warning, 120))}" if preview.warning else "")
