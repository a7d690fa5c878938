"""The one schema every model backend must follow for its next action.

``NEXT_ACTION_SCHEMA`` is the single source of truth: the llama backend turns
it into a GBNF grammar, the OpenAI-compatible backend sends it as the
response format, and ``parse_action`` checks whatever comes back.  Tense and
person are enums, so a constrained decoder can only pick a valid one.
"""

from __future__ import annotations

import copy
import json
import re
from dataclasses import dataclass, field

from .grammar import TENSES, is_subject_phrase
from .errors import Recoverable
from .grounding import Grounds

# The pronoun a question names is the person the tool needs; "you" covers
# both second persons because English conjugates them alike.
PERSON_CHOICES: tuple[str, ...] = ("I", "you", "he", "she", "it", "we", "they")
MAX_PLAN_STEPS = 5
MAX_ANSWER_CHARS = 240

_CONJUGATE = {
    "type": "object",
    "properties": {
        "tool": {"const": "conjugate"},
        "verb": {"type": "string", "pattern": "^[a-z]{1,24}$"},
        "tense": {"enum": list(TENSES)},
        "person": {"enum": list(PERSON_CHOICES)},
        # A plan: how many conjugate calls the question needs (turn 1 only).
        "steps": {"type": "integer", "minimum": 1, "maximum": MAX_PLAN_STEPS},
    },
    "required": ["tool", "verb", "tense", "person"],
    "additionalProperties": False,
}
_LIST_TENSES = {
    "type": "object",
    "properties": {"tool": {"const": "list_tenses"}},
    "required": ["tool"],
    "additionalProperties": False,
}
_ANSWER = {
    "type": "object",
    "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": MAX_ANSWER_CHARS}},
    "required": ["answer"],
    "additionalProperties": False,
}

NEXT_ACTION_SCHEMA: dict = {"title": "NextAction", "anyOf": [_CONJUGATE, _LIST_TENSES, _ANSWER]}


def schema_for_turn(first_turn: bool, may_answer: bool | None = None, final: bool = False,
                    grounds: Grounds | None = None) -> dict:
    """The schema in force for this turn.

    ``answer`` is offered only after a successful tool result (so never on the first turn), and alone in the
    final round after a limit.  Only the first turn may declare a plan.  ``grounds`` narrows the arguments and
    the answer to what the user's words decide (see :mod:`miniagent.agent.grounding`).
    """
    schema = copy.deepcopy(NEXT_ACTION_SCHEMA)
    if final:
        schema["anyOf"] = [b for b in schema["anyOf"] if "answer" in b["properties"]]
    else:
        may_answer = (not first_turn) if may_answer is None else may_answer
        if not may_answer:  # answers rest on the tool: dropped from the grammar itself, not checked after the fact
            schema["anyOf"] = [b for b in schema["anyOf"] if "answer" not in b["properties"]]
        if not first_turn:
            del schema["anyOf"][0]["properties"]["steps"]
    return grounds.apply(schema) if grounds else schema


class InvalidAction(Recoverable, ValueError):
    """The model's output is not a valid action (only possible without a grammar)."""


@dataclass(frozen=True)
class Action:
    kind: str  # "tool" or "answer"
    tool: str = ""
    args: dict = field(default_factory=dict)
    answer: str = ""
    plan_steps: int | None = None

    def call_key(self) -> str:
        """Identity of a tool call, for dedup: tool plus canonical arguments."""
        return self.tool + json.dumps(self.args, sort_keys=True)

    def to_json(self) -> str:
        if self.kind == "answer":
            return json.dumps({"answer": self.answer}, ensure_ascii=False)
        payload = {"tool": self.tool, **self.args}
        if self.plan_steps is not None:
            payload["steps"] = self.plan_steps
        return json.dumps(payload, ensure_ascii=False)


_VERB_RE = re.compile(_CONJUGATE["properties"]["verb"]["pattern"])


def parse_action(text: str, *, first_turn: bool, may_answer: bool | None = None) -> Action:
    """Parse and validate one action against the turn's schema."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidAction(f"not JSON ({exc.msg}): {text[:80]!r}") from None
    if not isinstance(data, dict):
        raise InvalidAction("an action must be a JSON object")
    if "answer" in data:
        if not ((not first_turn) if may_answer is None else may_answer):
            raise InvalidAction("no answer without a successful tool result: call a tool first")
        answer = data["answer"]
        if set(data) != {"answer"} or not isinstance(answer, str) or not answer.strip():
            raise InvalidAction('an answer is {"answer": "<non-empty text>"}')
        return Action(kind="answer", answer=answer[:MAX_ANSWER_CHARS])
    tool = data.get("tool")
    if tool == "list_tenses" and set(data) == {"tool"}:
        return Action(kind="tool", tool="list_tenses")
    if tool == "conjugate":
        return _parse_conjugate(data, first_turn)
    raise InvalidAction(f"unknown action {text[:80]!r}; use conjugate, list_tenses or answer")


def _parse_conjugate(data: dict, first_turn: bool) -> Action:
    allowed = {"tool", "verb", "tense", "person"} | ({"steps"} if first_turn else set())
    extra = set(data) - allowed
    if extra:
        raise InvalidAction(f"unexpected fields {sorted(extra)}")
    verb, tense, person = data.get("verb"), data.get("tense"), data.get("person")
    if not isinstance(verb, str) or not _VERB_RE.match(verb):
        raise InvalidAction("verb must be one lowercase word")
    if tense not in TENSES:
        raise InvalidAction(f"tense must be one of: {', '.join(TENSES)}")
    if person not in PERSON_CHOICES and not (isinstance(person, str) and is_subject_phrase(person)):
        raise InvalidAction(f"person must be one of: {', '.join(PERSON_CHOICES)}; or the question's subject")
    steps = data.get("steps")
    if steps is not None and (not isinstance(steps, int) or not 1 <= steps <= MAX_PLAN_STEPS):
        raise InvalidAction(f"steps must be an integer from 1 to {MAX_PLAN_STEPS}")
    args = {"verb": verb, "tense": tense, "person": person}
    return Action(kind="tool", tool="conjugate", args=args, plan_steps=steps)
