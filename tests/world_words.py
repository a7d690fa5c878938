"""A generated world in words, English and Spanish: the counterexample a break's page shows
(``invoke counterexamples`` collects what ``tests/agent/loop_worlds.py`` notes with it)."""

from __future__ import annotations

from dataclasses import fields

from generated import Reply, World

from miniagent.agent.config import TutorConfig
from miniagent.lab.words import number  # seconds as each language writes them: 0,5 s in Spanish


WORDS = {
    "en": {
        "call": "calls conjugate({verb}, {tense}, {person}{steps})",
        "steps": ", a plan of {n} steps",
        "list_tenses": "calls list_tenses",
        "answer": "answers “{text}”",
        "garbage": "replies with text that is not a valid action: `{text}`",
        "ramble": "starts an answer that never ends: every piece is cut off (finish_reason length)",
        "fail": "fails: the model server answers an error",
        "cuts": ", cut off {n} time(s) by the token limit (finish_reason length)",
        "seconds": ", taking {s} s",
        "tokens": " ({p} prompt + {c} completion tokens)",
        "one": "A model that {r}, again and again, for ever.",
        "two": "A model that alternates two replies for ever: it {a}; then it {b}.",
        "many": "A model that plays these {n} replies in a cycle, for ever:",
        "grammar": "It never answers where the turn's schema offers no answer, and in the final round, where the "
                   "answer is the only branch, it answers (as under a grammar).",
        "no_grammar": "It answers whenever its script says so, offered or not (as a backend without a grammar).",
        "ok": "returns a result", "error": "fails with a tool error",
        "slow": "answers after {s} s", "hang": "never answers (it hangs until the timeout)",
        "server_failed": "dies (the MCP server exits)",
        "tools_one": "Every tool call {o}.",
        "tools_many": "Each different tool call, in turn (the same call always gets the same): {o}.",
        "settings": "Settings that differ from the defaults: {s}.",
        "defaults": "Every setting at its default.",
    },
    "es": {
        "call": "llama a conjugate({verb}, {tense}, {person}{steps})",
        "steps": ", con un plan de {n} pasos",
        "list_tenses": "llama a list_tenses",
        "answer": "responde «{text}»",
        "garbage": "contesta con un texto que no es una acción válida: `{text}`",
        "ramble": "empieza una respuesta que no acaba nunca: cada trozo se corta (finish_reason length)",
        "fail": "falla: el servidor del modelo devuelve un error",
        "cuts": ", cortada {n} vez/veces por el límite de tokens (finish_reason length)",
        "seconds": ", y tarda {s} s",
        "tokens": " ({p} tokens de prompt + {c} de respuesta)",
        "one": "Un modelo que {r}, una y otra vez, sin parar.",
        "two": "Un modelo que alterna dos respuestas sin parar: {a}; después {b}.",
        "many": "Un modelo que repite en ciclo estas {n} respuestas, sin parar:",
        "grammar": "Nunca responde si el esquema del turno no ofrece la respuesta, y en la ronda final, donde la "
                   "respuesta es la única rama, responde (como con una gramática).",
        "no_grammar": "Responde cuando se lo dice su guion, se le ofrezca o no (como un backend sin gramática).",
        "ok": "devuelve un resultado", "error": "falla con un error de la herramienta",
        "slow": "contesta al cabo de {s} s", "hang": "no contesta nunca (se cuelga hasta el plazo)",
        "server_failed": "se cae (el servidor MCP termina)",
        "tools_one": "Cada llamada a una herramienta {o}.",
        "tools_many": "Cada llamada distinta a una herramienta, por turnos (la misma llamada, siempre igual): {o}.",
        "settings": "Ajustes distintos de los valores por defecto: {s}.",
        "defaults": "Todos los ajustes con su valor por defecto.",
    },
}


def describe_reply(reply: Reply, lang: str) -> str:
    w = WORDS[lang]
    if reply.kind == "call":
        steps = w["steps"].format(n=reply.steps) if reply.steps is not None else ""
        text = w["call"].format(verb=reply.verb, tense=reply.tense, person=reply.person, steps=steps)
    elif reply.kind in ("answer", "garbage"):
        text = w[reply.kind].format(text=reply.text)
    else:
        text = w[reply.kind]
    if reply.cuts and reply.kind not in ("ramble", "fail"):
        text += w["cuts"].format(n=reply.cuts)
    if reply.seconds:
        text += w["seconds"].format(s=number(reply.seconds, lang))
    if (reply.prompt_tokens, reply.completion_tokens) != (Reply.prompt_tokens, Reply.completion_tokens):
        text += w["tokens"].format(p=reply.prompt_tokens, c=reply.completion_tokens)
    return text


def describe_world(world: World, lang: str = "en") -> str:
    w = WORDS[lang]
    script = [describe_reply(r, lang) for r in world.script]
    if len(script) == 1:
        lines = [w["one"].format(r=script[0])]
    elif len(script) == 2 and world.script[0] != world.script[1]:
        lines = [w["two"].format(a=script[0], b=script[1])]
    else:
        lines = [w["many"].format(n=len(script))] + [f"{i}. {s}" for i, s in enumerate(script, 1)]
    lines.append(w["grammar"] if world.keeps_to_schema else w["no_grammar"])
    outcomes = [w[o.kind].format(s=number(o.seconds, lang)) for o in world.outcomes]
    lines.append(w["tools_one"].format(o=outcomes[0]) if len(set(outcomes)) == 1
                 else w["tools_many"].format(o="; ".join(outcomes)))
    default = TutorConfig()
    changed = [f"`{f.name}={getattr(world.config, f.name)!r}`" for f in fields(TutorConfig)
               if getattr(world.config, f.name) != getattr(default, f.name)]
    lines.append(w["settings"].format(s=", ".join(changed)) if changed else w["defaults"])
    return "\n".join(lines)
