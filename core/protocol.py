"""The approval protocol: what a pause asks for and what may answer it.

Both sides use this module. The runner turns each LangGraph interrupt into a
`PendingRequest`; the bot collects decisions and checks the complete set with
`check_resume` before a resume command may exist. A refused set never reaches
LangGraph: with langgraph 1.2 a resume the HITL middleware refuses is saved
before the error is raised and poisons the thread for good.

Three shapes of pause (see `docs/hitl-semantics.md`):

* batched  -- `HITLRequest` {action_requests, review_configs}, answered with
  {"decisions": [d0, d1, ...]}, one per action, in order;
* per_call -- `ToolApprovalRequest` {type: "tool_approval", ...} with a JSON
  `response_schema`, answered with one decision;
* mcp_elicitation -- an MCP server's questions through `langchain.mcp` (`core.elicitation`),
  one round of requests answered with one `{"responses": {key: ...}}` (recorded as `Elicited`);
* question -- any other `interrupt(value)`, answered with text or JSON
  (recorded as the decision shape `Answer`).

`check_resume` refuses exactly what the middleware would raise on, plus three
things it lets through that would mislead the agent or dodge a gate:

1. an edit that names another tool (batched mode would run that tool, whose
   own approval rule never fired);
2. edited args that do not match the tool's argument schema, when known;
3. a reject or respond message that is not a string (the model would read
   "None" or "5").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter

from core import schemas
from core.elicitation import ACTIONS, ELICITATION, ElicitAction, content_problems
from core.previews import Preview
from core.secrets import Redaction, conceal, known_values, mask_text, masked_at, restored

DecisionType = Literal["approve", "edit", "reject", "respond"]
DECISION_TYPES: tuple[DecisionType, ...] = ("approve", "edit", "reject", "respond")

# config["configurable"] key carrying the calls people approved to the tools that act on them
# ([{approval_id, tool, args}], newest first); read by `agent_runner.idempotency`.
APPROVED = "signoff_approved"


class RequestKind(StrEnum):
    BATCHED = "batched"
    PER_CALL = "per_call"
    QUESTION = "question"
    ELICITATION = "mcp_elicitation"


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="ignore")


class EditedAction(_Model):
    name: str
    args: dict[str, Any]


class Approve(_Model):
    type: Literal["approve"] = "approve"


class Edit(_Model):
    type: Literal["edit"] = "edit"
    edited_action: EditedAction


class Reject(_Model):
    type: Literal["reject"] = "reject"
    message: str | None = None


class Respond(_Model):
    type: Literal["respond"] = "respond"
    message: str


class Answer(_Model):
    """A person's answer to a question pause: the value the graph's `interrupt()` returns."""

    type: Literal["answer"] = "answer"
    answer: Any = None


class Elicited(_Model):
    """A person's answer to one round of an MCP server's questions: accept (with each form's
    values, by request key), decline, or cancel the tool call. One for the whole round."""

    type: Literal["elicit"] = "elicit"
    action: ElicitAction
    content: dict[str, dict[str, Any]] = {}


Decision = Annotated[Approve | Edit | Reject | Respond, Field(discriminator="type")]
_decision = TypeAdapter(Decision)


def as_payload(decision: Decision) -> dict[str, Any]:
    """The decision exactly as the middleware reads it."""
    return decision.model_dump(exclude_none=True)


# What a person gives for one action (one of the middleware's four decisions), for a question
# (an answer) or for an MCP server's round of questions: typed from the listener that reads the
# click or the form to the decide script.
PersonDecision = Approve | Edit | Reject | Respond | Answer | Elicited


def decision_payload(decision: PersonDecision) -> dict[str, Any]:
    """What the decide script records: the middleware's form; an answer keeps its value, null too."""
    return decision.model_dump() if isinstance(decision, Answer | Elicited) else as_payload(decision)


