"""Secret values in a tool call's arguments, kept out of everything people and logs see. Pure.

An argument is secret when its key names one (`password`, `api_key`, `Authorization`, a
header list's `{"name": "Authorization", "value": ...}`; nested keys too), when its value has
a secret's shape (detect-secrets' detectors: cloud keys, GitHub / GitLab / Slack / Stripe /
OpenAI-style tokens, JWTs, private keys, credentials in URLs; and a few of ours), or when the
policy's `redact` lists its path (`args.customer.card_number`: what no detector can know).

`conceal` replaces each secret value with a mask ("••••" and, for a value longer than 16
characters, its last 4) and returns the originals by JSON pointer (RFC 6901): the approval
record keeps both, every surface renders the masked arguments, and only what must act on the
real values (the policy's conditions, trust, idempotency keys, an untouched secret in an Edit,
a reveal) asks for them (`restored`). Free text (the agent's answer, a log line) is masked by
shape (`mask_text`) and for the values a run's arguments carried (`mask_known`).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from detect_secrets.plugins.artifactory import ArtifactoryDetector
from detect_secrets.plugins.aws import AWSKeyDetector
from detect_secrets.plugins.azure_storage_key import AzureStorageKeyDetector
from detect_secrets.plugins.base import RegexBasedDetector
from detect_secrets.plugins.discord import DiscordBotTokenDetector
from detect_secrets.plugins.github_token import GitHubTokenDetector
from detect_secrets.plugins.gitlab_token import GitLabTokenDetector
from detect_secrets.plugins.jwt import JwtTokenDetector
from detect_secrets.plugins.mailchimp import MailchimpDetector
from detect_secrets.plugins.npm import NpmDetector
from detect_secrets.plugins.openai import OpenAIDetector
from detect_secrets.plugins.private_key import PrivateKeyDetector
from detect_secrets.plugins.pypi_token import PypiTokenDetector
from detect_secrets.plugins.sendgrid import SendGridDetector
from detect_secrets.plugins.slack import SlackDetector
from detect_secrets.plugins.square_oauth import SquareOAuthDetector
from detect_secrets.plugins.stripe import StripeDetector
from detect_secrets.plugins.telegram_token import TelegramBotTokenDetector
from detect_secrets.plugins.twilio import TwilioKeyDetector

MASK = "••••"
SHOWN_TAIL = 16  # a value longer than this shows its last 4 characters after the mask
SCANNED = 100_000  # characters of a string searched for shapes at a time
OVERLAP = 25_000  # characters two windows share (a private key is the longest shape: ~3,300 for RSA-4096)
MOST_DEPTH = 64
MOST_LEAVES = 20_000

# detect-secrets' shape detectors (regular expressions over a value, no keyword context): the
# ones whose shape alone says "secret". Left out: IPPublicDetector (an address is no secret),
# the entropy detectors (an order id or a UUID would be hidden), KeywordDetector (lines of code),
# the IBM / Cloudant / Softlayer ones (they need `key = value` context a value has not), and
# BasicAuthDetector (its match runs from "://" to "@": ours masks just the user and password).
DETECTORS: tuple[RegexBasedDetector, ...] = (
    ArtifactoryDetector(),
    AWSKeyDetector(),
    AzureStorageKeyDetector(),
    DiscordBotTokenDetector(),
    GitHubTokenDetector(),
    GitLabTokenDetector(),
    JwtTokenDetector(),
    MailchimpDetector(),
    NpmDetector(),
    OpenAIDetector(),
    PrivateKeyDetector(),
    PypiTokenDetector(),
    SendGridDetector(),
    SlackDetector(),
    SquareOAuthDetector(),
    StripeDetector(),
    TelegramBotTokenDetector(),
    TwilioKeyDetector(),
)
# Shapes detect-secrets does not know (or knows only in an older form).
OURS = (
    re.compile(r"\b(?:Bearer|Basic|Token)\s+[A-Za-z0-9\-._~+/]{8,}=*", re.I),  # an Authorization value
    re.compile(r"\bsk-(?:proj-|svcacct-|admin-|ant-(?:api\d{2}-)?)?[A-Za-z0-9_-]{20,}"),  # OpenAI, Anthropic
    re.compile(r"\bAIza[0-9A-Za-z_\-]{35}\b"),  # Google API keys
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]{0,20000}?-----END [A-Z ]*PRIVATE KEY-----"),
    re.compile(
        r"(?<=://)[^\s/?#@:<>\"'`]{1,200}:[^\s/?#<>\"'`]{1,200}(?=@[^\s@]*$|@[^\s@/]*[/\s])"
    ),  # user:pw@
    re.compile(
        r"(?<=://)[A-Za-z0-9_\-.~]{20,200}(?=@)"
    ),  # a token as a URL's user (https://<token>@github.com)
    re.compile(r"\bgithub_pat_[A-Za-z0-9_]{22,}"),  # GitHub's fine-grained tokens
    re.compile(r"\beyJ[A-Za-z0-9_-]{2,}\.eyJ[A-Za-z0-9_-]{2,}\.[A-Za-z0-9_-]+"),  # a JWT, its signature too
    # `KEY=value` or `key: value` in text, the key naming a secret (DB_PASSWORD=…, ?api_key=…)
    re.compile(
        r"\b[A-Za-z0-9_.-]*(?:password|passwd|token|secret|api_?key|access_?key|private_?key)"
        r"\s{0,3}[=:]\s{0,3}[^\s&\"'`,;]{6,}",
        re.I,
    ),
    re.compile(r"\b(?:sk|rk)_test_[A-Za-z0-9]{16,}|\bwhsec_[A-Za-z0-9+/=]{20,}|\bhf_[A-Za-z0-9]{30,}"),
    re.compile(r"\bxapp-[0-9]-[A-Za-z0-9-]{10,}"),  # a Slack app-level token
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]{0,20000}"),  # a private key cut before its END
)
# A key that names a secret, in its words (camelCase and kebab-case split): `apiKey`, `X-Api-Key`,
# `client_secret`, `Set-Cookie`; not a count or a kind of one (`token_count`, `auth_type`).
_SECRET_WORDS = re.compile(
    r"(?:^|_)(?:pass(?:word|wd|phrase)?|pwd|secret|secrets|token|api_?key|apikey|access_?key|"
    r"private_?key|priv_?key|auth|authorization|cookie|set_cookie|credentials?|session_(?:id|key|token)|"
    r"signing_?key|client_?secret|bearer|otp|pin|cvv|cvc|ssn|id_token|sessionid)(?:$|_)"
)
_ALWAYS = re.compile(r"(?:^|_)(?:session_(?:id|key|token)|id_token)(?:$|_)")  # what `id` below must not veto
_SPLIT_CAMEL = re.compile(r"([a-z0-9])([A-Z])")
_NAME_KEYS = ("name", "key", "header", "field")  # a header list's `{"name": ..., "value": ...}`


_NOT_THE_VALUE = re.compile(
    r"(?:^|_)(?:count|counts|limit|max|min|num|number_of|size|length|len|ttl|type|kind|expires?|expiry|url|uri|endpoint|id)(?:$|_)"
)


def secret_name(key: Any) -> bool:
    """Whether an argument's key names a secret (`token`, not `token_count` or `token_type`)."""
    words = re.sub(r"[^a-z0-9]+", "_", _SPLIT_CAMEL.sub(r"\1_\2", str(key)).lower())
    if _ALWAYS.search(words):
        return True
    return bool(_SECRET_WORDS.search(words)) and not _NOT_THE_VALUE.search(words)


