"""Checking a value against a JSON Schema someone else wrote (a tool's, an MCP server's). Pure.

Such a schema is untrusted: `jsonschema` as it comes would fetch a remote `$ref` (a blocking
request from the bot, to any address), run a `pattern` with Python's backtracking `re` (a
server's `^(a+)+$` freezes the event loop), and raise on a `$ref` it cannot resolve or one that
points at itself. Here no reference is ever retrieved (an empty registry: only the schema's own
`$defs`), patterns run on RE2 (linear time), `patternProperties` is not evaluated, and a schema
that cannot be checked is a problem to report (the value is refused), never an exception.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from datetime import date, datetime
from typing import Any
from urllib.parse import urlsplit

import jsonschema
import re2
import referencing
import referencing.exceptions
from jsonschema import ValidationError
from jsonschema.protocols import Validator

_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(?:\.\d{1,9})?(?:[Zz]|[+-]\d{2}:\d{2})$")
UNCHECKABLE = "the schema cannot be checked"


def _pattern(validator: Validator, pattern: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "string"):
        return
    try:
        found = re2.search(str(pattern), instance)
    except re2.error:
        yield ValidationError(f"the schema's pattern {str(pattern)[:60]!r} cannot be read")
        return
    if not found:
        yield ValidationError(f"does not match the pattern {str(pattern)[:60]!r}")


def _not_evaluated(validator: Validator, value: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    return iter(())


Checker = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, {"pattern": _pattern, "patternProperties": _not_evaluated}
)

FORMATS = jsonschema.FormatChecker(formats=())


@FORMATS.checks("email")
def _is_email(value: object) -> bool:
    return not isinstance(value, str) or bool(_EMAIL.match(value))


@FORMATS.checks("uri", raises=ValueError)
def _is_uri(value: object) -> bool:
    if not isinstance(value, str):
        return True
    parts = urlsplit(value)
    return bool(re.match(r"^[A-Za-z][A-Za-z0-9+.-]*$", parts.scheme) and (parts.netloc or parts.path))


@FORMATS.checks("date", raises=ValueError)
def _is_date(value: object) -> bool:
    """RFC 3339's full-date (`2026-12-07`), a real day: not ISO 8601's other spellings."""
    return not isinstance(value, str) or bool(_DATE.match(value) and date.fromisoformat(value))


@FORMATS.checks("date-time", raises=ValueError)
def _is_datetime(value: object) -> bool:
    """RFC 3339's date-time, with its offset (`2026-12-07T10:00:00Z`)."""
    if not isinstance(value, str):
        return True
    return (
        bool(_DATE_TIME.match(value))
        and datetime.fromisoformat(value.replace("Z", "+00:00").replace("z", "+00:00")) is not None
    )


def problems(
    schema: Mapping[str, Any], value: Any
) -> list[tuple[list[Any], jsonschema.ValidationError | str]]:
    """Where `value` does not fit `schema` (the path into it, and the error); a schema that cannot
    be checked is one problem at the root (`UNCHECKABLE`, and why)."""
    try:
        Checker.check_schema(schema)
        checker = Checker(schema, registry=referencing.Registry(), format_checker=FORMATS)
        return [(list(error.path), error) for error in checker.iter_errors(value)]
    except (
        jsonschema.SchemaError,
        referencing.exceptions.Unresolvable,  # (jsonschema wraps it: still one)
        RecursionError,
        re.error,
        TypeError,
        ValueError,
    ) as exc:
        return [([], f"{UNCHECKABLE}: {type(exc).__name__}")]
