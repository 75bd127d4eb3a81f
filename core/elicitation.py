"""An MCP server's questions (MCP "elicitation"), as LangChain pauses on them. Pure; both sides.

`langchain.mcp` turns a server's request for input into the interrupt
`{"type": "mcp_elicitation", "tool_name", "requests": [...]}`: each request a
form (`requested_schema`, MCP's flat subset of JSON Schema) or a URL for the
person to visit. It resumes only from `{"responses": {key: {"action":
"accept"|"decline"|"cancel", "content"?}}}`, an answer for every key (any key
missing or malformed raises in the tool, after the resume was saved).

This module reads a form's schema into the fields Slack can ask for (`fields_of`),
checks what a person answered against the schema with `jsonschema` (`content_problems`),
and turns the round's one decision into that resume (`responses_of`), or checks one
given whole (`check_responses`). A schema keyword outside MCP's subset (`pattern`,
say) is not evaluated here, so no server-sent regular expression runs in Signoff:
the server checks its own.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal
from urllib.parse import urlsplit

from jsonschema import ValidationError

from core import schemas

ElicitAction = Literal["accept", "decline", "cancel"]
ACTIONS: tuple[ElicitAction, ...] = ("accept", "decline", "cancel")
ELICITATION = "mcp_elicitation"  # the interrupt's `type` (langchain.mcp.elicitation)

FieldKind = Literal["text", "email", "url", "date", "datetime", "number", "integer", "boolean", "one", "many"]
FORMATS: dict[str, FieldKind] = {"email": "email", "uri": "url", "date": "date", "date-time": "datetime"}
MOST_CHOICES = 100  # a Slack select's options; more are typed (and checked against the list)
MOST_FIELDS = 40  # one modal holds 100 blocks; a form longer than this is not asked in Slack
MOST_TEXT = 3_000  # a plain_text_input's longest value
# The keywords each property may use that Signoff evaluates; others are the server's to check.
CHECKED = {
    "type",
    "title",
    "description",
    "default",
    "format",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "enum",
    "enumNames",
    "oneOf",
    "anyOf",
    "items",
    "minItems",
    "maxItems",
    "const",
}


@dataclass(frozen=True)
class Choice:
    value: str
    title: str


@dataclass(frozen=True)
class FormField:
    """One property of a form, as a Slack input asks for it."""

    name: str
    kind: FieldKind
    title: str
    description: str = ""
    required: bool = False
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    choices: tuple[Choice, ...] = ()
    min_items: int | None = None
    max_items: int | None = None

    @property
    def typed(self) -> bool:
        """A choice among more options than a Slack select holds: typed, checked against them."""
        return self.kind in ("one", "many") and len(self.choices) > MOST_CHOICES


class FormUnsupported(ValueError):
    """A form Slack cannot ask for (nested objects, too many fields): declined or cancelled only."""


def fields_of(schema: Any) -> list[FormField]:
    """The fields of a form's `requested_schema`, in the server's order; `FormUnsupported` says
    why Slack cannot ask for it."""
    if not isinstance(schema, Mapping) or schema.get("type", "object") != "object":
        raise FormUnsupported("the form is not an object of fields")
    properties = schema.get("properties") or {}
    if not isinstance(properties, Mapping):
        raise FormUnsupported("the form's fields are not an object")
    if len(properties) > MOST_FIELDS:
        raise FormUnsupported(f"the form has {len(properties)} fields; Slack asks for at most {MOST_FIELDS}")
    required = schema.get("required") or []
    if not isinstance(required, list):
        raise FormUnsupported("the form's `required` is not a list")
    return [_field(str(name), spec, name in required) for name, spec in properties.items()]


def _field(name: str, spec: Any, required: bool) -> FormField:
    if not isinstance(spec, Mapping):
        raise FormUnsupported(f"field {name!r} has no schema")
    kind = spec.get("type")
    base = FormField(
        name=name,
        kind="text",
        title=str(spec.get("title") or name),
        description=str(spec.get("description") or ""),
        required=required,
        default=spec.get("default"),
    )
    choices = _choices(spec)
    if choices is not None:
        if kind not in (None, "string"):
            raise FormUnsupported(f"field {name!r}: choices of type {kind!r}")
        return replace(base, kind="one", choices=choices)
    if kind == "array":
        items = spec.get("items")
        many = _choices(items) if isinstance(items, Mapping) else None
        if many is None:
            raise FormUnsupported(f"field {name!r}: a list of something other than choices")
        return replace(
            base,
            kind="many",
            choices=many,
            min_items=_count(spec.get("minItems")),
            max_items=_count(spec.get("maxItems")),
        )
    if kind == "string":
        shape = spec.get("format")
        if shape is not None and shape not in FORMATS:
            raise FormUnsupported(f"field {name!r}: the format {shape!r}")
        return replace(
            base,
            kind=FORMATS[shape] if shape else "text",
            min_length=_count(spec.get("minLength")),
            max_length=_count(spec.get("maxLength")),
        )
    if kind == "number" or kind == "integer":
        return replace(
            base, kind=kind, minimum=_number(spec.get("minimum")), maximum=_number(spec.get("maximum"))
        )
    if kind == "boolean":
        return replace(base, kind="boolean")
    raise FormUnsupported(f"field {name!r} of type {kind!r}")


def _choices(spec: Mapping[str, Any]) -> tuple[Choice, ...] | None:
    """`enum` (titled by the legacy `enumNames`), or `oneOf` / `anyOf` of `{const, title}`."""
    if isinstance(spec.get("enum"), list):
        if not all(isinstance(v, str) for v in spec["enum"]):  # (MCP's choices are texts)
            raise FormUnsupported("a choice that is not text")
        names = spec.get("enumNames")
        values = list(spec["enum"])
        titles = [str(n) for n in names] if isinstance(names, list) and len(names) == len(values) else values
        return tuple(Choice(v, t) for v, t in zip(values, titles, strict=True)) if values else None
    listed = spec.get("oneOf", spec.get("anyOf"))
    if isinstance(listed, list) and listed and all(isinstance(o, Mapping) and "const" in o for o in listed):
        if not all(isinstance(o["const"], str) for o in listed):
            raise FormUnsupported("a choice that is not text")
        return tuple(Choice(o["const"], str(o.get("title") or o["const"])) for o in listed)
    return None


def _count(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _number(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return value
    return None


def checked_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema Signoff checks an answer against, written from the fields it read (`fields_of`):
    only MCP's form keywords, so nothing the server sent besides (a `$ref`, a `pattern`, at any
    depth) is evaluated here. `FormUnsupported` when the form cannot be read."""
    fields = fields_of(schema)
    return {
        "type": "object",
        "properties": {f.name: _field_schema(f) for f in fields},
        "required": [f.name for f in fields if f.required],
        "additionalProperties": False,
    }


