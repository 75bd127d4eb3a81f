"""Secrets against a red team: every way a red-team pass found for a secret in a call's arguments
to reach Slack, a log line or the audit, or for the tool to get a mask instead of the value;
each test failed on the code it was found in."""

from __future__ import annotations

import json

from langchain_core.tools import tool
from pydantic import BaseModel

from bot.views.modals import parse_edit
from core.logs import redact
from core.protocol import ActionReview, PendingRequest, RequestKind
from core.records import concealed
from core.secrets import conceal

DB_PASSWORD = "Tr0ub4dor&3-horse-staple"  # secret by its key's name only (no shape)


class Login(BaseModel):
    user: str
    password: str
    port: int = 5432


@tool
def connect(host: str, login: Login | None = None) -> str:
    """Connect to a database."""
    return "ok"


def concealed_call(args, schema=None, name="connect") -> ActionReview:
    request = PendingRequest(
        interrupt_id="i1",
        kind=RequestKind.PER_CALL,
        actions=(
            ActionReview(
                name=name, args=args, allowed_decisions=("approve", "edit", "reject"), args_schema=schema
            ),
        ),
    )
    return concealed(request).actions[0]


def test_edit_form_error_quotes_a_restored_secret():
    schema = connect.tool_call_schema.model_json_schema()  # as agent_runner.runner.tool_schemas makes it
    action = concealed_call(
        {"host": "db1", "login": {"user": "bob", "password": DB_PASSWORD, "port": 5432}}, schema
    )
    assert DB_PASSWORD not in json.dumps(action.args)  # the card and the form show it masked
    # the approver mistypes the port, leaves the password as shown ("••••" + last 4)
    typed = json.dumps({**action.args["login"], "port": "5433x"}, ensure_ascii=False)
    _, errors = parse_edit(action, {"host": "db1", "login": typed})
    assert not any(DB_PASSWORD[:-4] in e for e in errors.values()), f"secret in the form's error: {errors}"


# -- 2. a private key in a file a write_file overwrites: the diff's context shows its last lines ---

from core.previews import FileCall, file_preview  # noqa: E402

KEY_LINES = [
    "MIIEowIBAAKCAQEAx1z3Qm7aG2dLxkW0qJ9yZ2bR4pQ8sT5uV6wX7yZ8aB9cD0eF",
    "1gH2iJ3kL4mN5oP6qR7sT8uV9wX0yZ1aB2cD3eF4gH5iJ6kL7mN8oP9qR0sT1uV2",
    "wX3yZ4aB5cD6eF7gH8iJ9kL0mN1oP2qR3sT4uV5wX6yZ7aB8cD9eF0gH1iJ2kL3m",
    "N4oP5qR6sT7uV8wX9yZ0aB1cD2eF3gH4iJ5kL6mN7oP8qR9sT0uV1wX2yZ3aB4cD",
]
PEM = "-----BEGIN RSA PRIVATE KEY-----\n" + "\n".join(KEY_LINES) + "\n-----END RSA PRIVATE KEY-----"


def test_a_diff_shows_no_line_of_a_private_key_the_content_carries():
    before = f"service: api\ntls_key: |\n{PEM}\nport: 8080\n"
    after = before.replace("port: 8080", "port: 9090")  # the agent changes one line after the key
    args = {"file_path": "/app/config.yaml", "content": after}
    call = FileCall("write_file", "/app/config.yaml", "files")
    request = PendingRequest(
        interrupt_id="i1",
        kind=RequestKind.PER_CALL,
        actions=(
            ActionReview(
                name="write_file",
                args=args,
                allowed_decisions=("approve", "reject"),
                preview=file_preview(call, args, before),
            ),
        ),
    )
    action = concealed(request).actions[0]
    assert all(line not in json.dumps(action.args) for line in KEY_LINES)  # the args: masked
    shown = action.preview.text
    assert not [line for line in KEY_LINES if line in redact(shown)], "private key lines in the card's diff"


# -- 3. shapes the issue names that conceal (card, audit) and the Slack client's backstop miss --------

SIGNED_JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJhZ2VudC0xIn0.SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
FINE_GRAINED_PAT = (
    "github_pat_11ABCDEFG0" + "a1B2c3D4e5" * 8 + "xy"
)  # a fine-grained GitHub token: 93 characters


