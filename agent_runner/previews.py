"""Previews of paused calls, made in the runner before their approval (and its card) exists.

For each action of a pause (`core.previews`): the preview hook the graph names for its tool
(`SIGNOFF_PREVIEWS`, langgraph.json's `"signoff": {"previews": ...}`), else Signoff's own for
file tools: the file as the agent will see it, read the way the tool reads it. deepagents'
`write_file` / `edit_file` carry their `FilesystemMiddleware`, whose backend says where files
are: the state backend's are the graph state's `files`; a composite backend routes the path;
any other backend (the filesystem's, a sandbox's, a store's) is asked with its own
`adownload_files`. Anthropic's text editor and memory tools (`langchain_anthropic`) keep them
in the state key their middleware names, or in its folder (`root_path`, read as the tool reads
it: through the tool's own check of the path).

The state is the asking agent's: the graph's, or a deepagents subagent's own (a subagent runs
inside its `task` call, under that call's checkpoint namespace: read through the subagent's
compiled graph, found in the `task` tool, with the graph's saver). A subagent whose state
cannot be read gets no file preview rather than a wrong one.

Bounded: each preview within `timeout_s` (a hook that overruns, or fails, is said on the card;
the approval never waits for it) and `max_chars` of text (cut, and said). A synchronous hook and
the diffing run in a small thread pool of Signoff's own, so a hung hook cannot take the threads
tools run in; Python cannot stop such a thread, only leave it behind (it ends when the hook
returns). Hooks should read, never change anything: a pause announced again runs them again.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog

from agent_runner.graphs import load_target
from core.config import Settings
from core.graphs import GraphLoadError, preview_specs
from core.logs import get_logger
from core.outages import is_outage
from core.policy_file import seconds
from core.previews import (
    LARGEST,
    MAX_CHARS,
    Binary,
    FileCall,
    Preview,
    failed,
    file_call,
    file_preview,
    file_text,
    from_hook,
)
from core.protocol import ActionReview, PendingRequest

log = get_logger("previews")

Hook = Callable[[dict[str, Any], Mapping[str, Any]], Any]  # (the call, the state) -> a preview


@dataclass
class Asker:
    """The agent that asked for a pause: its state's values and its tools."""

    values: Mapping[str, Any] = field(default_factory=dict)
    tools: Mapping[str, Any] = field(default_factory=dict)
    readable: bool = True  # False: a subagent whose state could not be read


