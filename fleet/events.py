"""Reading the agent's stdout: JSON-lines events, ending in one document.

The stream comes from a host we do not trust, so every line is bounded, must be a JSON
object with a known event type, and the document is validated before anyone uses it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

from fleet.errors import AgentError
from fleet.model.document import AgentDocument, parse_document

MAX_LINE = 32 * 1024 * 1024  # a 256-GPU document with full clock tables stays far below
MAX_PROGRESS = 4096

ProgressHandler = Callable[[dict[str, Any]], None]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a finite number")


def _excerpt(line: str) -> str:
    return repr(line[:80]) + ("..." if len(line) > 80 else "")


def read_events(
    lines: Iterable[str], origin: str, on_progress: ProgressHandler | None = None
) -> AgentDocument:
    """The document from the agent's event lines; AgentError naming `origin` and the line if not."""
    document: AgentDocument | None = None
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if len(line) > MAX_LINE:
            raise AgentError(f"{origin}: agent output line {number} is over {MAX_LINE} bytes")
        try:
            event = json.loads(line, parse_constant=_reject_constant)
        except ValueError as exc:
            raise AgentError(
                f"{origin}: agent output line {number} is not JSON ({exc}): {_excerpt(line)}"
            ) from None
        if not isinstance(event, dict):
            raise AgentError(f"{origin}: agent output line {number} is not a JSON object")
        kind = event.get("event")
        if kind == "progress":
            if on_progress is not None:
                message = str(event.get("message", ""))[:MAX_PROGRESS]
                on_progress({"stage": str(event.get("stage", ""))[:64], "message": message})
        elif kind == "document":
            if document is not None:
                raise AgentError(f"{origin}: agent sent a second document on line {number}")
            document = parse_document(event.get("document"), origin)
        else:
            raise AgentError(
                f"{origin}: agent output line {number} has unknown event {str(kind)[:40]!r}"
            )
    if document is None:
        raise AgentError(f"{origin}: agent ended without sending its document")
    return document
