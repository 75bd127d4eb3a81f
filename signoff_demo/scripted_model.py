"""A chat model that follows a script: deterministic agents with zero tokens.

The demo agent and the tests drive real langchain / deepagents graphs with it.
The reply is chosen from the conversation itself (how many model turns happened
since the last human message), so a run resumed in another process, after a
restart, continues the same script.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage
from langchain_core.outputs import ChatGeneration, ChatResult

Turn = AIMessage | Callable[[list[BaseMessage]], AIMessage]


def tool_call(name: str, args: dict[str, Any], call_id: str) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def calls(*tool_calls: dict[str, Any], content: str = "") -> AIMessage:
    """An AI turn that asks for the given tool calls."""
    return AIMessage(content=content, tool_calls=list(tool_calls))


def turns_since_human(messages: Sequence[BaseMessage]) -> int:
    count = 0
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            break
        if isinstance(message, AIMessage):
            count += 1
    return count


def last_human_text(messages: Sequence[BaseMessage]) -> str:
    for message in reversed(messages):
        if isinstance(message, HumanMessage):
            return message.text
    return ""


class ScriptedChatModel(BaseChatModel):
    """Replies with `script(messages)`, or with the n-th turn of a fixed list."""

    turns: list[Any] = []
    script: Callable[[list[BaseMessage]], AIMessage] | None = None

    @property
    def _llm_type(self) -> str:
        return "signoff-scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        return self

    def _next_turn(self, messages: list[BaseMessage]) -> AIMessage:
        if self.script is not None:
            return self.script(messages)
        index = turns_since_human(messages)
        if index >= len(self.turns):
            return AIMessage(content="Done.")
        turn = self.turns[index]
        return turn(messages) if callable(turn) else turn

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        reply = self._next_turn(messages).model_copy(deep=True)
        return ChatResult(generations=[ChatGeneration(message=reply)])
