"""A policy rule's `when`: a condition on the call, in CEL, checked at start, evaluated safely.

CEL (the Common Expression Language of Kubernetes admission policies and Google IAM
conditions) through cel-python. A condition sees `args` (the call's arguments), `tool`,
`requester` (a user id, "" when none), `channel`, `graph` and `now` (a timestamp: when the
approval was created), e.g. `args.amount > 1000` or `args.path.startsWith("/tmp/")`.

Checked when the policy loads, so a mistake stops the process rather than a card: the text
must parse, name only those variables (and names a macro such as `exists(x, …)` binds), call
only functions CEL has, nest nothing in a macro whose work grows with the arguments (another
macro, `in`, `contains`, `matches`: `args.a.all(x, x in args.b)` is the product of two lists),
so an evaluation's work stays linear in the arguments, and be able to give true or false
(`args.amount + 1` cannot). No CEL library on PyPI has CEL's type checker; cel-python's parse
tree is what these checks read.

Evaluated once per action, when its card's terms are set, on a copy of the arguments as JSON
values (at most `MAX_ARGS_JSON` characters and `MAX_VALUES` values), in the bot's condition
process (`core.condition_process`) within a time budget, never on its event loop. An evaluation
that fails (a missing argument, a type mismatch, a number that is not finite, arguments over the
bounds) or gives something other than a boolean raises `ConditionFailed`; the policy then fails
closed (`PolicyFile.match`: the strictest of the rules the call could have matched), never to a
weaker rule on its own.
"""

from __future__ import annotations

import datetime
import functools
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import celpy
from celpy import celtypes, evaluation
from lark import Token, Tree

VARIABLES = ("args", "tool", "requester", "channel", "graph", "now")
# CEL's type names are identifiers too: `type(args.amount) == int`.
TYPE_NAMES = frozenset(
    {"int", "uint", "double", "bool", "string", "bytes", "list", "map", "null_type", "type"}
)
MACROS = frozenset({"all", "exists", "exists_one", "map", "filter"})  # they bind their first argument
FUNCTIONS = frozenset({"has", *MACROS, *(name for name in evaluation.base_functions if name.isidentifier())})
BOOLEAN_CALLS = frozenset(
    {"has", "bool", "startsWith", "endsWith", "contains", "matches", *MACROS} - {"map", "filter"}
)
# What a call surely gives when it is not a boolean (for the message that refuses it).
NOT_BOOLEAN_CALLS = {"size": "a number", "int": "a number", "uint": "a number", "double": "a number"} | {
    "string": "text",
    "timestamp": "a timestamp",
    "duration": "a duration",
    "map": "a list",
    "filter": "a list",
}
LITERALS = {"BOOL_LIT": "bool", "NULL_LIT": "null", "BYTES_LIT": "bytes", "STRING_LIT": "text"} | {
    "MLSTRING_LIT": "text",
    "INT_LIT": "a number",
    "UINT_LIT": "a number",
    "FLOAT_LIT": "a number",
}
MAX_ARGS_JSON = 256_000  # characters: a call's arguments bigger than this are not evaluated
# values (numbers, strings, lists, maps…) in a call's arguments: cel-python takes about 70 µs a
# value in a macro, so this bounds one evaluation to well under a second
MAX_VALUES = 5_000
# inside a macro's body, these make the work the product of two sizes (a list by a list, a list
# by a string): refused at start, as a macro in a macro is
GROWING = frozenset({"contains", "matches"})


@dataclass(frozen=True)
class Call:
    """What a condition is evaluated on: one action of an approval."""

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)
    requester: str = ""
    channel: str = ""
    graph: str = ""
    now: float = 0.0  # when the approval was created (seconds since the epoch)


class ConditionFailed(Exception):
    """A condition could not say true or false for one call: the policy fails closed."""


Verdict = bool | str  # a condition's answer for one call: true, false, or why it could not tell


class Condition:
    """One rule's `when`, compiled and checked (`compiled`, never built directly)."""

    def __init__(self, source: str):
        self.source = source
        try:
            tree = _environment().compile(source)
            problem = _unknown_name(tree) or _not_boolean(tree)
            self._program = _environment().program(tree)
        except celpy.CELParseError as exc:
            raise ValueError(_syntax_problem(source, exc)) from None
        except RecursionError:
            raise ValueError("nested too deeply to read") from None
        except Exception as exc:  # whatever the parser says, the process refuses in one line
            raise ValueError(f"not CEL: {' '.join(str(exc).split())[:200]}") from None
        if problem:
            raise ValueError(problem)

    def holds(self, call: Call) -> bool:
        """Whether the condition holds for `call`; ConditionFailed when it cannot tell."""
        try:
            activation = _activation(call)
            result = self._program.evaluate(activation)
        except ConditionFailed:
            raise
        except Exception as exc:  # any failure of one call's evaluation: the rule does not apply
            raise ConditionFailed(_eval_problem(exc)) from None
        if not isinstance(result, bool | celtypes.BoolType):
            raise ConditionFailed(
                f"gave {type(result).__name__.removesuffix('Type').lower()}, not true or false"
            )
        return bool(result)


