"""Loading the user's graphs (named in `core.graphs`) and attaching the runner's checkpointer."""

from __future__ import annotations

import importlib
import importlib.util
import inspect
import os
import sys
from pathlib import Path
from typing import Any

from core.graphs import GraphLoadError


def load_target(spec: str) -> Any:
    location, _, attr = spec.rpartition(":")
    if not location or not attr:
        raise GraphLoadError(f"a graph is named module:attr or ./file.py:attr, got {spec!r}")
    try:
        if location.endswith(".py"):
            module_spec = importlib.util.spec_from_file_location(Path(location).stem, location)
            if module_spec is None or module_spec.loader is None:
                raise ImportError(f"no such file {location}")
            module = importlib.util.module_from_spec(module_spec)
            module_spec.loader.exec_module(module)
        else:
            _search_the_current_folder()
            module = importlib.import_module(location)
    except (ImportError, FileNotFoundError) as exc:
        raise GraphLoadError(f"cannot import {location!r} for graph {spec!r}: {exc}") from exc
    try:
        return getattr(module, attr)
    except AttributeError as exc:
        raise GraphLoadError(f"{location!r} has no {attr!r}") from exc


def _search_the_current_folder() -> None:
    """`myagent:build` run next to myagent.py imports it, as `uvicorn` and `langgraph dev` do; the
    current folder comes after the installed packages, so a local file never hides one of them."""
    here = os.getcwd()
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


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
