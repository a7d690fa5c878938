"""The notebook's words, in English and in Spanish: the form a learner fills in and the reports appended to it."""

from __future__ import annotations

from typing import Any

from .fields import FIELDS

LANGS = ("en", "es")

TEXT: dict[str, dict[str, Any]] = {
    "en": {
        "comments": FIELDS,
        "intro": "Before you run it: replace each `?` with your guess (leave `?` if you have none).",
        "why": "### Why I think so",
        "observed": "### Observed — {id} ({when})",
        "cols": "| | predicted | observed | hit/miss | tolerance |",
        "hit": "hit", "miss": "miss", "not_predicted": "not predicted", "not_observed": "not observed",
        "not_exercised": "not exercised", "crashed_row": "crashed",
        "crashed": "This run crashed: the agent died of {sig} {when}. A crash says nothing about the break, so "
                   "nothing was scored, and running it again on a quieter machine will not help: see \"When the "
                   "model crashes\" in lab 02.",
        "before": "before its loop started", "after": "after {turns} turn(s)",
        "no_prediction": "No prediction was written before this run.",
        "busy_line": "machine: busy (other programs {cpu} % CPU)",
        "busy": "The machine was busy during this run: wall time and CPU figures are disturbed.",
        "unexercised": "This run never exercised the break (it needs {needs} before its timeout may end it), so it "
                       "says nothing about the prediction and nothing was scored. Run it again: `{rerun}`.",
        "more_loop": "more of the loop",
        "surprised": "**What surprised you?** {n} of your {total} predictions missed. Before you read on, write "
                     "here what you expected, what happened instead, and what in the loop could explain the gap. "
                     "Stuck? `invoke hint {alias}` gives hint 1 (then 2, then 3).",
        "record": "run record", "chart": "chart",
        "table_title": "Your prediction vs what happened",
        "table_cols": ("field", "predicted", "observed", "result", "tolerance"),
        "how_to": ("You have no prediction for {id} yet. Predict first: the lesson is the gap\n"
                   "between what you expect and what happens.\n"
                   "  1. invoke predict {alias} --learner {learner}\n"
                   "  2. open {notes} and replace each ? in the prediction block with your guess\n"
                   "     (and write a line under 'Why I think so')\n"
                   "  3. run the experiment again: invoke exp {alias} --learner {learner}"),
    },
    "es": {
        "comments": {
            "outcome": "answer | fallback | timeout | crash",
            "wall_s": "segundos hasta que acaba o lo matan",
            "cpu_percent": "CPU media del árbol de procesos, 100 = un núcleo",
            "tool_calls": "llamadas a herramientas MCP",
            "processes_left": "procesos que siguen vivos al acabar",
        },
        "intro": "Antes de ejecutarla: cambia cada `?` por lo que esperas (deja `?` si no tienes ni idea).",
        "why": "### Por qué lo creo",
        "observed": "### Observado — {id} ({when})",
        "cols": "| | predicho | observado | acierto/fallo | tolerancia |",
        "hit": "acierto", "miss": "fallo", "not_predicted": "sin predecir", "not_observed": "sin observar",
        "not_exercised": "no ejercitada", "crashed_row": "se rompió",
        "crashed": "Esta ejecución se rompió: el agente murió por {sig} {when}. Un fallo así no dice nada de la "
                   "avería, así que no se ha puntuado nada, y repetirla con la máquina más tranquila no servirá de "
                   "nada: mira «Cuando el modelo se rompe» en el lab 02.",
        "before": "antes de que empezara su bucle", "after": "tras {turns} turno(s)",
        "no_prediction": "No había ninguna predicción escrita antes de esta ejecución.",
        "busy_line": "machine: busy (other programs {cpu} % CPU)",
        "busy": "La máquina estaba ocupada durante esta ejecución: el tiempo y las cifras de CPU están alterados.",
        "unexercised": "Esta ejecución no llegó a ejercitar la avería (necesita {needs} antes de que el tiempo límite "
                       "pueda cortarla), así que no dice nada de la predicción y no se ha puntuado. Vuelve a "
                       "ejecutarla: `{rerun}`.",
        "more_loop": "recorrer más bucle",
        "surprised": "**¿Qué te ha sorprendido?** Han fallado {n} de tus {total} predicciones. Antes de seguir "
                     "leyendo, escribe aquí qué esperabas, qué pasó en su lugar y qué parte del bucle podría "
                     "explicar la diferencia. ¿Atascado? `invoke hint {alias}` te da la pista 1 (y luego la 2 y la 3).",
        "record": "registro de la ejecución", "chart": "gráfica",
        "table_title": "Tu predicción frente a lo que pasó",
        "table_cols": ("campo", "predicho", "observado", "resultado", "tolerancia"),
        "how_to": ("Todavía no tienes una predicción para {id}. Predice primero: la lección está en la\n"
                   "distancia entre lo que esperas y lo que pasa.\n"
                   "  1. invoke predict {alias} --learner {learner}\n"
                   "  2. abre {notes} y cambia cada ? del bloque de predicción por lo que esperas\n"
                   "     (y escribe una línea bajo «Por qué lo creo»)\n"
                   "  3. vuelve a lanzar el experimento: invoke exp {alias} --learner {learner}"),
    },
}

# Used when the repository's template notebook is not there (e.g. in tests).
DEFAULT_HEADER = {
    "en": ("# My predictions for the breaks\n"
           "\n"
           "Predict first, then run: `invoke predict ID --learner NAME` adds a section at\n"
           "the end of this file; replace each `?`, say why, then run `invoke exp`. Every\n"
           "run appends an observed block at the end, naming its break. These notes are\n"
           "yours: the lab only ever appends to this file.\n"),
    "es": ("# Mis predicciones para las averías\n"
           "\n"
           "Primero predice, después ejecuta: `invoke predict ID --learner NOMBRE` añade una\n"
           "sección al final de este fichero; cambia cada `?`, explica por qué y lanza\n"
           "`invoke exp`. Cada ejecución añade al final un bloque observado con el nombre de\n"
           "su avería. Estas notas son tuyas: el laboratorio solo añade texto al final.\n"),
}


def checked_lang(lang: str | None) -> str:
    if lang is None:
        return "en"
    if lang not in LANGS:
        raise ValueError(f"the notebook's language must be one of {', '.join(LANGS)}, not {lang!r}")
    return lang