class ActionReview(_Model):
    """One tool call waiting for a person."""

    name: str
    args: dict[str, Any]  # as the agent asked: what the card shows, and the tool gets on approve
    description: str = ""
    allowed_decisions: tuple[DecisionType, ...]
    args_schema: dict[str, Any] | None = None
    tool_call_id: str | None = None
    # The arguments as the tool will receive them: checked and converted by the tool's own
    # schema ("50000" is 50000), where the runner has the tool. The policy judges these.
    received: dict[str, Any] | None = None
    # Why the tool's own schema refuses the arguments (the tool would fail): refused unasked.
    refused: str | None = None
    # What the call will do (a file's diff, a hook's preview), made by the runner before the card
    # from the real arguments, its text masked as the arguments are (`core.records.concealed`).
    preview: Preview | None = None
    # The secrets `args` shows masked (`core.secrets.conceal`): JSON pointer -> the value as asked.
    # Never shown: only what must act on the real values reads them (`real_args`).
    hidden: dict[str, Any] = {}
    # The policy's `redact` paths for this tool, as written (`args.customer.card_number`): an
    # edit's new values there are masked too
    redacted: tuple[str, ...] = ()

    @property
    def real_args(self) -> dict[str, Any]:
        """The arguments as the agent asked, secrets included: for the policy, trust, idempotency
        keys and an Edit's untouched secrets; never for a surface people or logs see."""
        return restored(self.args, self.hidden) if self.hidden else self.args

    def shown(self, args: Mapping[str, Any]) -> dict[str, Any]:
        """Other arguments for this call (an edit's) as people may see them: masked where this
        call's secrets were, and wherever a value is shaped like one."""
        if not isinstance(args, Mapping):
            return {}
        return masked_at(dict(args), self.hidden, [Redaction.parse(p) for p in self.redacted])

    @property
    def judged_args(self) -> dict[str, Any]:
        """What the policy sees: the arguments as the tool will receive them, when known."""
        return self.received if self.received is not None else self.real_args


class Elicitation(_Model):
    """One of an MCP server's requests in a round: a form (`requested_schema`) or a URL to visit."""

    key: str
    message: str
    mode: Literal["form", "url"]
    requested_schema: dict[str, Any] | None = None
    url: str | None = None


class PendingRequest(_Model):
    """One pending interrupt, in a shape both sides can store and render."""

    interrupt_id: str
    kind: RequestKind
    actions: tuple[ActionReview, ...] = ()
    question: Any = None
    answer_schema: dict[str, Any] | None = None
    # mcp_elicitation: the MCP tool whose call waits, and the round's requests, in order
    tool_name: str = ""
    elicitations: tuple[Elicitation, ...] = ()

    @classmethod
    def from_interrupt(
        cls, interrupt: Any, tool_schemas: Mapping[str, dict[str, Any]] | None = None
    ) -> PendingRequest:
        """Read a `langgraph.types.Interrupt` (or its dict form).

        `tool_schemas` maps tool names to their JSON argument schemas, for batched
        requests, which do not carry them.
        """
        value: Any
        if isinstance(interrupt, Mapping):
            value, interrupt_id = interrupt.get("value"), interrupt["id"]
            schema = interrupt.get("response_schema")
        else:
            value, interrupt_id = interrupt.value, interrupt.id
            schema = getattr(interrupt, "response_schema", None)
        schemas = tool_schemas or {}
        if _is_batched(value):
            actions = tuple(
                ActionReview(
                    name=request["name"],
                    args=request.get("args") or {},
                    description=request.get("description", ""),
                    allowed_decisions=tuple(config["allowed_decisions"]),
                    args_schema=schemas.get(request["name"]),
                )
                for request, config in zip(value["action_requests"], value["review_configs"], strict=True)
            )
            return cls(interrupt_id=interrupt_id, kind=RequestKind.BATCHED, actions=actions)
        if _is_tool_approval(value):
            allowed, args_schema = _read_response_schema(schema, value["name"])
            action = ActionReview(
                name=value["name"],
                args=value.get("args") or {},
                description=value.get("description", ""),
                allowed_decisions=allowed,
                args_schema=args_schema or schemas.get(value["name"]),
                tool_call_id=value.get("tool_call_id"),
            )
            return cls(interrupt_id=interrupt_id, kind=RequestKind.PER_CALL, actions=(action,))
        elicitations = _elicitations(value)
        if elicitations:
            return cls(
                interrupt_id=interrupt_id,
                kind=RequestKind.ELICITATION,
                tool_name=value["tool_name"],
                elicitations=elicitations,
            )
        return cls(
            interrupt_id=interrupt_id,
            kind=RequestKind.QUESTION,
            question=value,
            answer_schema=schema if isinstance(schema, dict) else None,
        )


def _is_batched(value: Any) -> bool:
    return (
        isinstance(value, Mapping)
        and isinstance(value.get("action_requests"), list)
        and isinstance(value.get("review_configs"), list)
        and len(value["action_requests"]) == len(value["review_configs"])
    )


