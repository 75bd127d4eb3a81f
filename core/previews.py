"""What a paused call will do, for people to decide on: a preview. Pure.

A card shows the arguments an agent passed; for a file tool that is the wrong thing to read (a
40-line `edit_file` shows `old_string` and `new_string`, a `write_file` that overwrites looks
like one that creates). The runner reads the file as the agent will see it and this module
makes the change a unified diff (`file_preview`): an edit as the lines it changes with a
little context, an overwrite as its diff, a new file as "creates /path (N lines)" with its
lines. An edit that will fail (its text is not in the file, or matches several times without
`replace_all`) says so before anyone approves.

The tools read here are deepagents' `write_file` and `edit_file` (its `files` state for the
state backend, or whatever its backend reads: the runner hands the text over), and the
Anthropic text editor and memory tools of `langchain_anthropic` (`str_replace_based_edit_tool`,
`memory`: create, str_replace, insert; in the state, or in a folder on disk). Any other tool may get a preview from a
hook the graph names (`agent_runner.previews`); what a hook returns is made a `Preview` here
(`from_hook`), bounded in size.

A preview is made from the call's real arguments, so it may hold a secret they carry; the
approval record keeps it masked as the arguments are (`core.records.concealed`). It is stored
with the approval and audited by its hash (`sha256`: over the preview's fields as canonical
JSON, the hash left out, taken after the masking), so an audit shows what the approver was shown.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import posixpath
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

PreviewKind = Literal["text", "markdown", "diff"]
KINDS: tuple[PreviewKind, ...] = ("text", "markdown", "diff")
MAX_CHARS = 60_000  # a preview's text kept with the approval (SIGNOFF_PREVIEW_MAX_CHARS)
CONTEXT = 3  # unchanged lines shown around each change
LARGEST = 1_000_000  # characters of a file diffed: a larger one is described, not diffed
ABSENT = object()  # an argument an edit added (no value before) or removed (none after)


class Preview(BaseModel):
    """What a call will do, as the approver reads it: `text` of `kind` (a unified diff, plain
    text or Markdown), a one-line `summary`, a `warning` (the call will fail, the hook failed
    or timed out), whether `text` was cut at the size limit, and which hook made it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    kind: PreviewKind = "text"
    text: str = ""
    summary: str = ""
    warning: str = ""
    truncated: bool = False
    source: str = ""  # "file" (Signoff's own) or the hook's `module:function`
    sha256: str = ""

    @classmethod
    def of(
        cls,
        kind: PreviewKind,
        text: str,
        summary: str = "",
        warning: str = "",
        source: str = "file",
        limit: int = MAX_CHARS,
    ) -> Preview:
        """A preview with its text cut to `limit` characters (at a line's end) and its hash."""
        truncated = len(text) > limit
        if truncated:
            head = text[:limit]
            text = head[: head.rfind("\n")] if "\n" in head else head
        fields = {
            "kind": kind,
            "text": text,
            "summary": summary,
            "warning": warning,
            "truncated": truncated,
            "source": source,
        }
        return cls(**fields, sha256=digest(fields))  # type: ignore[arg-type]

    @property
    def lines(self) -> list[str]:
        return self.text.split("\n") if self.text else []

    def masked(self, mask: Callable[[str], str]) -> Preview:
        """The preview with `mask` (`core.secrets.mask_text`) applied to each of its texts, and
        hashed again: the hash is of what the approver is shown."""
        fields = self.model_dump()
        fields.update({k: mask(fields[k]) for k in ("text", "summary", "warning")})
        return Preview(**{**fields, "sha256": digest(fields)})


