"""Slack's agent surfaces: streamed messages, agent sessions and suggested prompts.

The rules, as slack_sdk 3.48 and Slack's method pages state them, and (marked) as people
report Slack behaving where the pages are silent:

* `chat.startStream` answers in a thread only (`thread_ts`, a message that exists); outside a
  DM it needs `recipient_user_id` and `recipient_team_id` (reported: missing_recipient_*).
* `markdown_text` is at most 12,000 characters a call (msg_too_long); chunks are
  markdown_text, task_update, plan_update or blocks (invalid_chunks otherwise).
* `chat.appendStream` and `chat.stopStream` act only on a message still streaming, posted by
  this app: message_not_in_streaming_state otherwise, and (reported) once a stream is about
  five minutes old.
* `assistant.threads.setStatus` takes `chat:write` (or, for now, `assistant:write`); Slack drops
  the status two minutes after it is set, and when the app sends a message in the thread. An
  agent-view app's call is bridged to its agent session (Slack's migration guide): accepted the same.
* `setSuggestedPrompts` takes `assistant:write`, up to four prompts, in a DM. What it sets depends
  on the app's experience (`app_config`): for the agent view, prompts live at the top of the
  Messages tab (`tab_prompts`; the manifest's until the app sets its own), and a call with a
  `thread_ts` "silently fails" (Slack's page): ok, and nothing shown. For the assistant view, they
  go in the thread named, else in the channel's latest thread.
* A channel can refuse streaming (`refuse_streaming`): the fallback is exercised as it is
  where a workspace or channel type does not take streams.
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from markdown_it import MarkdownIt

from slack_standin.app_config import load_manifest
from slack_standin.blockkit import block_problems
from slack_standin.models import Message

MARKDOWN_MOST = 12_000
STREAM_LIFETIME_S = 300.0  # reported, not documented: a stream ends about five minutes after it starts
CHUNK_TYPES = ("markdown_text", "task_update", "plan_update", "blocks")
TASK_STATUSES = ("pending", "in_progress", "complete", "error")
STATUS_TIMEOUT_S = 120.0  # setStatus: "removed if no message has been sent" within two minutes
PROMPTS_MOST = 4  # assistant.threads.setSuggestedPrompts: up to four prompts

_MARKDOWN = MarkdownIt("commonmark", {"html": False}).enable(["table", "strikethrough"])


def markdown_html(text: str) -> str:
    """What a streamed message shows: its Markdown as Slack draws it (raw HTML shown as text)."""
    return _MARKDOWN.render(text)


class Streaming:
    """The streaming and agent methods of the Web API (mixed into `WebAPI`)."""

    messages: list[Message]
    team_id: str
    left: set[str]
    scopes: list[str]

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.refused_streams: dict[str, str] = {}  # channel -> the error chat.startStream answers
        # (channel, thread_ts) -> an agent thread's status (what, when: monotonic, messages then)
        self._statuses: dict[tuple[str, str], tuple[str, float, int]] = {}
        self.status_timeout_s = STATUS_TIMEOUT_S
        self.prompts: dict[tuple[str, str], list[dict[str, str]]] = {}  # and the prompts offered
        self.tab_prompts: dict[str, list[dict[str, str]]] = {}  # a DM -> the agent view's, set by the app
        # the app as configured: deploy/slack-manifest.yml's (or `app_config.assistant_view_install`)
        self.app_manifest: dict[str, Any] | None = load_manifest()

    @property
    def experience(self) -> str:
        """The app's agent experience: "agent" (Slack's agent view, as the manifest declares) or
        "assistant" (an install with Slack's earlier assistant view)."""
        features = (self.app_manifest or {}).get("features") or {}
        return "assistant" if "assistant_view" in features and "agent_view" not in features else "agent"

    def shown_prompts(self, dm: str) -> list[dict[str, str]]:
        """The prompts at the top of an agent-view app's Messages tab: the app's, else its manifest's."""
        agent = ((self.app_manifest or {}).get("features") or {}).get("agent_view") or {}
        return self.tab_prompts.get(dm) or list(agent.get("suggested_prompts") or [])

    if TYPE_CHECKING:  # (Workspace's)

        def message(self, channel: str, ts: str) -> Message | None: ...

        def _next_ts(self) -> str: ...

    def refuse_streaming(self, channel: str, error: str = "channel_type_not_supported") -> None:
        """`chat.startStream` in `channel` answers `error`, as Slack does where streams are not taken."""
        self.refused_streams[channel] = error

    def _chat_startStream(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(args.get("channel", "")), str(args.get("thread_ts") or "")
        if channel in self.refused_streams:
            return {"ok": False, "error": self.refused_streams[channel]}
        if channel in self.left:
            return {"ok": False, "error": "not_in_channel"}
        if not thread_ts or self.message(channel, thread_ts) is None:
            return {"ok": False, "error": "thread_not_found" if thread_ts else "invalid_arguments"}
        if not channel.startswith("D"):
            for need in ("recipient_user_id", "recipient_team_id"):
                if not args.get(need):
                    return {"ok": False, "error": f"missing_{need}"}
        problem = self._stream_problem(args)
        if problem:
            return problem
        message = Message(
            channel=channel,
            ts=self._next_ts(),
            text="",
            blocks=[],
            thread_ts=thread_ts,
            markdown="",
            streaming=True,
            started=time.monotonic(),
        )
        self._add_to_stream(message, args)
        self.messages.append(message)
        return {"ok": True, "channel": channel, "ts": message.ts}

    def _chat_appendStream(self, args: dict[str, Any]) -> dict[str, Any]:
        found = self._streaming(args)
        if isinstance(found, dict):
            return found
        self._add_to_stream(found, args)
        found.changed("chat.appendStream")
        return {"ok": True, "channel": found.channel, "ts": found.ts}

    def _chat_stopStream(self, args: dict[str, Any]) -> dict[str, Any]:
        found = self._streaming(args)
        if isinstance(found, dict):
            return found
        blocks = args.get("blocks") or []
        if isinstance(blocks, str):
            blocks = json.loads(blocks)
        errors = block_problems(blocks, limit=50)
        if errors:
            return {"ok": False, "error": "invalid_blocks", "errors": errors}
        self._add_to_stream(found, args)
        metadata = args.get("metadata")
        found.metadata = json.loads(metadata) if isinstance(metadata, str) else metadata
        found.blocks = blocks
        found.streaming = False
        found.changed("chat.stopStream")
        return {"ok": True, "channel": found.channel, "ts": found.ts, "message": {"text": found.text}}

    def _streaming(self, args: dict[str, Any]) -> Message | dict[str, Any]:
        """The message a call streams into, or Slack's error (the message's, then the call's)."""
        found = self._stream_of(args)
        return found if isinstance(found, dict) else self._stream_problem(args) or found

    def _stream_of(self, args: dict[str, Any]) -> Message | dict[str, Any]:
        found = self.message(str(args.get("channel", "")), str(args.get("ts", "")))
        if found is None:
            return {"ok": False, "error": "message_not_found"}
        if found.user != "U0SIGNOFF":
            return {"ok": False, "error": "message_not_owned_by_app"}
        if not found.streaming or time.monotonic() - found.started > STREAM_LIFETIME_S:
            found.streaming = False
            return {"ok": False, "error": "message_not_in_streaming_state"}
        return found

    @staticmethod
    def _stream_problem(args: dict[str, Any]) -> dict[str, Any] | None:
        if len(str(args.get("markdown_text") or "")) > MARKDOWN_MOST:
            return {"ok": False, "error": "msg_too_long"}
        chunks = args.get("chunks") or []
        if isinstance(chunks, str):
            chunks = json.loads(chunks)
        for chunk in chunks:
            kind = chunk.get("type") if isinstance(chunk, dict) else None
            if kind not in CHUNK_TYPES:
                return {"ok": False, "error": "invalid_chunks"}
            if kind == "markdown_text" and len(str(chunk.get("text") or "")) > MARKDOWN_MOST:
                return {"ok": False, "error": "msg_too_long"}
            if kind == "task_update" and (
                not chunk.get("id") or not chunk.get("title") or chunk.get("status") not in TASK_STATUSES
            ):
                return {"ok": False, "error": "invalid_chunks"}
        return None

    @staticmethod
    def _add_to_stream(message: Message, args: dict[str, Any]) -> None:
        """The text a call adds: its markdown_text, then its chunks' (mentions ping as posted)."""
        chunks = args.get("chunks") or []
        if isinstance(chunks, str):
            chunks = json.loads(chunks)
        added = str(args.get("markdown_text") or "") + "".join(
            str(c.get("text") or "")
            for c in chunks
            if isinstance(c, dict) and c.get("type") == "markdown_text"
        )
        message.markdown = (message.markdown or "") + added
        message.text = message.markdown
        message.pinged = message.pinged | Message.mentioned(message.markdown)  # (even split in two)

    # agent sessions ---------------------------------------------------------------

    @property
    def statuses(self) -> dict[tuple[str, str], str]:
        """The agent threads' statuses people see now: Slack drops one `status_timeout_s` after
        it was set, and when the app sends a message in its thread."""
        shown = {}
        for (channel, thread_ts), (status, at, seen) in self._statuses.items():
            answered = any(
                m.user == "U0SIGNOFF" and m.channel == channel and m.thread_ts == thread_ts
                for m in self.messages[seen:]
            )
            if time.monotonic() - at < self.status_timeout_s and not answered:
                shown[(channel, thread_ts)] = status
        return shown

    def _missing(self, *scopes: str) -> dict[str, Any] | None:
        """Slack's missing_scope unless the token holds one of `scopes`."""
        if any(scope in self.scopes for scope in scopes):
            return None
        provided = ",".join(self.scopes)
        return {"ok": False, "error": "missing_scope", "needed": ",".join(scopes), "provided": provided}

    def _assistant_threads_setStatus(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(args.get("channel_id", "")), str(args.get("thread_ts", ""))
        missing = self._missing("chat:write", "assistant:write")  # (either, for now, says Slack)
        if missing:
            return missing
        if self.message(channel, thread_ts) is None:
            return {
                "ok": False,
                "error": "invalid_thread_ts" if channel.startswith("D") else "channel_not_found",
            }
        status = str(args.get("status") if args.get("status") is not None else "")
        if status:
            self._statuses[(channel, thread_ts)] = (status, time.monotonic(), len(self.messages))
        else:
            self._statuses.pop((channel, thread_ts), None)
        return {"ok": True}

    def _assistant_threads_setSuggestedPrompts(self, args: dict[str, Any]) -> dict[str, Any]:
        channel, thread_ts = str(args.get("channel_id", "")), str(args.get("thread_ts") or "")
        missing = self._missing("assistant:write")
        if missing:
            return missing
        prompts = args.get("prompts") or []
        if isinstance(prompts, str):
            prompts = json.loads(prompts)
        if not channel.startswith("D"):
            return {"ok": False, "error": "channel_not_found"}
        if not 1 <= len(prompts) <= PROMPTS_MOST or any(
            not isinstance(p, dict) or not p.get("title") or not p.get("message") for p in prompts
        ):
            return {"ok": False, "error": "invalid_arguments"}
        if self.experience == "agent":
            if not thread_ts:  # (with one, Slack's page: the call "will silently fail")
                self.tab_prompts[channel] = list(prompts)
            return {"ok": True}
        if not thread_ts:  # "If not provided, the prompts will be set for the latest message"
            roots = [m.ts for m in self.messages if m.channel == channel and not m.thread_ts]
            if not roots:
                return {"ok": False, "error": "message_not_found"}
            thread_ts = roots[-1]
        self.prompts[(channel, thread_ts)] = list(prompts)
        return {"ok": True}