def _elicitations(value: Any) -> tuple[Elicitation, ...]:
    """An MCP elicitation round's requests (none: not one, or malformed: then it is a question)."""
    if not (
        isinstance(value, Mapping)
        and value.get("type") == ELICITATION
        and isinstance(value.get("tool_name"), str)
        and isinstance(value.get("requests"), list)
        and value["requests"]
    ):
        return ()
    found = []
    for request in value["requests"]:
        if not isinstance(request, Mapping) or not isinstance(request.get("key"), str):
            return ()
        mode, message = request.get("mode"), request.get("message")
        if mode == "form" and isinstance(request.get("requested_schema"), Mapping):
            found.append(
                Elicitation(
                    key=request["key"],
                    message=str(message or ""),
                    mode="form",
                    requested_schema=dict(request["requested_schema"]),
                )
            )
        elif mode == "url" and isinstance(request.get("url"), str):
            found.append(
                Elicitation(key=request["key"], message=str(message or ""), mode="url", url=request["url"])
            )
        else:
            return ()
    keys = [e.key for e in found]
    return tuple(found) if len(keys) == len(set(keys)) else ()


def _is_tool_approval(value: Any) -> bool:
    return isinstance(value, Mapping) and value.get("type") == "tool_approval" and "name" in value


def _read_response_schema(
    schema: Any, tool_name: str
) -> tuple[tuple[DecisionType, ...], dict[str, Any] | None]:
    """Allowed decisions and the edit args schema from a per_call `response_schema`.

    The schema is pydantic's JSON schema of a discriminated union of decision
    types (or one decision's plain object schema when only one is allowed).
    """
    if not isinstance(schema, dict):
        return DECISION_TYPES, None
    defs = schema.get("$defs", {})
    if "discriminator" in schema:
        allowed = tuple(t for t in schema["discriminator"]["mapping"] if t in DECISION_TYPES)
    else:
        const = schema.get("properties", {}).get("type", {}).get("const")
        allowed = (const,) if const in DECISION_TYPES else DECISION_TYPES
    args_schema = None
    if "edit" in allowed:
        edit = (
            _resolve(schema["discriminator"]["mapping"]["edit"], schema)
            if "discriminator" in schema
            else schema
        )
        edited_action = _resolve_node(edit["properties"]["edited_action"], schema)
        args = edited_action["properties"]["args"]
        args_schema = {**_resolve_node(args, schema), "$defs": defs} if defs else _resolve_node(args, schema)
    return allowed, args_schema


def _resolve(ref: str, root: dict[str, Any]) -> dict[str, Any]:
    node: Any = root
    for part in ref.removeprefix("#/").split("/"):
        node = node[part]
    return node