def verdicts(conditions: Sequence[str | None], call: Call) -> list[Verdict]:
    """Each condition's verdict on `call`, in order, up to the first that holds (None: no
    condition, which holds): what `PolicyFile.match` chooses a rule from. Pure; run where the
    work may take long (`core.condition_process`)."""
    found: list[Verdict] = []
    for source in conditions:
        if source is None:
            found.append(True)
            break
        try:
            found.append(compiled(source).holds(call))
        except (ConditionFailed, ValueError) as problem:
            found.append(str(problem) or type(problem).__name__)
            continue
        if found[-1] is True:
            break
    return found


@functools.lru_cache(maxsize=4_096)
def compiled(source: str) -> Condition:
    """`source` compiled and checked once (ValueError naming the problem)."""
    return Condition(source)


@functools.cache
def _environment() -> celpy.Environment:
    return celpy.Environment()


def _activation(call: Call) -> dict[str, Any]:
    text = json.dumps(dict(call.args), default=str)  # JSON values only, whatever the record held
    if len(text) > MAX_ARGS_JSON:
        raise ConditionFailed(f"arguments over {MAX_ARGS_JSON:,} characters are not evaluated")
    args = json.loads(text)
    _bounded(args)
    when = datetime.datetime.fromtimestamp(call.now, tz=datetime.UTC)
    return {
        "args": celpy.json_to_cel(args),
        "tool": celtypes.StringType(call.tool),
        "requester": celtypes.StringType(call.requester),
        "channel": celtypes.StringType(call.channel),
        "graph": celtypes.StringType(call.graph),
        "now": celtypes.TimestampType(when),
    }


def _bounded(args: Any) -> None:
    """At most `MAX_VALUES` values, and every number finite: NaN and infinity compare false both
    ways (`x > 1000` and `x <= 1000`), so whichever rule a comparison would pick, it picks wrong."""
    count, stack = 0, [args]
    while stack:
        value = stack.pop()
        count += 1
        if count > MAX_VALUES:
            raise ConditionFailed(f"arguments of over {MAX_VALUES:,} values are not evaluated")
        if isinstance(value, float) and not math.isfinite(value):
            raise ConditionFailed(f"a number that is not finite ({value}) is never compared")
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)


OPERATORS = {"gt": ">", "ge": ">=", "lt": "<", "le": "<=", "eq": "==", "ne": "!=", "in": "in"}
TYPE_WORDS = {
    "StringType": "text",
    "IntType": "a whole number",
    "UintType": "a whole number",
    "DoubleType": "a number",
    "BoolType": "true or false",
    "ListType": "a list",
    "MapType": "a map",
    "NullType": "null",
    "BytesType": "bytes",
    "TimestampType": "a timestamp",
    "DurationType": "a duration",
    "CELEvalError": "an error",
}
_OVERLOAD = re.compile(
    r"no matching overload for (?:Token\('RULE', 'relation_(\w+)'\)|(\S+)) applied to '\((.*)\)'"
)


def _eval_problem(exc: Exception) -> str:
    """Why a condition could not read a call, in words ("`>` of text and a whole number")."""
    detail = exc.args[0] if isinstance(exc, evaluation.CELEvalError) and exc.args else exc
    text = " ".join(str(detail).split())
    found = _OVERLOAD.search(text)
    if found:
        relation, other, types = found.groups()
        operator = OPERATORS.get(relation or "", other or relation or "?").strip("_")
        words = [TYPE_WORDS.get(name, name) for name in re.findall(r"\.(\w+)'>", types)]
        if "an error" in words:
            return f"a part of it could not read the call (under `{operator}`)"
        return f"`{operator}` cannot take {' and '.join(words) or 'these values'}"[:200]
    missing = re.match(r"no such member in mapping: '(.*)'$", text)
    if missing:
        return f"the call has no {missing.group(1)!r}"[:200]
    return text[:200]


