"""Finding and loading the user's graphs.

`SIGNOFF_GRAPH=module:attr` names a compiled graph without a checkpointer (the
runner attaches its own) or a factory returning one; a factory that takes a
`checkpointer` argument gets it directly.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

DEMO_GRAPH = "agent_runner.demo_agent:build_demo_agent"


class GraphLoadError(RuntimeError):
    pass


def load_target(spec: str) -> Any:
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise GraphLoadError(f"a graph is named module:attr, got {spec!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise GraphLoadError(f"cannot import {module_name!r} for graph {spec!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise GraphLoadError(f"{module_name!r} has no {attr!r}") from exc


def build_graph(spec: str, checkpointer: Any) -> Any:
    """The compiled graph named by `spec`, using `checkpointer`."""
    target = load_target(spec)
    if callable(target) and not hasattr(target, "invoke"):
        takes_saver = "checkpointer" in inspect.signature(target).parameters
        target = target(checkpointer=checkpointer) if takes_saver else target()
    if not hasattr(target, "copy") or not hasattr(target, "ainvoke"):
        raise GraphLoadError(f"{spec!r} is not a compiled LangGraph graph")
    if getattr(target, "checkpointer", None) is checkpointer:
        return target
    return target.copy(update={"checkpointer": checkpointer})