def test_a_bare_jwt_is_masked_whole_signature_included():
    shown, _ = conceal({"command": f"curl -H 'X-Auth: {SIGNED_JWT}' https://api.example.com/v1/me"})
    slack = redact(shown["command"])  # what the Slack client sends after its own redaction
    assert SIGNED_JWT.split(".")[2] not in slack, slack


def test_a_fine_grained_github_token_is_masked():
    shown, _ = conceal({"script": f"export GH_PAT={FINE_GRAINED_PAT} && gh repo list"})
    slack = redact(shown["script"])
    assert FINE_GRAINED_PAT[11:-4] not in slack, slack


def test_credentials_in_a_url_without_a_password_reach_no_audit():
    token = "0123456789abcdef0123456789abcdef01234567"  # a classic 40-hex GitHub token, user-only form
    args = {"remote": f"https://{token}@github.com/acme/infra.git"}
    shown, hidden = conceal(args)
    # core.store.approvals.create: no hidden value -> the audit's original_args are `action.args` (shown)
    assert token not in json.dumps(shown), f"audit original_args: {shown}"


def test_an_api_key_in_a_query_string_reaches_no_audit():
    args = {"webhook": "https://api.example.com/hook?api_key=Zx81kq0pWm3n5b7v9c2x&x=1"}
    shown, _ = conceal(args)
    assert "Zx81kq0pWm3n5b7v9c2x" not in json.dumps(shown), f"audit original_args: {shown}"


# -- 4. an edit's arguments are shown (card, outcome line, quorum proposal, "View full arguments",
#       plan title) masked at the original's pointers and by name/shape, but not at the policy's
#       `redact` paths: a value the policy names, new in the edit, is shown -------------------------

from core.secrets import Redaction  # noqa: E402


def test_an_edit_shows_no_value_the_policys_redact_names():
    rules = [Redaction.parse("args.cards[].number")]
    request = PendingRequest(
        interrupt_id="i1",
        kind=RequestKind.PER_CALL,
        actions=(
            ActionReview(
                name="pay",
                args={"cards": [{"number": "4111111111111111"}], "amount": 5},
                allowed_decisions=("approve", "edit", "reject"),
            ),
        ),
    )
    action = concealed(request, lambda name: rules).actions[0]
    assert "4111111111111111" not in json.dumps(action.args)
    edited = {"cards": [{"number": "4111111111111111"}, {"number": "5500005555555559"}], "amount": 5}
    shown = action.shown(edited)  # what bot.views.cards / card_words / modals.args_modal / plan render
    assert "5500005555555559" not in json.dumps(shown), shown


# -- 5. an Edit that changes a text holding a secret (masked where it sits) sends the mask's text to
#       the tool in the secret's place, the secret itself untouched: no error, no warning --------------

CLASSIC_GH_TOKEN = "ghp_" + "a1B2" * 9


def test_editing_around_a_masked_token_keeps_the_token():
    body = f"Deploy key for CI: {CLASSIC_GH_TOKEN}\nRotate monthly."
    action = concealed_call({"to": "ops@acme.com", "body": body}, name="send_email")
    shown_body = action.args["body"]
    assert CLASSIC_GH_TOKEN not in shown_body
    typed = shown_body.replace("monthly", "weekly")  # the approver fixes one word, leaves the token as shown
    decision, errors = parse_edit(action, {"to": "ops@acme.com", "body": typed})
    sent = decision["edited_action"]["args"]["body"]
    assert errors or CLASSIC_GH_TOKEN in sent, (
        f"the tool gets {sent!r} (the mask, not the token), and no error"
    )


# -- 6. Agent Server path: the agent's answer is masked for the values its calls carried by name and
#       shape only; a value only the policy's `redact` names (a card number) is posted as the agent
#       repeats it (the local runner masks it: `agent_runner.runner.secrets_of` passes the policy) --

from core.agent_server import AgentServer  # noqa: E402
from core.secrets import carried  # noqa: E402