class Previewer:
    """Makes the previews of a graph's pauses: hooks by tool name, file tools by Signoff."""

    def __init__(
        self,
        hooks: Mapping[str, Hook] | None = None,
        timeout_s: float = 5.0,
        max_chars: int = MAX_CHARS,
        names: Mapping[str, str] | None = None,
    ):
        self.hooks = dict(hooks or {})
        self.names = dict(names or {})  # tool -> the hook's `module:function`, as the card names it
        self.timeout_s = timeout_s
        self.max_chars = max_chars
        self.pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="signoff-preview")

    @classmethod
    def from_settings(cls, settings: Settings) -> Previewer:
        """The hooks `SIGNOFF_PREVIEWS` and langgraph.json name, imported now: a hook that
        cannot be imported (or is not callable) stops the runner with one line saying so."""
        specs = preview_specs(settings)
        hooks = {}
        for tool, spec in specs.items():
            try:
                hook = load_target(spec)
            except GraphLoadError as exc:
                raise GraphLoadError(f"the preview hook of {tool!r}: {exc}") from None
            if not callable(hook):
                raise GraphLoadError(f"the preview hook of {tool!r}, {spec!r}, is not a function")
            hooks[tool] = hook
        names = {tool: spec.rpartition("/")[2] for tool, spec in specs.items()}
        return cls(hooks, seconds(settings.preview_timeout) or 5, settings.preview_max_chars, names)

    async def previewed(
        self, graph: Any, tools: Mapping[str, Any], thread_id: str, requests: list[PendingRequest]
    ) -> list[PendingRequest]:
        """`requests` with a preview on each action that gets one (the others as they were)."""
        if not any(self._wanted(a) for r in requests for a in r.actions):
            return requests
        try:
            state = await graph.aget_state({"configurable": {"thread_id": thread_id}}, subgraphs=True)
        except Exception as exc:
            if is_outage(exc):
                raise
            log.warning("preview_state_unread", error=repr(exc))
            return requests
        done = []
        for request in requests:
            if not any(self._wanted(a) for a in request.actions):
                done.append(request)
                continue
            asker = await self._asker(graph, tools, state, thread_id, request.interrupt_id)
            made = await asyncio.gather(*(self._preview(asker, action) for action in request.actions))
            actions = tuple(
                a.model_copy(update={"preview": p}) if p is not None else a
                for a, p in zip(request.actions, made, strict=True)
            )
            done.append(request.model_copy(update={"actions": actions}))
        return done

    def _wanted(self, action: ActionReview) -> bool:
        return action.name in self.hooks or file_call(action.name, action.args) is not None

    async def _preview(self, asker: Asker, action: ActionReview) -> Preview | None:
        """The action's preview, within the time limit; a failure is the preview's, never the pause's."""
        hook = self.hooks.get(action.name)
        source = self.names.get(action.name, "file")
        with structlog.contextvars.bound_contextvars(tool=action.name, preview=source):
            try:
                if hook is not None:
                    return await asyncio.wait_for(self._hooked(hook, asker, action, source), self.timeout_s)
                call = file_call(action.name, action.args)
                if call is None or not asker.readable:
                    return None
                return await asyncio.wait_for(self._file(asker, call, action), self.timeout_s)
            except TimeoutError:
                log.warning("preview_timed_out", seconds=self.timeout_s)
                took = f"{self.timeout_s:g}"
                return failed(source, f"no preview: it took longer than {took} s (the approval did not wait)")
            except Exception as exc:
                if is_outage(exc):
                    raise
                ref = uuid.uuid4().hex[:8]
                log.exception("preview_failed", ref=ref)
                return failed(
                    source, f"no preview: it failed ({type(exc).__name__}; details in the logs, ref {ref})"
                )

    async def _hooked(self, hook: Hook, asker: Asker, action: ActionReview, source: str) -> Preview | None:
        call = {"name": action.name, "args": dict(action.args), "id": action.tool_call_id}
        state = dict(asker.values)
        if inspect.iscoroutinefunction(hook):
            value = await hook(call, state)
        else:
            value = await asyncio.get_running_loop().run_in_executor(
                self.pool, functools.partial(hook, call, state)
            )
            if inspect.isawaitable(value):
                value = await value
        return await self._off_loop(from_hook, value, source, self.max_chars)

    async def _file(self, asker: Asker, call: FileCall, action: ActionReview) -> Preview | None:
        before = await file_before(asker, call, action.name)
        if before is UNKNOWN:
            return None
        return await self._off_loop(file_preview, call, action.args, before, self.max_chars)

    async def _off_loop(self, work: Callable[..., Any], *args: Any) -> Any:
        """CPU work (a diff of a large file) in the pool: the runner's loop keeps serving."""
        return await asyncio.get_running_loop().run_in_executor(self.pool, functools.partial(work, *args))

    async def _asker(
        self, graph: Any, tools: Mapping[str, Any], state: Any, thread_id: str, interrupt_id: str
    ) -> Asker:
        """The agent that raised `interrupt_id`: the graph, or the deepagents subagent whose `task`
        call it came through (its own state and tools)."""
        task = next((t for t in state.tasks if any(i.id == interrupt_id for i in t.interrupts)), None)
        subagent = _subagent_of(task, state.values) if task is not None else None
        if task is None or subagent is None:
            return Asker(state.values or {}, tools)
        subgraph = (_closure(_function(tools.get("task"))).get("subagent_graphs") or {}).get(subagent)
        if subgraph is None or getattr(graph, "checkpointer", None) is None:
            return Asker(readable=False)
        try:
            own = subgraph.copy(update={"checkpointer": graph.checkpointer})
            config = {"configurable": {"thread_id": thread_id, "checkpoint_ns": f"{task.name}:{task.id}"}}
            sub_state = await own.aget_state(config)
        except Exception as exc:
            if is_outage(exc):
                raise
            log.warning("preview_subagent_unread", subagent=subagent, error=repr(exc))
            return Asker(readable=False)
        from agent_runner.runner import tools_of  # (runner imports this module)

        return Asker(sub_state.values or {}, tools_of(subgraph))


