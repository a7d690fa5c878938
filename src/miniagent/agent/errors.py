"""How a run ends, as a small exception hierarchy.

Two families, never mixed up:

* ``Recoverable`` errors go back to the model as an observation (a tool said
  no, a tool took too long); the loop carries on.
* ``Terminal`` errors end the run; each carries the ``stop_reason`` the user
  sees.  Handlers catch the narrowest class they mean, so a cap hit is never
  reported as a server failure, and a model failure never as a tool failure.
"""

from __future__ import annotations


def stop_reasons() -> set[str]:
    """Every stop reason a run can end with: "answered", and each Terminal error's own."""
    found, todo = {"answered"}, [Terminal]
    while todo:
        cls = todo.pop()
        found.add(cls.stop_reason)
        todo += cls.__subclasses__()
    return found - {Terminal.stop_reason}  # a class that names none of its own (CapHit) inherits Terminal's


class Recoverable(Exception):
    """The model can do something about this: show it and continue."""


class ToolError(Recoverable):
    """The tool answered with an error (bad arguments, unknown verb...)."""


class ToolTimeout(Recoverable):
    """The tool did not answer within its per-call timeout."""


class Terminal(Exception):
    """The run is over. ``stop_reason`` names why, for the outcome and trace."""

    stop_reason = "terminal"


class CapHit(Terminal):
    """A loop limit was reached: the run ends with a graceful fallback."""


class TurnCapHit(CapHit):
    stop_reason = "max_turns"


class ToolCallCapHit(CapHit):
    stop_reason = "max_tool_calls"


class CallBudgetExhausted(CapHit):
    stop_reason = "call_budget"


class WallClockExceeded(CapHit):
    stop_reason = "wall_clock"


class AutoContinueLimit(CapHit):
    stop_reason = "auto_continue_limit"


class TokenBudgetSpent(CapHit):
    """The run used up its prompt + completion token budget (max_run_tokens)."""

    stop_reason = "token_budget"


class FormatErrorLimit(CapHit):
    """The model's actions failed to parse max_format_errors times in a row."""

    stop_reason = "format_errors"


class StuckLoop(CapHit):
    """The run repeats itself: the same call and result again and again, or two calls taking turns."""

    stop_reason = "stuck"


class OutOfGrammar(Terminal):
    """The question asks for what the grammar does not have: a tense it lacks, a word that is no verb it knows.
    ``reason`` says so in the words the user reads (the tool's own, for a verb)."""

    stop_reason = "out_of_grammar"

    def __init__(self, kind: str, word: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.word, self.reason = kind, word, reason  # kind: "tense" or "verb"


class InvalidInput(Terminal):
    """The question is empty or too long to be a question: refused before any model call."""

    stop_reason = "invalid_input"


class ModelFailed(Terminal):
    """The model did not give a usable reply: its server is down, answered an error, or
    sent something that is not a reply. Not the tools, not a cap: the model's side failed."""

    stop_reason = "model_failed"


class ModelTimeout(Exception):
    """The model was still working when the time it was given ran out.

    The loop gives each model call what is left of the run's wall clock, so the
    loop turns this into ``WallClockExceeded``."""


class ContextFull(Terminal):
    """The prompt no longer fits in the model's context window."""

    stop_reason = "context_full"


class Cancelled(Terminal):
    stop_reason = "cancelled"


class ServerFailed(Terminal):
    """The MCP server died or the connection broke: not a cap, a real failure."""

    stop_reason = "server_failed"