def test_an_agent_servers_answer_masks_what_the_policy_redacts():
    card = "4111111111111111"
    messages = [
        {"type": "human", "content": "charge Ada"},
        {
            "type": "ai",
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "charge", "args": {"customer": {"card_number": card}, "amount": 5}}
            ],
        },
        {"type": "tool", "content": "charged", "tool_call_id": "c1"},
        {"type": "ai", "content": f"Charged card {card} for 5 EUR."},
    ]
    server = AgentServer.__new__(AgentServer)  # no client needed for reading a state
    found = server._reading(
        {"thread_id": "t1", "status": "idle", "metadata": {}},
        {"values": {"messages": messages}},
        [{"run_id": "r1"}],
    )
    rules = lambda tool: [Redaction.parse("args.customer.card_number")]  # noqa: E731
    assert card in carried(messages, rules)  # what the local runner masks
    told = found.masked(rules)  # what the reconciler posts (it knows the policy)
    assert card not in told.answer and "Charged card ••••" in told.answer, told.answer


# -- 7. "View full arguments" shows the call's description in full; LangChain's HumanInTheLoop-
#       Middleware's default description is "Tool execution requires approval\n\nTool: …\nArgs: {…}",
#       the real arguments' repr, which `concealed` leaves as it is ---------------------------------

from langgraph.checkpoint.memory import InMemorySaver  # noqa: E402

from bot.views.modals import args_modal  # noqa: E402
from core.records import Run, approval_for  # noqa: E402
from tests.support.secret_graph import CARD_NUMBER, PAYMENTS_KEY, REDACT, build_secret_agent  # noqa: E402


def test_view_full_arguments_shows_no_secret_of_the_middlewares_description():
    graph = build_secret_agent(InMemorySaver())
    config = {"configurable": {"thread_id": "t-desc"}}
    result = graph.invoke({"messages": [{"role": "user", "content": "charge Ada"}]}, config, version="v2")
    request = PendingRequest.from_interrupt(result.interrupts[0])
    rules = [Redaction.parse(p) for p in json.loads(REDACT.split("=", 1)[1].replace("'", '"'))]
    approval = approval_for(
        request, Run(thread_id="t-desc", graph="secret", channel="C1"), "secret", lambda tool: rules
    )
    assert CARD_NUMBER not in json.dumps(approval.request.actions[0].args)  # the args: masked
    sent = redact(json.dumps(args_modal(approval, 0).to_dict(), ensure_ascii=False))  # + the client's net
    assert not [s for s in (CARD_NUMBER, PAYMENTS_KEY) if s in sent], "secret in View full arguments"


# -- 8. detection gaps by name and in key=value text -------------------------------------------------

import pytest  # noqa: E402

from core.secrets import secret_name  # noqa: E402


@pytest.mark.parametrize("key", ["session_id", "sessionId", "id_token"])
def test_keys_that_name_credentials_are_secret(key):
    # session_id is listed in _SECRET_WORDS, but _NOT_THE_VALUE's "id" vetoes it; an OIDC id_token too
    assert secret_name(key), key