def _syntax_problem(source: str, exc: celpy.CELParseError) -> str:
    lines = source.split("\n")
    line, column = exc.line or 1, exc.column or 1
    rest = lines[line - 1][column - 1 :] if line <= len(lines) else ""
    near = f"at {rest[:12]!r}" if rest.strip() else "at its end"
    where = f"line {line}, column {column}" if len(lines) > 1 else f"column {column}"
    return f"not CEL: a syntax error {near} ({where})"


def _unknown_name(tree: Tree) -> str | None:
    known = {*VARIABLES, *TYPE_NAMES}
    for kind, name in _names(tree, frozenset()):
        if kind == "variable" and name not in known:
            return f"names {name!r}, which is not a variable (there are {', '.join(VARIABLES)})"
        if kind == "function" and name not in FUNCTIONS:
            return f"calls {name}(), which Signoff's CEL does not have"
        if kind == "nested":
            return f"{name}() inside another macro: its work grows with the square of the arguments"
        if kind == "growing":
            return f"{name} inside a macro: its work grows with the product of the arguments' sizes"
    return None


def _names(node: Tree | Token | None, bound: frozenset[str]) -> Iterator[tuple[str, str]]:
    """Every (variable | function, name) `node` uses; a macro's variable is bound in its body."""
    if not isinstance(node, Tree):
        return
    kids = node.children
    if node.data in ("ident", "dot_ident"):
        if str(kids[0]) not in bound:
            yield "variable", str(kids[0])
        return
    if node.data == "relation_in" and bound:  # `x in list` inside a macro: a list by a list
        yield "growing", "in"
    if node.data == "ident_arg":
        yield "function", str(kids[0])
        if bound and str(kids[0]) in GROWING:
            yield "growing", f"{kids[0]}()"
    elif node.data == "member_dot_arg":
        yield "function", str(kids[1])
        if bound and str(kids[1]) in GROWING:
            yield "growing", f"{kids[1]}()"
        body = kids[2].children if len(kids) > 2 and isinstance(kids[2], Tree) else []
        variable = _bare_ident(body[0]) if body else None
        if str(kids[1]) in MACROS and variable is not None and len(body) > 1:
            if bound:  # inside another macro's body: the work grows with the arguments' square
                yield "nested", str(kids[1])
            yield from _names(kids[0], bound)
            for expr in body[1:]:
                yield from _names(expr, bound | {variable})
            return
    for kid in kids:
        yield from _names(kid, bound)


def _bare_ident(node: Tree | Token) -> str | None:
    """The name, when `node` is nothing but one identifier (a macro's variable)."""
    while isinstance(node, Tree) and len(node.children) == 1 and node.data != "ident":
        node = node.children[0]
    return str(node.children[0]) if isinstance(node, Tree) and node.data == "ident" else None


def _not_boolean(tree: Tree) -> str | None:
    gives = _gives(tree)
    return None if gives in ("bool", "unknown") else f"gives {gives}, not true or false"


def _gives(node: Tree | Token) -> str:
    """What `node` gives: "bool", "unknown" (not known before a call: `args.flag`), or what it
    surely is instead ("a number", "text", …)."""
    while isinstance(node, Tree) and len(node.children) == 1 and node.data != "ident":
        if node.data in ("literal", "list_lit", "map_lit", "ident_arg", "dot_ident", "member_object"):
            break
        node = node.children[0]
    if not isinstance(node, Tree):
        return "unknown"
    kids = [k for k in node.children if k is not None]
    match node.data:
        case "expr":  # c ? a : b
            branches = {_gives(kids[1]), _gives(kids[2])}
            return (
                "bool"
                if branches == {"bool"}
                else next(iter(sorted(branches - {"bool", "unknown"})), "unknown")
            )
        case "conditionalor" | "conditionaland" | "relation":
            return "bool"
        case "addition" | "multiplication":
            return "a number" if node.data == "multiplication" else "a sum"
        case "unary":
            return "bool" if isinstance(kids[0], Tree) and kids[0].data == "unary_not" else "a number"
        case "literal":
            kind = kids[0].type if isinstance(kids[0], Token) else ""
            return LITERALS.get(kind, "a value")
        case "list_lit" | "map_lit" | "member_object":
            return {"list_lit": "a list", "map_lit": "a map"}.get(node.data, "a message")
        case "ident_arg" | "member_dot_arg":
            name = str(kids[0] if node.data == "ident_arg" else kids[1])
            if name in BOOLEAN_CALLS:
                return "bool"
            return "a number" if name.startswith("get") else NOT_BOOLEAN_CALLS.get(name, "unknown")
    return "unknown"