def shapes(text: str) -> list[str]:
    """The parts of `text` shaped like a secret: each detector's
    whole match (its pattern's context included: more is hidden, never less)."""
    found: list[str] = []
    # (in windows of SCANNED characters overlapping by OVERLAP: a token across a window's edge
    # is whole in the next one; each window's search stays linear and bounded)
    for start in range(0, max(1, len(text)), SCANNED - OVERLAP):
        window = text[start : start + SCANNED]
        if _MAYBE.search(window):  # (most text: no run of token characters long enough)
            found += [match.group(0) for match in _ANY_SHAPE.finditer(window) if match.group(0)]
    return found


def _inline(pattern: re.Pattern[str]) -> str:
    """A pattern as one alternative of a larger one, its flags kept (`(?i:...)`), groups unnamed."""
    body = re.sub(r"\(\?P<\w+>", "(?:", pattern.pattern)
    return f"(?i:{body})" if pattern.flags & re.IGNORECASE else f"(?:{body})"


# What every shape holds somewhere: a run of 16 token characters, a PEM header, user info in a
# URL, an Authorization scheme. A text without one is passed over in one cheap scan.
_MAYBE = re.compile(
    r"[A-Za-z0-9_\-+/=.]{16,}|-----BEGIN|PuTTY|://[^\s/@]{0,200}:[^\s/@]{0,200}@|(?i:bearer|basic|token)\s"
)
# Every shape in one pattern: one pass over a text instead of one per detector.
_ANY_SHAPE = re.compile(
    "|".join(_inline(p) for p in (*OURS, *(regex for detector in DETECTORS for regex in detector.denylist)))
)