def digest(fields: Mapping[str, Any]) -> str:
    """SHA-256 of a preview's fields (all but the hash), as canonical JSON."""
    shown = {k: v for k, v in fields.items() if k != "sha256"}
    encoded = json.dumps(shown, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(encoded.encode()).hexdigest()


def failed(source: str, why: str) -> Preview:
    """A hook's preview that could not be made: the card says so, the approval goes on."""
    return Preview.of("text", "", warning=why, source=source)


# Files ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileCall:
    """A call that changes one file: which file, and where a state backend keeps it."""

    tool: str
    path: str
    state_key: str  # "files" (deepagents), "text_editor_files" / "memory_files" (Anthropic's tools)


class Binary:
    """A file that is not text (deepagents keeps it base64): not diffed."""


def file_call(name: str, args: Mapping[str, Any]) -> FileCall | None:
    """The file a call of `name` with `args` changes, if it is a file tool this module reads."""
    if name in ("write_file", "edit_file"):
        path = args.get("file_path")
        wanted = ("content",) if name == "write_file" else ("old_string", "new_string")
        if isinstance(path, str) and all(isinstance(args.get(k), str) for k in wanted):
            normal = normal_path(path)
            return FileCall(name, normal, "files") if normal else None
    elif name in EDITORS and args.get("command") in ("create", "str_replace", "insert"):
        path = args.get("path")
        if isinstance(path, str) and (normal := normal_path(path)):
            return FileCall(name, normal, EDITORS[name])
    return None


# Anthropic's text editor and memory tools (`langchain_anthropic.middleware`): the state key
# their state variants keep files in (their filesystem variants read a folder: the runner's job)
EDITORS = {"str_replace_based_edit_tool": "text_editor_files", "memory": "memory_files"}


def normal_path(path: str) -> str | None:
    """The path as deepagents keeps it ("/a/b.md" for "a//b.md"); None for one it refuses."""
    path = path.replace("\\", "/")
    if path.startswith("~") or ".." in path.split("/") or (len(path) > 1 and path[1] == ":"):
        return None
    normal = posixpath.normpath("/" + path.lstrip("/"))
    return "/" if normal == "//" else normal


def file_text(data: Any) -> str | Binary | None:
    """The text of a file as a state backend keeps it (`{"content": str | [lines], ...}`);
    None when there is none, `Binary` for a base64 one."""
    if not isinstance(data, Mapping):
        return None
    if data.get("encoding") == "base64":
        return Binary()
    content = data.get("content")
    if isinstance(content, list) and all(isinstance(line, str) for line in content):
        return "\n".join(content)
    return content if isinstance(content, str) else None


def state_file(values: Any, call: FileCall) -> str | Binary | None:
    """The file `call` changes, from a graph state's values (a state backend's files)."""
    files = values.get(call.state_key) if isinstance(values, Mapping) else None
    return file_text(files.get(call.path)) if isinstance(files, Mapping) else None


def file_preview(
    call: FileCall, args: Mapping[str, Any], before: str | Binary | None, limit: int = MAX_CHARS
) -> Preview:
    """What `call` does to the file as it is now (`before`: its text, None when it does not
    exist): the diff, or why the call will fail."""
    path = call.path
    if isinstance(before, Binary):
        return Preview.of("text", "", summary=f"changes {path} (a binary file: no diff)", limit=limit)
    if call.tool == "write_file" or args.get("command") == "create":
        content = str(args.get("content") if call.tool == "write_file" else args.get("file_text") or "")
        return _written(path, before, content, limit)
    if before is None:
        return _asked(call, args, f"this edit will fail: {path} does not exist", limit)
    if call.tool == "edit_file":
        old, new = str(args["old_string"]), str(args["new_string"])
        after, problem = replaced(before, old, new, bool(args.get("replace_all")))
        if after is None:
            return _asked(call, args, f"this edit will fail: {problem}", limit)
        count = before.count(old)
        return _changed(path, before, after, "edits", limit, f", in {count} places" if count > 1 else "")
    if args.get("command") == "str_replace":
        old, new = str(args.get("old_str") or ""), str(args.get("new_str") or "")
        if not old or old not in before:
            return _asked(call, args, "this edit will fail: the text is not in the file", limit)
        return _changed(path, before, before.replace(old, new, 1), "edits", limit)
    line, new = args.get("insert_line"), str(args.get("new_str") or "")
    lines = before.split("\n")
    if not isinstance(line, int) or isinstance(line, bool) or not 0 <= line <= len(lines):
        return _asked(call, args, f"this edit will fail: there is no line {line} to insert after", limit)
    after = "\n".join(lines[:line] + new.split("\n") + lines[line:])
    return _changed(path, before, after, "inserts into", limit)


def replaced(content: str, old: str, new: str, replace_all: bool) -> tuple[str | None, str]:
    """deepagents' `edit_file` on `content`: (the new text, "") or (None, why it fails)."""
    if not old:
        return None, "the text to replace is empty"
    count = content.count(old)
    if count == 0:
        return None, "the text is not in the file"
    if count > 1 and not replace_all:
        return None, f"the text matches {count} times (and replace_all is not set)"
    return content.replace(old, new), ""


def _written(path: str, before: str | None, content: str, limit: int) -> Preview:
    lines = text_lines(content)
    if before is None:
        text = "\n".join(f"+{line}" for line in lines)
        return Preview.of("diff", text, summary=f"creates {path} ({_count(len(lines), 'line')})", limit=limit)
    if before == content:
        return Preview.of("diff", "", summary=f"writes {path} as it is already: no change", limit=limit)
    return _changed(path, before, content, "overwrites", limit)


def _changed(path: str, before: str, after: str, verb: str, limit: int, more: str = "") -> Preview:
    if max(len(before), len(after)) > LARGEST:
        size = f"{_count(after.count(chr(10)) + 1, 'line')}, {len(after):,} characters"
        return Preview.of("text", "", summary=f"{verb} {path} ({size}: too large to diff here)", limit=limit)
    text = unified(before, after)
    added = sum(1 for line in text.split("\n") if line.startswith("+"))
    removed = sum(1 for line in text.split("\n") if line.startswith("-"))
    summary = f"{verb} {path}: +{added} −{removed} {'line' if added + removed == 1 else 'lines'}{more}"
    return Preview.of("diff", text, summary=summary, limit=limit)


def _asked(call: FileCall, args: Mapping[str, Any], warning: str, limit: int) -> Preview:
    """An edit that will fail: the replacement it asks for, as a diff of the two texts."""
    if call.tool == "edit_file":
        old, new = str(args.get("old_string") or ""), str(args.get("new_string") or "")
    elif args.get("command") == "str_replace":
        old, new = str(args.get("old_str") or ""), str(args.get("new_str") or "")
    else:
        old, new = "", str(args.get("new_str") or "")
    text = "\n".join(
        [*(f"-{line}" for line in old.split("\n") if old), *(f"+{line}" for line in new.split("\n"))]
    )
    return Preview.of("diff", text, summary=f"edits {call.path} (asked)", warning=warning, limit=limit)


def unified(before: str, after: str, context: int = CONTEXT) -> str:
    """A unified diff of two texts: hunks (`@@ -a,b +c,d @@`) of `-`, `+` and ` ` lines, no
    file header (the summary names the file)."""
    lines = difflib.unified_diff(text_lines(before), text_lines(after), lineterm="", n=context)
    return "\n".join(line for n, line in enumerate(lines) if n >= 2)


def text_lines(text: str) -> list[str]:
    """A text's lines, as an editor counts them: a last newline ends the last line, it does not
    start another. Split at "\\n" only (a U+2028 in a line stays in it, to be shown)."""
    lines = text.split("\n")
    return lines[:-1] if lines and lines[-1] == "" else lines


def _count(n: int, word: str) -> str:
    return f"{n:,} {word}" + ("" if n == 1 else "s")


# Hooks ---------------------------------------------------------------------------------


def from_hook(value: Any, source: str, limit: int = MAX_CHARS) -> Preview | None:
    """What a preview hook returned, made a `Preview`: a string is plain text; a mapping (or a
    `Preview`) names its `text` and may name its `kind` (text, markdown, diff), a `summary`
    and a `warning`; None: no preview for this call."""
    if value is None:
        return None
    if isinstance(value, str):
        return Preview.of("text", value, source=source, limit=limit)
    if isinstance(value, Preview):
        value = value.model_dump()
    if not isinstance(value, Mapping) or not isinstance(value.get("text", ""), str):
        return failed(source, f"the preview hook returned {type(value).__name__}, not text")
    kind = value.get("kind", "text")
    if kind not in KINDS:
        return failed(source, f"the preview hook returned kind {str(kind)[:40]!r} (text, markdown or diff)")
    return Preview.of(
        kind,
        value.get("text", ""),
        summary=str(value.get("summary") or "")[:300],
        warning=str(value.get("warning") or "")[:300],
        source=source,
        limit=limit,
    )


# Edits ---------------------------------------------------------------------------------


def argument_diff(before: Any, after: Any, context: int = 2) -> list[str]:
    """One argument's change: `-` and `+` lines (a text of several lines as a unified diff, with
    `context` lines around each change); an argument added or removed has one side only."""
    if isinstance(before, str) and isinstance(after, str) and ("\n" in before or "\n" in after):
        return unified(before, after, context).split("\n") if before != after else []
    lines = []
    if before is not ABSENT:
        lines += [f"-{line}" for line in _shown(before).split("\n")]
    if after is not ABSENT:
        lines += [f"+{line}" for line in _shown(after).split("\n")]
    return lines


def _shown(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
