"""An MCP server's questions (`mcp_elicitation`): the card's body and buttons, the modal built from
each form's schema, reading the modal back into typed values, and the words for what was
answered. Pure.

A round is answered once, as a whole: **Answer…** (`elicit_accept`, a modal with every form's
fields), **Done** (`elicit_done`: a round of URL requests only, accepted without values),
**Decline** (`elicit_decline`) or **Cancel the call** (`elicit_cancel`). A URL is a link button,
never a text field, and only an https URL is linked; the host it opens is said in words. What
the server sent (messages, titles, descriptions, choices) is untrusted: escaped in mrkdwn, its
hidden characters shown, cut to Slack's limits.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from slack_sdk.models.blocks import (
    ActionsBlock,
    Block,
    ButtonElement,
    ContextBlock,
    DatePickerElement,
    DateTimePickerElement,
    EmailInputElement,
    InputBlock,
    InputInteractiveElement,
    MarkdownTextObject,
    Option,
    PlainTextInputElement,
    RadioButtonsElement,
    SectionBlock,
    StaticMultiSelectElement,
    StaticSelectElement,
    UrlInputElement,
)
from slack_sdk.models.views import View

from bot.views.text import cut, escape, visible
from core.elicitation import (
    MOST_TEXT,
    FormField,
    FormUnsupported,
    content_problems,
    fields_of,
    host_of,
    https_url,
)
from core.protocol import Elicitation, Elicited, PendingRequest
from core.records import Approval, ApprovalStatus, Decided, Outcome

MOST_URL = 3_000  # a link button's url
LAST_SECOND = 253_402_300_799  # 9999-12-31T23:59:59Z: a date-time RFC 3339 can write
MOST_REQUESTS = 10  # requests of one round a card shows; a round of more is declined or cancelled
VIEW_BLOCKS = 100
ANSWERED = {"accept": ("💬", "Answered"), "decline": ("🙅", "Declined"), "cancel": ("✖️", "Cancelled")}


def forms(request: PendingRequest) -> list[tuple[Elicitation, list[FormField]]]:
    """Each form request with its fields (a form Slack cannot ask for raises `FormUnsupported`)."""
    return [
        (asked, fields_of(asked.requested_schema)) for asked in request.elicitations if asked.mode == "form"
    ]


def not_acceptable(request: PendingRequest) -> str | None:
    """Why the round cannot be accepted from Slack (then only Decline and Cancel are offered):
    a form Slack cannot show, a URL that is not https, or a modal too long."""
    if len(request.elicitations) > MOST_REQUESTS:
        return f"the server asks {len(request.elicitations)} questions at once; a card shows {MOST_REQUESTS}"
    try:
        found = forms(request)
    except FormUnsupported as unsupported:
        return f"Slack cannot ask this form: {unsupported}"
    for asked in request.elicitations:
        if asked.mode == "url" and not linkable(asked.url or ""):
            return "the server asks to open an address that is not https, so Signoff does not link it"
    blocks = 1 + sum(1 + len(fields) for _, fields in found) + len(request.elicitations)
    if blocks > VIEW_BLOCKS:
        return f"the questions need {blocks} blocks; a Slack form holds {VIEW_BLOCKS}"
    return None


def done_answers(request: PendingRequest) -> bool:
    """Whether Done answers the round: URL requests only, each linked."""
    return not_acceptable(request) is None and all(asked.mode == "url" for asked in request.elicitations)


def linkable(url: str) -> bool:
    """An https URL the card may link: plain (see `https_url`), with a host it can name."""
    return https_url(url) and len(url) <= MOST_URL and host_of(url) != ""


def card_blocks(approval: Approval) -> list[Block]:
    """The card's body: who asks, each request (a form's fields named, a URL as a link button),
    then what was answered or the round's buttons."""
    request = approval.request
    tool = cut(escape(request.tool_name), 80)
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(
                text=f"The MCP tool `{tool}` asks before it carries on. Your answer goes to its server."
            )
        )
    ]
    shown = request.elicitations[:MOST_REQUESTS]
    budget = max(300, 2_500 // len(shown))
    for number, asked in enumerate(shown):
        blocks += _asked_blocks(asked, number, budget)
    if len(request.elicitations) > len(shown):
        more = len(request.elicitations) - len(shown)
        blocks.append(
            ContextBlock(
                elements=[MarkdownTextObject(text=f"…and {more} more requests this card cannot show.")]
            )
        )
    decided = approval.decided.get(0)
    if decided is not None:
        blocks.append(
            ContextBlock(elements=[MarkdownTextObject(text=cut(decided_line(approval, decided), 2_900))])
        )
    elif approval.status is ApprovalStatus.PENDING:
        blocks.append(round_buttons(approval))
    return blocks


def _asked_blocks(asked: Elicitation, number: int, budget: int) -> list[Block]:
    message = cut(escape(asked.message), budget) or "_(no message)_"
    quoted = cut("\n".join(f"> {line}" for line in message.split("\n")), budget)
    if asked.mode == "url":
        url = asked.url or ""
        host = cut(escape(host_of(url)), 200) or "an address with no host"
        if linkable(url):
            return [
                SectionBlock(
                    block_id=f"url:{number}",
                    text=MarkdownTextObject(text=f"{quoted}\n🔗 Opens *{host}* in your browser"),
                    accessory=ButtonElement(
                        text=cut(f"Open {host_of(url)}", 75), action_id=f"open:elicit:{number}", url=url
                    ),
                )
            ]
        shown = cut(escape(url), 300).replace("`", "'")
        why = "not a plain https address" if https_url(url) else "not an https address"
        return [
            SectionBlock(
                text=MarkdownTextObject(
                    text=cut(f"{quoted}\n⚠️ It asks to open `{shown}`: {why}, not linked.", 2_900)
                )
            )
        ]
    try:
        fields = fields_of(asked.requested_schema)
    except FormUnsupported as unsupported:
        return [
            SectionBlock(text=MarkdownTextObject(text=cut(f"{quoted}\n⚠️ {escape(str(unsupported))}.", 2_900)))
        ]
    named = [f"*{cut(escape(f.title), 60)}*" + ("" if f.required else " (optional)") for f in fields[:12]]
    more = [f"{len(fields) - 12} more"] if len(fields) > 12 else []
    asks = f"\nIt asks for {listed(named + more)}." if fields else ""
    return [SectionBlock(text=MarkdownTextObject(text=cut(f"{quoted}{asks}", 2_900)))]


def round_buttons(approval: Approval) -> ActionsBlock:
    """Answer… (any form) or Done (URLs only), when the round can be accepted; Decline; Cancel."""
    value = f"{approval.approval_id}:0"
    request = approval.request
    elements = []
    if done_answers(request):
        elements.append(ButtonElement(text="Done", action_id="elicit_done", value=value, style="primary"))
    elif not_acceptable(request) is None:
        elements.append(
            ButtonElement(text="Answer…", action_id="elicit_accept", value=value, style="primary")
        )
    elements += [
        ButtonElement(text="Decline", action_id="elicit_decline", value=value),
        ButtonElement(text="Cancel the call", action_id="elicit_cancel", value=value),
    ]
    return ActionsBlock(block_id="decide:0", elements=elements)


def decided_line(approval: Approval, decided: Decided) -> str:
    """What the card says of the round's answer (mrkdwn)."""
    at = f"<!date^{int(decided.at)}^{{date_short_pretty}} {{time}}|{int(decided.at)}>"
    if decided.outcome is Outcome.EXPIRED:
        return f"⌛ No answer in time ({at}): Signoff cancelled the call"
    if decided.outcome is Outcome.WITHDRAWN:
        return f"↩️ Withdrawn by the requester {at}: the call is cancelled"
    action = str(decided.decision.get("action"))
    icon, verb = ANSWERED.get(action, ("•", "Answered"))
    line = f"{icon} {verb} by <@{decided.user}> {at}"
    values = answer_words(approval, decided)
    return f"{line}: {values}" if values else line


def answer_words(approval: Approval, decided: Decided) -> str:
    """An accept's values in words: "*3*" for one field, "*Replicas* 3 · *Region* eu" for more
    (mrkdwn, escaped, cut); "" for anything else."""
    if decided.decision.get("action") != "accept":
        return ""
    content = decided.decision.get("content") or {}
    parts: list[tuple[str, str]] = []  # (the field's title, its value); a URL's line has no title
    for asked in approval.request.elicitations:
        if asked.mode == "url":
            parts.append(("", f"done at *{cut(escape(host_of(asked.url or '')), 100)}*"))
            continue
        try:
            fields = fields_of(asked.requested_schema)
        except FormUnsupported:
            continue
        values = content.get(asked.key) or {}
        parts += [(f.title, _said_value(f, values[f.name])) for f in fields if f.name in values]
    if len(parts) == 1 and parts[0][0]:
        return f"*{parts[0][1]}*"
    said = [f"*{cut(escape(title), 60)}* {value}" if title else value for title, value in parts]
    return cut(" · ".join(said), 1_500)


def _said_value(field: FormField, value: Any) -> str:
    titles = {c.value: c.title for c in field.choices}
    if isinstance(value, list):
        text = ", ".join(titles.get(str(v), str(v)) for v in value) or "none"
    elif isinstance(value, bool):
        text = "yes" if value else "no"
    else:
        text = titles.get(str(value), str(value))
    return cut(escape(text), 200).replace("*", "∗")


def asked_words(request: PendingRequest) -> str:
    """What the round asks for, in words: "*Replicas* and *Region*", "a visit to *auth.example.com*"."""
    parts = []
    for asked in request.elicitations:
        if asked.mode == "url":
            parts.append(f"a visit to *{cut(escape(host_of(asked.url or '')), 100) or 'an address'}*")
            continue
        try:
            parts += [f"*{cut(escape(f.title), 60)}*" for f in fields_of(asked.requested_schema)]
        except FormUnsupported:
            parts.append("a form")
    return listed(parts) or "input"


def listed(parts: list[str]) -> str:
    """ "a, b and c"."""
    return ", ".join(parts[:-1]) + " and " + parts[-1] if len(parts) > 1 else "".join(parts)


def outcome_sentence(approval: Approval, whose: str, who: str) -> str:
    """The thread's line once the round is answered: "Riley's agent asked `deploy_service` for
    *Replicas*: Alice answered *3*" (`whose`, `who`: mrkdwn, escaped or mentions)."""
    decided = approval.decided.get(0)
    asked = (
        f"{whose} asked `{cut(escape(approval.request.tool_name), 80)}` for {asked_words(approval.request)}"
    )
    if decided is None:
        return f"{asked}: the call was closed unanswered"
    if decided.outcome is Outcome.EXPIRED:
        return f"⌛ {asked}: no one answered in time, so Signoff cancelled the call"
    if decided.outcome is Outcome.WITHDRAWN:
        return f"↩️ {asked}: withdrawn, so the call is cancelled"
    action = decided.decision.get("action")
    if action == "accept":
        values = answer_words(approval, decided)
        return f"💬 {asked}: {who} answered" + (f" {values}" if values else "")
    if action == "decline":
        return f"🙅 {asked}: {who} declined to answer, and the tool carries on without it"
    return f"✖️ {asked}: {who} cancelled the call"


# The modal: every form's fields, block ids `<request>.<field>` (numbers: no server text in them).


def answer_modal(approval: Approval, metadata: str) -> View:
    request = approval.request
    blocks: list[Block] = [
        SectionBlock(
            text=MarkdownTextObject(
                text=f"The MCP tool `{cut(escape(request.tool_name), 80)}` asks. What you send goes to its "
                "server; the form checks it first."
            )
        )
    ]
    for number, asked in enumerate(request.elicitations):
        message = cut(escape(asked.message), 1_500) or "_(no message)_"
        if asked.mode == "url":
            host = cut(escape(host_of(asked.url or "")), 200)
            blocks.append(
                SectionBlock(
                    text=MarkdownTextObject(
                        text=f"{message}\n🔗 Finish at *{host}* first (the link is on the card): sending this "
                        "tells the server you did."
                    )
                )
            )
            continue
        blocks.append(SectionBlock(text=MarkdownTextObject(text=message)))
        blocks += [
            _input(f"{number}.{n}", field) for n, field in enumerate(fields_of(asked.requested_schema))
        ]
    return View(
        type="modal",
        callback_id="elicit",
        title=cut(visible(f"Answer {request.tool_name}"), 24),
        submit="Send",
        close="Cancel",
        private_metadata=metadata,
        blocks=blocks[:VIEW_BLOCKS],
    )


def _input(block_id: str, field: FormField) -> InputBlock:
    return InputBlock(
        block_id=block_id,
        label=cut(visible(field.title), 150).strip() or f"Field {block_id}",
        optional=not field.required,
        hint=cut(_hint(field), 2_000) or None,
        element=_element(field),
    )


def _hint(field: FormField) -> str:
    parts = [visible(field.description)] if field.description else []
    if field.kind in ("number", "integer"):
        parts.append("A whole number." if field.kind == "integer" else "A number.")
    if field.minimum is not None and field.maximum is not None:
        parts.append(f"From {_number(field.minimum)} to {_number(field.maximum)}.")
    elif field.minimum is not None:
        parts.append(f"At least {_number(field.minimum)}.")
    elif field.maximum is not None:
        parts.append(f"At most {_number(field.maximum)}.")
    if field.typed:
        words = ", ".join(visible(c.value) for c in field.choices)
        parts.append(
            cut(f"One of: {words}" if field.kind == "one" else f"Any of, comma-separated: {words}", 1_000)
        )
    return " ".join(parts)


def _number(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else str(value)


def _options(field: FormField) -> list[Option]:
    return [
        Option(text=cut(visible(c.title), 75) or "(blank)", value=str(i)) for i, c in enumerate(field.choices)
    ]


def _element(field: FormField) -> InputInteractiveElement:
    default = field.default
    if field.kind in ("one", "many") and not field.typed:
        options = _options(field)
        chosen = {str(v) for v in (default if isinstance(default, list) else [default])}
        initial = [o for o, c in zip(options, field.choices, strict=True) if c.value in chosen]
        if field.kind == "one":
            return StaticSelectElement(
                action_id="v", options=options, initial_option=initial[0] if initial else None
            )
        return StaticMultiSelectElement(
            action_id="v",
            options=options,
            initial_options=initial or None,
            max_selected_items=field.max_items if field.max_items else None,
        )
    if field.kind == "boolean":
        yes, no = Option(text="Yes", value="true"), Option(text="No", value="false")
        picked = yes if default is True else no if default is False else None
        return RadioButtonsElement(action_id="v", options=[yes, no], initial_option=picked)
    if field.kind in ("number", "integer"):  # text, checked here: number_input renders badly on phones
        number = default if isinstance(default, int | float) and not isinstance(default, bool) else None
        shown = _number(number) if number is not None and math.isfinite(number) else None
        return PlainTextInputElement(
            action_id="v",
            initial_value=shown if shown is not None and len(shown) <= 40 else None,
            max_length=40,
            placeholder="A whole number" if field.kind == "integer" else "A number",
        )
    if field.kind == "date":
        return DatePickerElement(action_id="v", initial_date=default if _is_date(default) else None)
    if field.kind == "datetime":
        return DateTimePickerElement(action_id="v", initial_date_time=_epoch(default))
    text = default if isinstance(default, str) and len(default) <= MOST_TEXT else None
    if field.kind == "email":
        return EmailInputElement(action_id="v", initial_value=text)
    if field.kind == "url":
        return UrlInputElement(action_id="v", initial_value=text)
    most = min(field.max_length or MOST_TEXT, MOST_TEXT)
    if isinstance(default, list) and field.typed:
        text = ", ".join(str(v) for v in default)
    return PlainTextInputElement(
        action_id="v",
        initial_value=cut(text, most) if text else None,
        max_length=most,
        min_length=min(field.min_length, most) if field.min_length else None,
        multiline=most > 300 and field.kind == "text" and not field.typed,
    )


def _is_date(value: Any) -> bool:
    """A default Slack's datepicker takes: YYYY-MM-DD, a real day."""
    try:
        return (
            isinstance(value, str)
            and bool(re.fullmatch(r"\d{4}-\d{2}-\d{2}", value))
            and bool(date.fromisoformat(value))
        )
    except ValueError:
        return False


def _epoch(value: Any) -> int | None:
    if not isinstance(value, str) or len(value) > 40:
        return None
    try:
        when = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    at = int(when.timestamp()) if when.tzinfo is not None else None
    return at if at is not None and 0 <= at <= LAST_SECOND else None


# Reading the modal back: Slack's state values -> typed values, checked against each form's schema.


def read_answer(approval: Approval, state: dict[str, dict[str, Any]]) -> Elicited | dict[str, str]:
    """The accept a submission makes (numbers as numbers, true/false as booleans, a date-time in
    UTC), checked against each form's schema with `jsonschema`; or `{block_id: what to fix}`."""
    errors: dict[str, str] = {}
    content: dict[str, dict[str, Any]] = {}
    for number, asked in enumerate(approval.request.elicitations):
        if asked.mode != "form":
            continue
        try:
            fields = fields_of(asked.requested_schema)
        except FormUnsupported:  # (never offered: the card says why)
            errors[f"{number}.0"] = "This form cannot be answered in Slack."
            continue
        values: dict[str, Any] = {}
        for n, field in enumerate(fields):
            block = f"{number}.{n}"
            try:
                value = _typed(field, state.get(block) or {})
            except ValueError as wrong:
                errors[block] = str(wrong)
                continue
            if value is not None:
                values[field.name] = value
        for name, said in content_problems(asked.requested_schema or {}, values).items():
            at = next((f"{number}.{n}" for n, f in enumerate(fields) if f.name == name), None)
            block = at or (f"{number}.0" if fields else "")
            errors.setdefault(block, cut(said, 150))
        content[asked.key] = values
    if errors:
        return errors
    return Elicited(action="accept", content=content)


def _typed(field: FormField, element: dict[str, Any]) -> Any:
    """One input's value as the schema types it (None: left empty)."""
    if field.kind in ("one", "many") and not field.typed:
        chosen = element.get("selected_options") if field.kind == "many" else [element.get("selected_option")]
        picked = [_choice(field, option) for option in chosen or [] if option]
        if field.kind == "one":
            return picked[0] if picked else None
        return picked or None
    if field.kind == "boolean":
        option = element.get("selected_option")
        if not option:
            return None
        if option.get("value") not in ("true", "false"):
            raise ValueError("Yes or No.")
        return option["value"] == "true"
    if field.kind == "date":
        return element.get("selected_date") or None
    if field.kind == "datetime":
        at = element.get("selected_date_time")
        if at is None:
            return None
        if not isinstance(at, int) or isinstance(at, bool) or not 0 <= at <= LAST_SECOND:
            raise ValueError("Not a valid date and time.")
        return datetime.fromtimestamp(at, UTC).isoformat().replace("+00:00", "Z")
    text = element.get("value")
    if text is None or text == "":
        return None
    if not isinstance(text, str) or len(text) > MOST_TEXT:
        raise ValueError(f"At most {MOST_TEXT:,} characters.")
    if field.kind in ("number", "integer"):
        return _parsed_number(text, whole=field.kind == "integer")
    if field.typed and field.kind == "one":
        return _typed_choice(field, text.strip())
    if field.typed:
        return [_typed_choice(field, part.strip()) for part in text.split(",") if part.strip()] or None
    return text


def _choice(field: FormField, option: Any) -> str:
    index = option.get("value") if isinstance(option, dict) else None
    if not (
        isinstance(index, str) and index.isascii() and index.isdigit() and int(index) < len(field.choices)
    ):
        raise ValueError("Not one of the choices.")
    return field.choices[int(index)].value


def _typed_choice(field: FormField, text: str) -> str:
    """A choice typed (more than a select holds): by its value, else by a title that names one
    choice only and is no other choice's value (a title never stands for another's value)."""
    values = {choice.value for choice in field.choices}
    if text in values:
        return text
    titled = [choice.value for choice in field.choices if choice.title == text]
    if len(titled) == 1:
        return titled[0]
    raise ValueError(cut(f"{text!r} is not one of the choices.", 150))


MOST_DIGITS = 18  # a number's digits before the point: past them it is no 64-bit integer


def _parsed_number(text: str, whole: bool) -> int | float:
    """A number as typed: an integer when it is whole, else a float; never one of more than 18
    digits before the point as an integer (neither MCP's JSON nor a checkpoint carries it, and
    `int(Decimal("1e1000000"))` would hold the event loop building its digits)."""
    text = text.strip()
    if len(text) > 40:
        raise ValueError("At most 40 characters.")
    try:
        number = Decimal(text)
    except InvalidOperation:
        raise ValueError("A number.") from None
    if not number.is_finite():
        raise ValueError("A number.")
    integral = number == number.to_integral_value()
    if integral and number.adjusted() < MOST_DIGITS:
        return int(number)
    if whole:
        raise ValueError("A whole number." if not integral else "Too large: at most 18 digits.")
    return float(number)
