"""response_url: how an app answers one interaction, served as Slack serves it.

Every click on a message and every slash command carries a `response_url`
(a click inside a modal carries none). The app POSTs JSON to it, as
slack_sdk's `WebhookClient` does:

* `delete_original: true` deletes the message clicked, as chat.delete does;
* `replace_original: true` replaces it in place: same ts, same thread, its
  metadata kept unless the body brings new `metadata`. The new text and
  blocks replace the old ones whole: a body without `blocks` leaves a
  message without blocks (its buttons are gone), unlike chat.update;
* neither posts a new message: `response_type: in_channel` in the channel
  (in a thread only if the body names `thread_ts`), else, by default, an
  ephemeral message only the person who clicked sees.

Slack answers HTTP 200 with the plain-text body `ok`, and otherwise a plain
error string (its incoming-webhook errors, the same hooks service): 400
`invalid_payload` for a body that is not JSON, 400 `invalid_blocks` for bad
Block Kit (nothing is cut for you), 400 `missing_text_or_fallback_or_attachments`
for a message with neither text nor blocks. A URL works at most 5 times, within
30 minutes of the interaction: then 404 `used_url`, or 404 `expired_url`. Two
choices Slack does not document: an unknown URL gets 404 `no_service` (what
hooks.slack.com answers for a webhook that does not exist), and replacing or
deleting a message that is already gone gets 404 `message_not_found`. Only a use
that worked counts toward the five. There is no rate limit besides: a
response_url is Slack's way for an app to answer, not a Web API method.

A slash command has no message of its own: its URL's first answer becomes the
message a later `replace_original` or `delete_original` acts on (before any,
a replace posts the answer and a delete finds nothing).
"""

from __future__ import annotations

import json
import time
from typing import Any

from aiohttp import web

from slack_standin.blockkit import message_problem
from slack_standin.models import RESPONSE_URL_USES, Call, Message, ResponseUrl
from slack_standin.workspace import Workspace

OK = (200, "ok")


class ResponseURLs(Workspace):
    """POST /response/{id}: the response_urls the stand-in issued with its interactions."""

    async def _response_url(self, request: web.Request) -> web.Response:
        url_id = request.match_info["id"]
        raw = await request.text()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        issued = self.response_urls.get(url_id)
        status, answer = self._answer(issued, body)
        if issued is not None and status == 200:
            issued.uses += 1
        reply = {"ok": status == 200, "answer": answer, "id": url_id, "uses": issued.uses if issued else 0}
        self.calls.append(
            Call("response_url", body if isinstance(body, dict) else {"raw": raw}, status, reply)
        )
        return web.Response(status=status, text=answer, content_type="text/plain")

    def _answer(self, issued: ResponseUrl | None, body: Any) -> tuple[int, str]:
        """(HTTP status, plain-text body) for one use of a response_url, as Slack answers it."""
        if issued is None:
            return 404, "no_service"
        if time.monotonic() - issued.issued > self.response_url_ttl:
            return 404, "expired_url"
        if issued.uses >= RESPONSE_URL_USES:
            return 404, "used_url"
        if not isinstance(body, dict):
            return 400, "invalid_payload"
        if _truthy(body.get("delete_original")):
            return self._delete_original(issued)
        args = _message_args(body)
        if args.get("_bad") == "metadata":
            return 400, "invalid_payload"
        problem = message_problem(args)
        if problem:
            missing = problem["error"] == "no_text"
            return 400, "missing_text_or_fallback_or_attachments" if missing else "invalid_blocks"
        if _truthy(body.get("replace_original")) and issued.message_ts is not None:
            return self._replace_original(issued, args)
        return self._post_answer(issued, args, in_channel=body.get("response_type") == "in_channel")

    def _original(self, issued: ResponseUrl) -> Message | dict[str, Any] | None:
        """The message this URL answers, while it is still there (an ephemeral one: a dict)."""
        if issued.message_ts is None:
            return None
        if issued.ephemeral:
            return self.ephemeral(issued.channel, issued.message_ts, issued.user)
        return self.message(issued.channel, issued.message_ts)

    def _delete_original(self, issued: ResponseUrl) -> tuple[int, str]:
        original = self._original(issued)
        if original is None:
            return 404, "message_not_found"
        if isinstance(original, Message):
            self.remove(original)
        else:
            self.ephemerals.remove(original)
        return OK

    def _replace_original(self, issued: ResponseUrl, args: dict[str, Any]) -> tuple[int, str]:
        original = self._original(issued)
        if original is None:
            return 404, "message_not_found"
        if isinstance(original, Message):
            original.text = args["text"]
            original.blocks = args["blocks"]
            if args["metadata"] is not None:
                original.metadata = args["metadata"]
            original.changed("response_url")
        else:
            original.update(text=args["text"], blocks=args["blocks"], updates=original["updates"] + 1)
        return OK

    def _post_answer(self, issued: ResponseUrl, args: dict[str, Any], in_channel: bool) -> tuple[int, str]:
        """A new message: in the channel for everyone, or an ephemeral one for the person alone."""
        if in_channel:
            message = Message(
                channel=issued.channel,
                ts=self._next_ts(),
                text=args["text"],
                blocks=args["blocks"],
                thread_ts=args["thread_ts"],
                metadata=args["metadata"],
            )
            self.messages.append(message)
            ts, ephemeral = message.ts, False
        else:
            # An ephemeral answer to a click in a thread shows in that thread.
            clicked = self.message(issued.channel, issued.message_ts or "")
            thread_ts = args["thread_ts"] or (clicked.thread_ts if clicked else None)
            ts = self.add_ephemeral(issued.channel, issued.user, args["text"], args["blocks"], thread_ts)
            ephemeral = True
        if issued.message_ts is None:  # a slash command's first answer is what it later replaces
            issued.message_ts, issued.ephemeral = ts, ephemeral
        return OK


def _truthy(value: Any) -> bool:
    return value is True or str(value).lower() in ("true", "1")


def _message_args(body: dict[str, Any]) -> dict[str, Any]:
    """The message in a response_url body: blocks and metadata may come as JSON strings."""
    args: dict[str, Any] = {
        "text": str(body.get("text") or ""),
        "blocks": body.get("blocks") or [],
        "thread_ts": body.get("thread_ts"),
        "metadata": body.get("metadata"),
    }
    for key in ("blocks", "metadata"):
        if isinstance(args[key], str):
            try:
                args[key] = json.loads(args[key])
            except ValueError:
                args["_bad"] = key
    if not isinstance(args["blocks"], list) or not all(isinstance(b, dict) for b in args["blocks"]):
        args["_bad"] = "blocks"
    return args