UNKNOWN = object()  # a file tool Signoff cannot read the files of (say, a user's own write_file)


async def file_before(asker: Asker, call: FileCall, tool_name: str) -> Any:
    """The file `call` changes as its tool will read it: its text, None (no such file), a
    `Binary`, or `UNKNOWN` when Signoff does not know where the tool keeps files."""
    owner = _closure(_function(asker.tools.get(tool_name))).get("self")
    if call.state_key != "files":  # Anthropic's text editor or memory tool
        key = getattr(owner, "state_key", None)
        if isinstance(key, str):  # the state variant
            return _state_text(asker.values, key, call.path)
        resolve = getattr(owner, "_validate_and_resolve_path", None)
        if isinstance(getattr(owner, "root_path", None), Path) and callable(resolve):  # a folder
            return await asyncio.to_thread(_disk_text, resolve, call.path)
        return UNKNOWN
    backend = getattr(owner, "backend", None)
    if backend is None:
        return UNKNOWN
    return await _backend_text(backend, call.path, asker.values)


async def _backend_text(backend: Any, path: str, values: Mapping[str, Any], depth: int = 0) -> Any:
    if type(backend).__name__ == "StateBackend":  # its files are the state's `files`
        return _state_text(values, "files", path)
    routes = getattr(backend, "sorted_routes", None)
    if isinstance(routes, list) and hasattr(backend, "default") and depth < 4:  # CompositeBackend
        for prefix, routed in routes:
            if path == prefix.rstrip("/") or path.startswith(prefix):
                inner = "/" + path[len(prefix) :].lstrip("/")
                return await _backend_text(routed, inner, values, depth + 1)
        return await _backend_text(backend.default, path, values, depth + 1)
    download = getattr(backend, "adownload_files", None)
    if download is None:
        return UNKNOWN
    (response,) = await download([path])
    if getattr(response, "error", None) == "file_not_found" or (
        getattr(response, "error", None) is None and getattr(response, "content", None) is None
    ):
        return None
    if getattr(response, "error", None):  # not readable by this backend: say nothing wrong
        return UNKNOWN
    try:
        return bytes(response.content).decode("utf-8")
    except UnicodeDecodeError:
        return Binary()


def _disk_text(resolve: Callable[[str], Path], path: str) -> Any:
    """A file of Anthropic's filesystem tools, read as the tool will (`resolve`: its own check
    of the path, which refuses what the tool would; then no preview, the tool says why)."""
    try:
        full = resolve(path)
        if not full.is_file():
            return None if not full.exists() else UNKNOWN
        if full.stat().st_size > 4 * LARGEST:  # (not read to say it is too large)
            return UNKNOWN
        return full.read_bytes().decode("utf-8")
    except UnicodeDecodeError:
        return Binary()
    except (ValueError, OSError):
        return UNKNOWN


def _state_text(values: Mapping[str, Any], key: str, path: str) -> Any:
    files = values.get(key) if isinstance(values, Mapping) else None
    return file_text(files.get(path)) if isinstance(files, Mapping) else None


def _function(tool: Any) -> Any:
    return getattr(tool, "coroutine", None) or getattr(tool, "func", None)


def _closure(function: Any) -> dict[str, Any]:
    """The variables a tool's function closes over (deepagents' tools: their middleware)."""
    try:
        return dict(inspect.getclosurevars(function).nonlocals) if callable(function) else {}
    except (TypeError, ValueError):
        return {}


def _subagent_of(task: Any, values: Any) -> str | None:
    """The subagent a deepagents `task` call runs, for the tools node's push task `task`."""
    path: Any = getattr(task, "path", ())
    if getattr(task, "name", "") != "tools" or len(path) < 2 or path[0] != "__pregel_push":
        return None
    messages = values.get("messages", []) if isinstance(values, Mapping) else []
    calls: list[Any] = next((m.tool_calls for m in reversed(messages) if getattr(m, "tool_calls", None)), [])
    index = path[1]
    if isinstance(index, int) and index < len(calls) and calls[index].get("name") == "task":
        return str((calls[index].get("args") or {}).get("subagent_type") or "") or None
    return None