def mask(value: Any) -> str:
    """A secret as people see it: "••••" and, when it is longer than 16 characters, its last 4."""
    text = value if isinstance(value, str) else json.dumps(value, default=str)
    return MASK + text[-4:] if len(text) > SHOWN_TAIL else MASK


def pointer(path: Iterable[Any]) -> str:
    """A JSON pointer (RFC 6901) to a value inside the arguments."""
    return "".join("/" + str(p).replace("~", "~0").replace("/", "~1") for p in path)


def _parts(at: str) -> list[str]:
    return [p.replace("~1", "/").replace("~0", "~") for p in at.split("/")[1:]]


@dataclass(frozen=True)
class Redaction:
    """A policy `redact` path: `args.customer.card_number`, `args.cards[].number`, `args.*.pin`."""

    parts: tuple[str, ...]  # names; "[]" any list element; "*" any key

    @property
    def text(self) -> str:
        """The path as the policy writes it (`parse` reads it back)."""
        names: list[str] = []
        for part in self.parts:
            if part == "[]" and names:
                names[-1] += "[]"
            else:
                names.append(part)
        return "args." + ".".join(names)

    @classmethod
    def parse(cls, text: str) -> Redaction:
        """`args.` and dotted names; `[]` (or `[*]`) for any element of a list; `*` any key."""
        if not text.startswith("args."):
            raise ValueError(f"a redact path starts with args. (given {text!r})")
        parts: list[str] = []
        for name in text.removeprefix("args.").split("."):
            base, brackets = re.match(r"^(.*?)((?:\[\*?\])*)$", name).groups()  # type: ignore[union-attr]
            if not base or not re.fullmatch(r"[\w\-]+|\*", base):
                raise ValueError(f"{text!r}: {name!r} is not a name (letters, digits, _ and -), or *")
            parts.append(base)
            parts += ["[]"] * brackets.count("[")
        return cls(tuple(parts))

    def covers(self, path: tuple[Any, ...]) -> bool:
        """Whether a value at `path` (keys and list indexes) is under this redaction."""
        if len(path) < len(self.parts):
            return False
        for want, got in zip(self.parts, path, strict=False):
            if want == "[]":
                if not isinstance(got, int):
                    return False
            elif want != "*" and (isinstance(got, int) or want != got):
                return False
        return True


