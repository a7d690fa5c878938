"""Deterministic stand-in models with named behaviours.

They exist for fast tests and for demonstrating one behaviour exactly; the
real model is the llama backend.  Each behaviour is a small function of the
scratchpad, so a run is reproducible to the token.
"""

from __future__ import annotations

import json
import re
import time

from ..agent.actions import PERSON_CHOICES, schema_for_turn
from ..agent.grounding import Grounds
from ..agent.grammar import TENSES
from ..agent.ports import Entry, ModelReply

BEHAVIOURS = {
    "oracle": "calls conjugate once, then answers with the tool's result",
    "stubborn": "never satisfied: repeats the same conjugate call, never answers",
    "wanderer": "never satisfied: a different conjugate call every turn, never answers",
    "clumsy": "calls with a non-verb until it sees the list of tenses, then recovers",
    "rambler": "its answer never ends: every reply stops with finish_reason 'length'",
    "planner": "declares a plan of three verbs, conjugates each, then answers",
    "alternator": "never satisfied: two conjugate calls taking turns (A, B, A, B...), never answers",
    "knowall": "answers from memory (a made-up regular form) whenever the schema lets it answer; calls the tool only when it must",
    "garbler": "never gives a valid action (like a backend without a grammar): broken JSON, unknown tools, bad fields",
    "literal": "a decoder that reads nothing: takes the first option of every choice its turn's schema offers "
               "(first tense, first person, first verb offered, else 'go'), and answers with the first answer "
               "offered, else with the result in view",
}

# Behaviours that play a model whose replies a grammar cannot shape: the rambler's answer never ends, the
# garbler ignores the format. The others act as if decoded under the turn's schema, so in the final round,
# where the schema has only the answer branch, they answer.
UNCONSTRAINED = ("rambler", "garbler")


def guess_call(question: str) -> dict:
    """A crude reading of the question (the stand-in has no language skill)."""
    text = question.lower()
    tense = next((t for t in sorted(TENSES, key=len, reverse=True) if t in text), "past simple")
    words = re.findall(r"[a-z]+", question)
    person = next((w for w in words if w in PERSON_CHOICES), None)
    person = person or next((p for p in PERSON_CHOICES if re.search(rf"\b{p.lower()}\b", text)), "I")
    verb = "eat"
    for marker in ("verb", "of", "conjugate"):  # "conjugate the verb eat": the word after "verb" wins
        match = re.search(rf"\b{marker}\s+['\"]?([a-z]+)", text)
        if match:
            verb = match.group(1)
            break
    return {"verb": verb, "tense": tense, "person": person}


