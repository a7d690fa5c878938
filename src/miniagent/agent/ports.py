"""The agent's ports: what it needs from a model and from its tools.

The loop knows nothing of llama.cpp or MCP.  A model backend (``models/``)
turns the scratchpad into the next action's text; the tools (``tools/``)
run one call and return its result or raise a ``Recoverable`` error.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # pragma: no cover
    from .grounding import Grounds


@dataclass(frozen=True)
class Entry:
    """One scratchpad line: the user's question, an action, or an observation."""

    role: str  # "question" | "action" | "observation"
    text: str


@dataclass
class ModelReply:
    text: str  # the action's JSON text (or the next piece of it, when continuing)
    finish_reason: str  # "stop" or "length"
    prompt_tokens: int  # prompt tokens evaluated for this reply (new ones only, with KV reuse)
    completion_tokens: int  # tokens of the reply's own text
    latency_s: float
    # Tokens the model evaluated to choose between options (scored decoding); 0 when it does not score.
    scoring_tokens: int = 0


class Backend(Protocol):
    name: str

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False,
                    grounds: Grounds | None = None) -> ModelReply:
        """Return the next action, following ``schema_for_turn(first_turn, may_answer, final, grounds)``.

        ``partial`` is the truncated text of this turn to continue from.
        ``final`` is the round after a limit: only an answer may follow.
        ``grounds``: the arguments (and the answer) the user's words decide; a decoder offers only those.
        ``timeout_s`` is the time this reply may take (what is left of the run):
        past it the backend stops working and raises ``ModelTimeout``.
        A reply the backend cannot use raises ``ModelFailed``."""
        ...

    def close(self) -> None: ...


class Tools(Protocol):
    def call(self, tool: str, args: dict, timeout: float | None = None) -> str:
        """The tool's result; ``ToolError``/``ToolTimeout`` (recoverable) or ``ServerFailed``."""
        ...