@pytest.mark.parametrize(
    "text,value",
    [
        ("export DB_PASSWORD=hunter2hunter2 && ./migrate", "hunter2hunter2"),
        ("API_TOKEN=q8Zk2mW4rT6yU9 ./deploy.sh", "q8Zk2mW4rT6yU9"),
        (
            "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
    ],
)
def test_prefixed_key_value_secrets_in_text_are_masked(text, value):
    shown, _ = conceal({"command": text})
    assert value not in redact(shown["command"]), redact(shown["command"])


# -- 9. a later question the agent asks as structured data (a dict, as `interrupt({...})` allows) is
#       not masked for the values the run's calls carried (only a str question is) -------------------

from bot.views.modals import answer_modal  # noqa: E402


def test_a_structured_question_masks_what_the_runs_calls_carried():
    card = "4111111111111111"  # carried by an earlier call, found only by the policy's redact
    request = PendingRequest(
        interrupt_id="q1",
        kind=RequestKind.QUESTION,
        question={"question": f"The charge to card {card} failed. Retry?", "options": ["yes", "no"]},
    )
    approval = approval_for(
        request, Run(thread_id="t-q", graph="secret", channel="C1"), "secret", known=[card]
    )
    sent = redact(json.dumps(answer_modal(approval).to_dict(), ensure_ascii=False))
    assert card not in sent, "a carried secret in the question's modal"


def test_a_runner_side_refusal_quotes_no_secret():
    """The same jsonschema messages, at the runner (`check_decisions` in `runner.resume`): its
    DecisionRefused text is logged (`resume_refused`) and posted in the run's thread and on the card
    (`DecisionsRefused.error`). Reached when the tool's schema changed between the card and the
    decision (a redeploy), or for any decision the bot's own check let through."""
    from core.protocol import DecisionRefused, check_decisions

    schema = connect.tool_call_schema.model_json_schema()
    request = PendingRequest(
        interrupt_id="i1",
        kind=RequestKind.PER_CALL,
        actions=(
            ActionReview(
                name="connect", args={"host": "db1"}, allowed_decisions=("edit",), args_schema=schema
            ),
        ),
    )
    edit = {
        "type": "edit",
        "edited_action": {
            "name": "connect",
            "args": {"host": "db1", "login": {"user": "bob", "password": DB_PASSWORD, "port": "x"}},
        },
    }
    with pytest.raises(DecisionRefused) as refused:
        check_decisions(request, [edit])
    assert DB_PASSWORD not in str(refused.value), str(refused.value)


# -- 10. a preview hook's text is masked for the hidden values by exact match: a hook that shows the
#        arguments as JSON (json.dumps escapes `"` and `\`, and non-ASCII by default) shows a
#        password holding one of those in full -----------------------------------------------------

from core.previews import from_hook  # noqa: E402


def test_a_hook_preview_showing_the_args_as_json_masks_the_password():
    password = 'p@ss"w0rd\\2026!'  # a quote and a backslash: both escaped by json.dumps
    args = {"host": "db1", "password": password}
    preview = from_hook({"kind": "text", "text": "Will run: connect " + json.dumps(args)}, "hooks:connect")
    request = PendingRequest(
        interrupt_id="i1",
        kind=RequestKind.PER_CALL,
        actions=(ActionReview(name="connect", args=args, allowed_decisions=("approve",), preview=preview),),
    )
    action = concealed(request).actions[0]
    shown = redact(action.preview.text)
    assert json.dumps(password)[1:-1] not in shown, shown


def test_reordering_a_header_list_keeps_the_untouched_authorization():
    """Restoring is by JSON pointer: an approver who moves the Accept header first (the
    Authorization entry untouched, just second now) sends the mask's text as the token."""
    from tests.support.secret_graph import ARGS, BEARER_JWT

    action = concealed_call(dict(ARGS), name="charge")
    headers = list(reversed(action.args["headers"]))  # [Accept, Authorization(masked)]
    decision, errors = parse_edit(action, {"headers": json.dumps(headers, ensure_ascii=False)})
    sent = {h["name"]: h["value"] for h in decision["edited_action"]["args"]["headers"]}
    assert errors or sent["Authorization"] == f"Bearer {BEARER_JWT}", (
        f"the tool gets {sent['Authorization']!r}"
    )


def test_a_token_past_the_scanned_length_is_masked_in_view_full_arguments():
    """`shapes` reads a string's first 100,000 characters; "View full arguments" shows up to 100
    sections of 2,900: a token past 100k, cut across two sections, passes both nets."""
    from core.records import Approval  # noqa: F401
    from core.secrets import SCANNED

    prefix = "log line\n" * (SCANNED // 9 + 10)
    # place the token so that it straddles a 2,900-character section boundary
    body = prefix
    text_len = lambda b: len(f"*body* ({len(b):,} chars)\n```")  # noqa: E731
    start = text_len(body + CLASSIC_GH_TOKEN + "\n") + len(body)
    pad = (2_900 - (start % 2_900)) - 10
    body = prefix + "x" * pad + " " + CLASSIC_GH_TOKEN + "\nend"
    request = PendingRequest(
        interrupt_id="i1",
        kind=RequestKind.PER_CALL,
        actions=(ActionReview(name="send_email", args={"body": body}, allowed_decisions=("approve",)),),
    )
    approval = approval_for(request, Run(thread_id="t-long", graph="g", channel="C1"), "g")
    view = args_modal(approval, 0).to_dict()
    sent = [redact(b["text"]["text"]) for b in view["blocks"] if b.get("type") == "section"]
    joined = "".join(sent)
    assert CLASSIC_GH_TOKEN[4:-4] not in joined, "token visible across two sections"