class ScriptedBackend:
    def __init__(self, behaviour: str = "oracle") -> None:
        if behaviour not in BEHAVIOURS:
            raise ValueError(f"unknown scripted behaviour {behaviour!r}; choose from {', '.join(BEHAVIOURS)}")
        self.behaviour = behaviour
        self.name = f"scripted:{behaviour}"
        self.grounds: Grounds | None = None
        self.may_answer = False

    def next_action(self, scratchpad: list[Entry], *, first_turn: bool, may_answer: bool | None = None,
                    partial: str = "", timeout_s: float | None = None, final: bool = False,
                    grounds: Grounds | None = None) -> ModelReply:
        # ``grounds`` narrows what a decoder is offered; of the stand-ins only the literal one decodes a schema.
        started = time.perf_counter()
        self.grounds = grounds
        self.may_answer = (not first_turn) if may_answer is None else may_answer  # what the turn's schema allows
        if final and self.behaviour not in UNCONSTRAINED:
            text, finish = self._final(scratchpad)
        else:
            text, finish = getattr(self, "_" + self.behaviour)(scratchpad, first_turn, partial)
        prompt_tokens = sum(len(e.text.split()) for e in scratchpad)
        return ModelReply(text, finish, prompt_tokens, len(text.split()), time.perf_counter() - started)

    def close(self) -> None:
        pass

    @classmethod
    def _final(cls, pad):
        """The final round: answer with the latest successful tool result, or say there is none."""
        results = [e.text for e in pad if e.role == "observation" and not e.text.startswith("error")]
        return cls._answer(results[-1].split(" (", 1)[0] if results else "I could not work it out")

    # --- behaviours -------------------------------------------------------
    @staticmethod
    def _call(args: dict, **extra) -> tuple[str, str]:
        return json.dumps({"tool": "conjugate", **args, **extra}), "stop"

    @staticmethod
    def _answer(text: str) -> tuple[str, str]:
        return json.dumps({"answer": text}), "stop"

    def _oracle(self, pad, first_turn, partial):
        if first_turn:
            return self._call(guess_call(pad[0].text))
        return self._answer(pad[-1].text.split(" (", 1)[0])

    def _stubborn(self, pad, first_turn, partial):
        return self._call(guess_call(pad[0].text))

    def _wanderer(self, pad, first_turn, partial):
        turn = sum(1 for e in pad if e.role == "action")
        call = guess_call(pad[0].text)
        call["tense"] = TENSES[turn % len(TENSES)]
        call["person"] = PERSON_CHOICES[(turn // len(TENSES)) % len(PERSON_CHOICES)]
        return self._call(call)

    def _alternator(self, pad, first_turn, partial):
        turn = sum(1 for e in pad if e.role == "action")
        call = guess_call(pad[0].text)
        other = "present simple" if call["tense"] != "present simple" else "past simple"
        return self._call(call if turn % 2 == 0 else {**call, "tense": other})

    def _knowall(self, pad, first_turn, partial):
        call = guess_call(pad[0].text)
        if not self.may_answer:
            return self._call(call)
        if pad[-1].role == "observation" and not pad[-1].text.startswith("error"):
            return self._answer(pad[-1].text.split(" (", 1)[0])  # a tool result in view: it copies it
        return self._answer(f"{call['person']} {call['verb']}ed")  # from memory: every verb is regular to it

    def _clumsy(self, pad, first_turn, partial):
        saw_discovery = any(e.role == "observation" and "future perfect continuous" in e.text for e in pad)
        call = guess_call(pad[0].text)
        if not saw_discovery:
            return self._call({**call, "verb": "lovingly"})
        if pad[-1].role == "observation" and not pad[-1].text.startswith("error"):
            if "future perfect continuous" not in pad[-1].text:
                return self._answer(pad[-1].text.split(" (", 1)[0])
        return self._call(call)

    def _rambler(self, pad, first_turn, partial):
        if first_turn:
            return self._call(guess_call(pad[0].text))
        piece = "" if partial else '{"answer": "'
        return piece + "and so on, and so forth, ", "length"

    def _garbler(self, pad, first_turn, partial):
        turn = sum(1 for e in pad if e.role == "action")
        call = guess_call(pad[0].text)
        garbles = [
            'Sure! Here is the action: {"tool": "conjugate"',  # prose around a cut-off object
            json.dumps({"tool": "conjugate_verb", **call}),  # a tool that does not exist
            json.dumps({"tool": "conjugate", **call, "tense": "yesterday"}),  # a tense that does not exist
        ]
        return garbles[turn % len(garbles)], "stop"

    def _literal(self, pad, first_turn, partial):
        schema = schema_for_turn(first_turn, self.may_answer, False, self.grounds)
        branches = {"answer" if "answer" in b["properties"] else b["properties"]["tool"]["const"]: b["properties"]
                    for b in schema["anyOf"]}
        if "answer" in branches and pad[-1].role == "observation":
            offered = branches["answer"]["answer"].get("enum")  # the answer branch's own field
            return self._answer(offered[0] if offered else pad[-1].text.split(" (", 1)[0])
        call = branches["conjugate"]
        return self._call({"verb": call["verb"].get("enum", ["go"])[0], "tense": call["tense"]["enum"][0],
                           "person": call["person"]["enum"][0]})

    def _planner(self, pad, first_turn, partial):
        verbs = ["be", "have", "go"]
        call = guess_call(pad[0].text)
        done = sum(1 for e in pad if e.role == "action")
        if done < len(verbs):
            extra = {"steps": len(verbs)} if first_turn else {}
            return self._call({**call, "verb": verbs[done]}, **extra)
        results = [e.text for e in pad if e.role == "observation"]
        return self._answer("; ".join(results))