def _resolve_node(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    return _resolve(node["$ref"], root) if "$ref" in node else node


class DecisionRefused(ValueError):
    """A decision (or set) that must not be sent; `reasons` are for people."""

    def __init__(self, reasons: Sequence[str]):
        self.reasons = list(reasons)
        super().__init__("; ".join(self.reasons))


def check_decision(action: ActionReview, raw: Any) -> Decision:
    """One decision for one action, or `DecisionRefused` saying why not."""
    if not isinstance(raw, Mapping):
        raise DecisionRefused([f'a decision must be an object like {{"type": "approve"}}, not {_short(raw)}'])
    kind = raw.get("type")
    if kind not in DECISION_TYPES:
        hint = " (the type is 'approve', not 'accept')" if kind == "accept" else ""
        raise DecisionRefused(
            [f"{_short(kind)} is not a decision; use approve, edit, reject or respond{hint}"]
        )
    if kind not in action.allowed_decisions:
        raise DecisionRefused(
            [f"{kind} is not allowed for {action.name}; allowed: {', '.join(action.allowed_decisions)}"]
        )
    reasons: list[str] = []
    if kind == "edit":
        reasons = _edit_problems(action, raw)
    elif kind == "respond":
        if not isinstance(raw.get("message"), str):
            reasons = ["respond needs a message: the text the agent gets as the tool's result"]
    elif kind == "reject" and raw.get("message") is not None and not isinstance(raw["message"], str):
        reasons = ["a reject reason must be text"]
    if reasons:
        raise DecisionRefused(reasons)
    return _decision.validate_python(dict(raw))


def _edit_problems(action: ActionReview, raw: Mapping[str, Any]) -> list[str]:
    if "edited_action" not in raw:
        return ["an edit carries the new call as edited_action: {name, args}"]
    edited = raw["edited_action"]
    if not isinstance(edited, Mapping) or not isinstance(edited.get("name"), str):
        return ["edited_action needs the tool name and its args"]
    if edited["name"] != action.name:
        return [f"an edit cannot change the tool ({action.name} -> {edited['name']})"]
    args = edited.get("args")
    if not isinstance(args, Mapping):
        return ["edited_action.args must be an object of argument names to values"]
    return args_problems(action, args)


def _unquoted(error: Any, path: list[Any], action: ActionReview) -> str:
    """A schema error's message with the value it quotes masked where it holds a secret (by
    name, shape, the call's own hidden values): an Edit's form and a refusal quote it."""
    key = str(path[-1]) if path else "value"
    masked = conceal({key: error.instance})[0][key]
    message = str(error.message)
    if masked != error.instance:
        message = message.replace(repr(error.instance), repr(masked))
    return mask_text(message, known_values(action.hidden))


def args_problems(action: ActionReview, args: Mapping[str, Any]) -> list[str]:
    """Reasons the args do not fit the tool's argument schema (none if unknown)."""
    if not action.args_schema:
        return []
    found = []
    for path, error in sorted(
        schemas.problems(action.args_schema, dict(args)), key=lambda p: [str(x) for x in p[0]]
    ):
        where = ".".join(str(p) for p in path)
        message = error if isinstance(error, str) else _unquoted(error, path, action)
        found.append(f"{where}: {message}" if where else message)
    return found


def check_decisions(request: PendingRequest, decisions: Any) -> list[Decision]:
    """A complete decision set for an approval request, in request order."""
    if request.kind is RequestKind.QUESTION:
        raise DecisionRefused(["this pause asks a question: answer it, do not approve or reject it"])
    if request.kind is RequestKind.ELICITATION:
        raise DecisionRefused(['an MCP server asks: answer with {"responses": {key: {"action": ...}}}'])
    if not isinstance(decisions, list):
        raise DecisionRefused([f"decisions must be a list, one per action, not {_short(decisions)}"])
    if len(decisions) != len(request.actions):
        raise DecisionRefused(
            [f"expected {len(request.actions)} decision(s), one per action in order, got {len(decisions)}"]
        )
    reasons: list[str] = []
    checked: list[Decision] = []
    for index, (action, raw) in enumerate(zip(request.actions, decisions, strict=True)):
        try:
            checked.append(check_decision(action, raw))
        except DecisionRefused as refused:
            label = f"action {index + 1} ({action.name})" if len(request.actions) > 1 else action.name
            reasons.extend(f"{label}: {reason}" for reason in refused.reasons)
    if reasons:
        raise DecisionRefused(reasons)
    return checked


def check_answer(request: PendingRequest, answer: Any) -> Any:
    """An answer to a question pause, checked against its schema if it has one."""
    if request.kind is not RequestKind.QUESTION:
        raise DecisionRefused(["this pause needs decisions, not a free answer"])
    if request.answer_schema:
        errors = schemas.problems(request.answer_schema, answer)
        if errors:
            first = errors[0][1]
            raise DecisionRefused(
                [f"the answer does not fit: {first if isinstance(first, str) else first.message}"]
            )
    return answer


def _checked_payload(request: PendingRequest, decisions_or_answer: Any) -> Any:
    """The payload for `Command(resume={interrupt_id: payload})`, checked first.

    Batched: {"decisions": [...]}; per_call: one decision; question: the answer.
    """
    if request.kind is RequestKind.QUESTION:
        return check_answer(request, decisions_or_answer)
    decisions = [as_payload(d) for d in check_decisions(request, decisions_or_answer)]
    if request.kind is RequestKind.BATCHED:
        return {"decisions": decisions}
    return decisions[0]


def payload_from_decisions(request: PendingRequest, decisions: Sequence[Any]) -> Any:
    """The (unchecked) resume payload for decisions collected in request order; `check_resume` checks it.

    A question's single decision is an `Answer`: `{"type": "answer", "answer": value}`.
    """
    if request.kind is RequestKind.QUESTION:
        return decisions[0]["answer"] if decisions and isinstance(decisions[0], Mapping) else None
    if request.kind is RequestKind.ELICITATION:
        return (
            responses_of(request, decisions[0]) if decisions and isinstance(decisions[0], Mapping) else None
        )
    if request.kind is RequestKind.BATCHED:
        return {"decisions": list(decisions)}
    return decisions[0] if decisions else None


def check_resume(request: PendingRequest, payload: Any) -> Any:
    """Check a resume payload as the caller would pass it to LangGraph.

    Returns the clean payload to send, or raises `DecisionRefused`.
    """
    if request.kind is RequestKind.BATCHED:
        if isinstance(payload, list):
            raise DecisionRefused(['send {"decisions": [...]}, not a bare list of decisions'])
        if not isinstance(payload, Mapping) or "decisions" not in payload:
            raise DecisionRefused(['a batched pause is answered with {"decisions": [...]}'])
        return _checked_payload(request, payload["decisions"])
    if request.kind is RequestKind.PER_CALL:
        return _checked_payload(request, [payload])
    if request.kind is RequestKind.ELICITATION:
        return check_responses(request, payload)
    return _checked_payload(request, payload)


def responses_of(request: PendingRequest, decision: Mapping[str, Any]) -> dict[str, Any]:
    """The (unchecked) resume of an elicitation round from its one recorded decision (`Elicited`):
    its action for every request, each form's values with an accept."""
    action, content = decision.get("action"), decision.get("content") or {}
    responses: dict[str, Any] = {}
    for asked in request.elicitations:
        response: dict[str, Any] = {"action": action}
        if action == "accept" and asked.mode == "form":
            response["content"] = content.get(asked.key) if isinstance(content, Mapping) else None
        responses[asked.key] = response
    return {"responses": responses}


def check_responses(request: PendingRequest, payload: Any) -> dict[str, Any]:
    """Check an elicitation round's resume: exactly one response per request key, each an action
    MCP knows; an accept of a form with values that fit its schema, any other without values.
    Returns the clean `{"responses": ...}`, or raises `DecisionRefused`."""
    if not isinstance(payload, Mapping) or not isinstance(payload.get("responses"), Mapping):
        raise DecisionRefused(['an MCP server\'s questions are answered with {"responses": {key: ...}}'])
    given, asked = payload["responses"], {e.key: e for e in request.elicitations}
    missing, unknown = sorted(set(asked) - set(given)), sorted(set(given) - set(asked))
    reasons = [f"no answer for {_short(k)}" for k in missing] + [
        f"{_short(k)} was not asked" for k in unknown
    ]
    clean: dict[str, Any] = {}
    for key, elicitation in asked.items():
        response = given.get(key)
        if key in missing:
            continue
        if not isinstance(response, Mapping) or response.get("action") not in ACTIONS:
            reasons.append(f"{_short(key)}: the action is accept, decline or cancel")
            continue
        action, content = response["action"], response.get("content")
        if action == "accept" and elicitation.mode == "form":
            found = content_problems(elicitation.requested_schema or {}, content)
            reasons += [
                f"{_short(key)}: {field + ': ' if field else ''}{said}" for field, said in found.items()
            ]
            clean[key] = {
                "action": action,
                "content": dict(content) if isinstance(content, Mapping) else None,
            }
        elif content is not None:
            reasons.append(f"{_short(key)}: a {action} of a {elicitation.mode} request carries no values")
        else:
            clean[key] = {"action": action}
    if reasons:
        raise DecisionRefused(reasons)
    return {"responses": clean}


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class ArgPreview(NamedTuple):
    """What a reviewer sees of one argument: a short preview and the full size."""

    name: str
    text: str
    length: int

    @property
    def cut(self) -> bool:
        return len(self.text) < self.length


def preview_args(args: Mapping[str, Any], limit: int = 200) -> list[ArgPreview]:
    """`name: value` previews; long values are cut and say how long they were."""
    previews = []
    for name, value in args.items():
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
        shown = text if len(text) <= limit else text[: limit - 1] + "…"
        previews.append(ArgPreview(str(name), shown, len(text)))
    return previews


def origin_of(task: str, path: Sequence[Any], calls: Sequence[Mapping[str, Any]], graph: str) -> str:
    """Which agent a pending task's interrupts come from: `graph`, or "subagent <name>" when the
    task is the tools node's push task of a deepagents `task` call (at its index in `calls`)."""
    if task == "tools" and len(path) >= 2 and path[0] == "__pregel_push" and isinstance(path[1], int):
        if path[1] < len(calls) and calls[path[1]].get("name") == "task":
            args = calls[path[1]].get("args") or {}
            return f"subagent {args.get('subagent_type', '?')}"
    return graph