def _field_schema(field: FormField) -> dict[str, Any]:
    bounds = {
        key: value
        for key, value in (
            ("minimum", field.minimum),
            ("maximum", field.maximum),
            ("minLength", field.min_length),
            ("maxLength", field.max_length),
            ("minItems", field.min_items),
            ("maxItems", field.max_items),
        )
        if value is not None
    }
    values = [c.value for c in field.choices]
    if field.kind == "one":
        return {"type": "string", "enum": values}
    if field.kind == "many":
        return {"type": "array", "items": {"type": "string", "enum": values}, **bounds}
    if field.kind in ("number", "integer", "boolean"):
        return {"type": field.kind, **bounds}
    shape = {"email": "email", "url": "uri", "date": "date", "datetime": "date-time"}.get(field.kind)
    return {"type": "string", **({"format": shape} if shape else {}), **bounds}


def content_problems(schema: Mapping[str, Any], content: Any) -> dict[str, str]:
    """What does not fit the form, by field name ("" for the form as a whole); none: it fits.

    Checked with `jsonschema` (Draft 2020-12, the formats email, uri, date and date-time) against
    `checked_schema`; each value must also be one MCP carries (text, number, true/false, a list of
    texts, null).
    """
    if not isinstance(content, Mapping):
        return {"": "the answer must be an object of field names to values"}
    try:
        checked = checked_schema(schema)
    except FormUnsupported as unsupported:
        return {"": f"the form cannot be answered: {unsupported}"}
    problems: dict[str, str] = {}
    for name, value in content.items():
        if not _carried(value):
            problems[str(name)] = "MCP carries text, whole numbers of 64 bits, numbers, true/false or texts"
    for path, error in schemas.problems(checked, dict(content)):
        if isinstance(error, str):
            problems.setdefault("", error)
            continue
        where = str(path[0]) if path else ""
        if where == "" and error.validator == "required":
            where = _missing(error.message)
        if where == "" and error.validator == "additionalProperties":
            problems.setdefault("", f"the form has no such field: {error.message}")
            continue
        problems.setdefault(where, _said(error))
    return problems


def _missing(message: str) -> str:
    found = re.match(r"'(.+)' is a required property", message)
    return found.group(1) if found else ""


def _said(error: ValidationError) -> str:
    """A validation error in words a person filling a form reads."""
    value = error.validator_value
    said = {
        "required": "Required.",
        "minimum": f"At least {value}.",
        "maximum": f"At most {value}.",
        "minLength": f"At least {value} characters.",
        "maxLength": f"At most {value} characters.",
        "minItems": f"Choose at least {value}.",
        "maxItems": f"Choose at most {value}.",
        "enum": "Not one of the choices.",
        "format": f"Not a valid {value}.",
    }.get(str(error.validator))
    if said:
        return said
    if error.validator == "type":
        return {"integer": "A whole number.", "number": "A number."}.get(str(value), f"Must be {value}.")
    return str(error.message)[:150]


INT64 = (-(2**63), 2**63 - 1)  # what a checkpoint stores (msgpack); a larger one fails the run


def _carried(value: Any) -> bool:
    if value is None or isinstance(value, str | bool):
        return True
    if isinstance(value, int):
        return INT64[0] <= value <= INT64[1]
    if isinstance(value, float):
        return math.isfinite(value)
    return isinstance(value, list) and all(isinstance(v, str) for v in value)


# what a browser reads otherwise than Python's urlsplit (`\` ends a host in WHATWG's parser), or
# what no plain address holds
_UNLINKABLE = re.compile(r'[\\\s"<>`^{}|\x00-\x1f\x7f]')


def https_url(url: str) -> bool:
    """Whether a URL request may be linked: https, with a host, and nothing a browser would read
    as another host than the one said (a backslash, whitespace, quotes, any user info)."""
    if _UNLINKABLE.search(url):
        return False
    try:
        parts = urlsplit(url)
        return parts.scheme == "https" and bool(parts.hostname) and "@" not in parts.netloc
    except ValueError:
        return False


def host_of(url: str) -> str:
    """The host a URL opens, as letters a person can read (IDNA in its ASCII form, so a lookalike
    of another name shows as `xn--…`); "" when there is none."""
    try:
        host = urlsplit(url).hostname or ""
        return host.encode("idna").decode("ascii")
    except (ValueError, UnicodeError):
        return ""