def conceal(
    args: Mapping[str, Any], redact: Iterable[Redaction] = ()
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(the arguments with each secret value masked, {JSON pointer: the original value})."""
    hidden: dict[str, Any] = {}
    rules = tuple(redact)
    leaves = [0]

    def walk(value: Any, path: tuple[Any, ...], marked: str) -> Any:
        leaves[0] += 1
        if leaves[0] > MOST_LEAVES or len(path) > MOST_DEPTH:  # past the bound: hidden whole
            hidden[pointer(path)] = value
            return mask(value)
        listed = marked == "redact" or any(rule.covers(path) for rule in rules)
        if isinstance(value, Mapping):
            named = _named_value(value)
            return {
                key: walk(
                    item,
                    (*path, key),
                    "redact"
                    if listed
                    else "name"
                    if marked == "name" or secret_name(key) or key == named
                    else "",
                )
                for key, item in value.items()
            }
        if isinstance(value, list | tuple):
            return [walk(item, (*path, n), "redact" if listed else marked) for n, item in enumerate(value)]
        under_name = marked == "name" and value not in (None, "") and not isinstance(value, bool)
        if (listed and value is not None) or under_name:
            hidden[pointer(path)] = value
            return mask(value)
        shown = mask_text(value) if isinstance(value, str) else value  # (a token in an email's body)
        if shown != value:
            hidden[pointer(path)] = value
        return shown

    masked = {key: walk(value, (key,), "name" if secret_name(key) else "") for key, value in args.items()}
    return masked, hidden


def _named_value(item: Mapping[str, Any]) -> str | None:
    """In `{"name": "Authorization", "value": "..."}`, the key whose value is secret ("value")."""
    names = [item.get(k) for k in _NAME_KEYS if isinstance(item.get(k), str)]
    if names and any(secret_name(n) for n in names) and "value" in item:
        return "value"
    return None


def restored(args: Any, hidden: Mapping[str, Any], shown: Any = None) -> Any:
    """The arguments with their hidden values put back; given the arguments as they were `shown`
    (masked), only where a value is still as shown: what an Edit form left untouched."""
    if not hidden:
        return args
    out = json.loads(json.dumps(args, default=str))  # a copy of plain JSON
    for at, original in hidden.items():
        parts = _parts(at)
        node = out
        try:
            for part in parts[:-1]:
                node = node[int(part)] if isinstance(node, list) else node[part]
            last: Any = int(parts[-1]) if isinstance(node, list) else parts[-1]
            current = node[last]
        except (KeyError, IndexError, ValueError, TypeError):
            continue  # an edit removed it
        if shown is None or current == _at(shown, parts):
            node[last] = original
    return out


def _at(args: Any, parts: list[str]) -> Any:
    node = args
    try:
        for part in parts:
            node = node[int(part)] if isinstance(node, list) else node[part]
    except (KeyError, IndexError, ValueError, TypeError):
        return None
    return node


def masked_at(args: Any, pointers: Iterable[str], redact: Iterable[Redaction] = ()) -> Any:
    """The arguments with the values at `pointers` masked (an edit's new value for a secret),
    and any other value shaped like a secret."""
    out = json.loads(json.dumps(args, default=str))
    for at in pointers:
        parts = _parts(at)
        node = out
        try:
            for part in parts[:-1]:
                node = node[int(part)] if isinstance(node, list) else node[part]
            last: Any = int(parts[-1]) if isinstance(node, list) else parts[-1]
            node[last] = mask(node[last])
        except (KeyError, IndexError, ValueError, TypeError):
            continue
    return conceal(out, redact)[0] if isinstance(out, dict) else out


def mask_text(text: str, known: Iterable[str] = ()) -> str:
    """Free text with every part shaped like a secret, and every `known` secret value, masked."""
    spelled = {  # as written, and as JSON or Python's repr would quote it (a hook's json.dumps)
        form: value
        for value in known
        if isinstance(value, str) and len(value) >= 6
        for form in (value, json.dumps(value)[1:-1], repr(value)[1:-1])
    }
    for form in sorted(spelled, key=len, reverse=True):
        text = text.replace(form, mask(spelled[form]))
    for found in sorted(set(shapes(text)), key=len, reverse=True):
        text = text.replace(found, mask(found))
    return text


def known_values(hidden: Mapping[str, Any]) -> list[str]:
    """The hidden values as text, to find them again in free text."""
    return [v if isinstance(v, str) else json.dumps(v, default=str) for v in hidden.values() if v is not None]


def whole_values(shown: Any, hidden: Mapping[str, Any]) -> list[str]:
    """The hidden values that `shown` (the masked arguments) masks whole (secret by name, by the
    policy's `redact`, past the bounds), as text, and each line of one that spans lines: to mask
    them in text that shows them in pieces (a diff's `+` lines, its context lines). A value
    masked only where a part is shaped like a secret gives the lines of each such part that
    spans lines (a private key inside a file: a diff's context may show its body without its
    BEGIN line); its one-line parts are found again by shape."""
    found: list[str] = []
    for at, value in hidden.items():
        if value is None:
            continue
        text = value if isinstance(value, str) else json.dumps(value, default=str)
        if _at(shown, _parts(at)) == mask(value):
            found += [text, *(line for line in text.split("\n") if "\n" in text)]
        else:
            found += [line for part in shapes(text) if "\n" in part for line in part.split("\n")]
    return [text for text in found if len(text.strip()) >= 6]


def masked_deep(value: Any, known: Iterable[str] = ()) -> Any:
    """`mask_text` on every string in nested dicts and lists (a question asked as data)."""
    if isinstance(value, str):
        return mask_text(value, known)
    if isinstance(value, Mapping):
        return {k: masked_deep(v, known) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [masked_deep(v, known) for v in value]
    return value


def fingerprint(value: Any, key: bytes) -> str:
    """A keyed fingerprint of a secret (HMAC-SHA256): two values told apart, neither shown."""
    text = value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
    return "fp:" + hmac.new(key, text.encode(), hashlib.sha256).hexdigest()[:16]


def carried(messages: Iterable[Any], redact: Callable[[str], Iterable[Redaction]] | None = None) -> list[str]:
    """The secret values a run's tool calls carried (LangChain messages, or their dict form): to
    mask them wherever the agent repeats one (its answer, a later question)."""
    found: list[str] = []
    for message in messages:
        calls = (
            message.get("tool_calls")
            if isinstance(message, Mapping)
            else getattr(message, "tool_calls", None)
        )
        for call in calls or ():
            name = call.get("name") if isinstance(call, Mapping) else None
            args = call.get("args") if isinstance(call, Mapping) else None
            if isinstance(args, Mapping):
                rules = redact(str(name)) if redact and name else ()
                found += known_values(conceal(args, rules)[1])
    return list(dict.fromkeys(found))


def audited(args: Any, key: bytes, hidden: Iterable[str] = (), redact: Iterable[Redaction] = ()) -> Any:
    """The arguments as the audit keeps them: each secret (found, redact-listed, or at one of
    `hidden`'s pointers) as its keyed fingerprint; a secret inside longer text masked in place."""
    if not isinstance(args, Mapping):
        return args
    shown, found = conceal(args, redact)
    for at in hidden:
        value = _at(args, _parts(at))
        if value is not None:
            found.setdefault(at, value)
    for at, original in found.items():
        parts = _parts(at)
        now = _at(shown, parts)
        if isinstance(now, str) and now not in (mask(original), original):
            continue  # a token in an email's body: the body stays, the token masked
        node: Any = shown
        try:
            for part in parts[:-1]:
                node = node[int(part)] if isinstance(node, list) else node[part]
            node[int(parts[-1]) if isinstance(node, list) else parts[-1]] = fingerprint(original, key)
        except (KeyError, IndexError, ValueError, TypeError):
            continue
    return shown


def audited_edit(
    payload: dict[str, Any], key: bytes, hidden: Iterable[str] = (), redact: Iterable[Redaction] = ()
) -> dict[str, Any]:
    """An edit decision (`{"type": "edit", "edited_action": {...}}`) as the audit keeps it: its
    arguments' secrets as keyed fingerprints (`audited`)."""
    action = payload["edited_action"]
    return {**payload, "edited_action": {**action, "args": audited(action["args"], key, hidden, redact)}}
