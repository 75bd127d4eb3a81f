"""The user's graphs by name (loading them is `agent_runner.graphs`).

Graphs come from the project's `langgraph.json` (the file LangGraph users
already have: `"graphs": {"name": "./path.py:attr"}`, with its `env` and
`dependencies` honoured) and/or `SIGNOFF_GRAPH=module:attr`. Each names a
compiled graph without a checkpointer (the runner attaches its own) or a
factory returning one; a factory that takes a `checkpointer` argument gets it.

The same file may name preview hooks (`core.previews`) in a section of Signoff's own,
`"signoff": {"previews": {"tool": "./previews.py:function"}}`; `SIGNOFF_PREVIEWS` adds to
them (and wins for a tool both name).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from core.config import Settings, preview_hooks


class GraphLoadError(RuntimeError):
    pass


def graph_specs(settings: Settings) -> dict[str, str]:
    """Graph name -> `module:attr` (or `/path/file.py:attr`), in configuration order."""
    specs: dict[str, str] = {}
    config = Path(settings.graphs_file)
    if config.is_file():
        specs.update(read_langgraph_json(config))
    named = {_same_graph(spec) for spec in specs.values()}
    if settings.graph and _same_graph(settings.graph) not in named:  # (named in the file: its name)
        specs.setdefault(graph_name(settings.graph), settings.graph)
    return specs  # none configured: the runner says what to set; the bot only decides approvals


def default_graph(settings: Settings, specs: dict[str, str]) -> str | None:
    """The graph mentions and `/signoff <task>` start: SIGNOFF_DEFAULT_GRAPH, else the first one."""
    if settings.default_graph:
        if settings.agent_server_url and settings.default_graph not in specs:
            return settings.default_graph  # an assistant, known once the server answers
        if not specs:
            raise GraphLoadError(
                f"SIGNOFF_DEFAULT_GRAPH={settings.default_graph!r}, but there are no graphs: "
                "set SIGNOFF_GRAPH or SIGNOFF_GRAPHS_FILE"
            )
        if settings.default_graph not in specs:
            raise GraphLoadError(
                f"SIGNOFF_DEFAULT_GRAPH={settings.default_graph!r} is not one of {sorted(specs)}"
            )
        return settings.default_graph
    return next(iter(specs), None)


def read_langgraph_json(path: Path) -> dict[str, str]:
    """The graphs of a langgraph.json; applies its `env` and `dependencies` to this process."""
    try:
        config = json.loads(path.read_text())
    except ValueError as exc:
        raise GraphLoadError(f"{path} is not valid JSON: {exc}") from exc
    base = path.resolve().parent
    env = config.get("env")
    if isinstance(env, dict):
        for key, value in env.items():
            os.environ.setdefault(key, str(value))
    elif isinstance(env, str) and (base / env).is_file():
        for line in (base / env).read_text().splitlines():
            key, sep, value = line.strip().partition("=")
            if sep and not key.startswith("#"):
                os.environ.setdefault(key.strip(), value.strip().strip('"').strip("'"))
    for dependency in config.get("dependencies", []):
        if dependency.startswith((".", "/")) and str(base / dependency) not in sys.path:
            sys.path.insert(0, str((base / dependency).resolve()))
    return {name: _located(path, str(target)) for name, target in (config.get("graphs") or {}).items()}


def preview_specs(settings: Settings) -> dict[str, str]:
    """Tool name -> `module:function` (or `/path/file.py:function`) of its preview hook."""
    specs: dict[str, str] = {}
    config = Path(settings.graphs_file)
    if config.is_file():
        try:
            section = json.loads(config.read_text()).get("signoff") or {}
        except (ValueError, AttributeError) as exc:
            raise GraphLoadError(f"{config} is not a JSON object: {exc}") from exc
        try:
            found = preview_hooks(section.get("previews") or {} if isinstance(section, dict) else section)
        except ValueError as exc:
            raise GraphLoadError(f'{config}: "signoff.previews": {exc}') from None
        specs.update({tool: _located(config, target) for tool, target in found.items()})
    return {**specs, **settings.previews}


def _located(config: Path, target: str) -> str:
    """A `./file.py:attr` of langgraph.json, made absolute (from the file's folder)."""
    location, _, attr = target.rpartition(":")
    if location.endswith(".py") or "/" in location:
        location = str((config.resolve().parent / location).resolve())
    return f"{location}:{attr}"


# what a factory or a compiled graph is called whatever it builds: no name for people to read
FACTORY_WORDS = frozenset(
    f"{verb}{noun}"
    for verb in ("", "build", "make", "create", "get", "new")
    for noun in ("", "_graph", "_agent", "_app", "graph", "agent", "app", "_workflow", "workflow")
) | {"main", "run"}


def _same_graph(spec: str) -> str:
    """`/here/myagent.py:build` (as langgraph.json's `./myagent.py:build` is read) and
    `myagent:build` run from /here alike: one graph, spelled two ways."""
    module, _, attr = spec.rpartition(":")
    path = Path(module) if module.endswith(".py") else Path(module.replace(".", "/") + ".py")
    return f"{path.resolve()}:{attr}"


def graph_name(spec: str) -> str:
    """A short name for cards: the attribute, minus a `build_` prefix and `_agent` suffix
    (`signoff_demo.agent:build_demo_agent`: demo); when the attribute only says it is a factory
    or a graph (`myagent:build`, `app/agent.py:graph`), the module's name, as its author chose it."""
    module, _, attr = spec.rpartition(":")
    short = attr.removeprefix("build_").removesuffix("_agent") or attr
    if short.lower() not in FACTORY_WORDS - {""}:
        return short
    stem = Path(module).stem if module.endswith(".py") else module.rpartition(".")[2]
    return stem or short
