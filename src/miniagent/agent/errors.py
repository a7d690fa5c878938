"""How a run ends, as a small exception hierarchy.

Two families, never mixed up:

* ``Recoverable`` errors go back to the model as an observation (a tool said
  no, a tool took too long); the loop carries on.
* ``Terminal`` errors end the run; each carries the ``stop_reason`` the user
  sees.  Handlers catch the narrowest class they mean, so a cap hit is never
  reported as a server failure, and a model failure never as a tool failure.
"""

from __future__ import annotations


def cap_reasons() -> set[str]:
    """The stop reasons of the loop's own limits (every CapHit): what the run's log line calls a cap hit."""
    return {cls.stop_reason for cls in terminal_classes(CapHit)}


def terminal_classes(root: type | None = None) -> list[type]:
    """``root`` (default: Terminal) and every class below it."""
    found, todo = [], [root or Terminal]
    while todo:
        cls = todo.pop()
        found.append(cls)
        todo += cls.__subclasses__()
    return found


def stop_reasons() -> set[str]:
    """Every stop reason a run can end with: "answered", and each Terminal error's own."""
    return {"answered"} | {cls.stop_reason for cls in terminal_classes()} - {Terminal.stop_reason}  # a class that names none of its own (CapHit) inherits Terminal's


class Recoverable(Exception):
    """The model can do something about this: show it and continue."""


class ToolError(Recoverable):
    """The tool answered with an error (bad arguments, unknown verb...). ``refusal``: where the tool refused a
    word as no verb it knows, that refusal as data (tools/conjugation.py, REFUSALS), else None."""

    def __init__(self, message: str, refusal: dict | None = None) -> None:
        super().__init__(message)
        self.refusal = refusal


class ToolTimeout(Recoverable):
    """The tool did not answer within its per-call timeout."""


class Terminal(Exception):
    """The run is over. ``stop_reason`` names why, for the outcome and trace; ``says`` why, in the user's words."""

    stop_reason = "terminal"
    says = ""


class CapHit(Terminal):
    """A loop limit was reached: the run ends with a graceful fallback."""


class TurnCapHit(CapHit):
    stop_reason = "max_turns"
    says = "it took more turns than allowed"


class ToolCallCapHit(CapHit):
    stop_reason = "max_tool_calls"
    says = "it needed more tool calls than allowed"


class CallBudgetExhausted(CapHit):
    stop_reason = "call_budget"
    says = "it used up the tool-call budget of its plan"


class WallClockExceeded(CapHit):
    stop_reason = "wall_clock"
    says = "it ran out of time"


class AutoContinueLimit(CapHit):
    stop_reason = "auto_continue_limit"
    says = "the model's reply kept getting cut off"


class TokenBudgetSpent(CapHit):
    """The run used up its prompt + completion token budget (max_run_tokens)."""

    stop_reason = "token_budget"
    says = "it used up the run's token budget"


class FormatErrorLimit(CapHit):
    """The model's actions failed to parse max_format_errors times in a row."""

    stop_reason = "format_errors"
    says = "the model kept replying with actions that are not valid"


class StuckLoop(CapHit):
    """The run repeats itself: the same call and result again and again, or two calls taking turns."""

    stop_reason = "stuck"
    says = "it kept repeating the same steps"


class OutOfGrammar(Terminal):
    """The question asks for what the grammar does not have: a tense it lacks, a word that is no verb it knows.
    ``reason`` says so in the words the user reads (the tool's own, for a verb)."""

    stop_reason = "out_of_grammar"
    # The kinds of no, each saying whether it names a word: a tense, a verb; nothing to conjugate, no tense named.
    KINDS = {"tense": True, "verb": True, "nothing": False, "no_tense": False}

    def __init__(self, kind: str, word: str, reason: str) -> None:
        super().__init__(reason)
        self.kind, self.word, self.reason = kind, word, reason  # kind: one of KINDS


class InvalidInput(Terminal):
    """The question is empty or too long to be a question: refused before any model call."""

    stop_reason = "invalid_input"
    says = "the question could not be used"


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
    says = "the conversation no longer fits in the model's context window"


class Cancelled(Terminal):
    stop_reason = "cancelled"
    says = "the run was cancelled"


class ServerFailed(Terminal):
    """The MCP server died or the connection broke: not a cap, a real failure."""

    stop_reason = "server_failed"
