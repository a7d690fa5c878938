"""What a tool call may carry: arguments are checked before anything is sent to the MCP server.

They must be JSON values whose text is valid Unicode.  An unpaired UTF-16
surrogate (``"go\\ud800"``) passes Python's ``str`` but cannot be encoded as
UTF-8; sent as is, it makes the task that writes to the server's stdin fail,
which ends the whole session.  Refused up front, it is a ``ToolError`` (the
model can correct it) and the session is untouched.
"""

from __future__ import annotations

import json
from typing import Any

from ..agent.errors import ToolError


def _unsendable(value: Any) -> str | None:
    """Why ``value`` cannot go to the server as JSON text, or None if it can."""
    try:
        json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        bad = exc.object[exc.start:exc.end]
        return f"it holds an unpaired UTF-16 surrogate ({bad.encode('unicode_escape').decode()}), which is not text"
    except (TypeError, ValueError) as exc:
        return f"it is not a JSON value ({exc})"
    return None


def check_arguments(tool: Any, args: Any) -> None:
    """Refuse, before sending, a call the connection could not carry: a ToolError, nothing sent."""
    if not isinstance(tool, str) or _unsendable(tool):
        raise ToolError(f"the tool name must be plain text, not {type(tool).__name__} {_short_repr(tool)}")
    if not isinstance(args, dict):
        raise ToolError(f"{tool}: the arguments must be an object (a dict), not {type(args).__name__}")
    for key, value in args.items():
        if not isinstance(key, str) or _unsendable(key):
            raise ToolError(f"{tool}: argument name {_short_repr(key)} is not plain text; nothing was sent")
        why = _unsendable(value)
        if why:
            raise ToolError(f"{tool}: argument {key!r} cannot be sent: {why}; nothing was sent")


def _short_repr(value: Any, limit: int = 40) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."
