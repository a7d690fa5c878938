"""``invoke class-load`` from its flags: every flag checked before the first learner starts (a class takes
minutes), the class measured level by level, its report printed, saved or given as JSON."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console

from ...models.settings import SERVER_URL
from ...serving.start import SERVERS, ServerNotReady
from ...settings import load_config
from ..catalogue import ROOT
from ..evaluation import load_eval_set
from ..task_kit import check_save_name, number, refuse
from . import classload


def class_load_command(*, learners: str = "1,4,8,16", server: str = "miniagent", base_url: str | None = None,
                       questions_each=None, wall_clock_s=None, model_wall_clock_s=None, eval_set: str | None = None,
                       model: str | None = None, save: str | None = None, as_json: bool = False,
                       grounding: bool = True) -> None:
    """The class-load task's body: a refusal (ValueError or exit 2) before anything starts, exit 1 for a class
    that failed."""
    console = Console(quiet=as_json)
    # Everything a flag says is checked before the first learner starts: a class takes minutes, and a learner
    # that refuses its settings would only say that it did not start.
    settings = {k: number(f"--{k.replace('_', '-')}", v, float) for k, v in
                (("wall_clock_s", wall_clock_s), ("model_wall_clock_s", model_wall_clock_s)) if v is not None}
    if model:
        if not Path(model).is_file():
            raise ValueError(f"--model: model file not found: {model}")
        settings["model"] = model
    if not grounding:
        settings["ground_arguments"] = False
    load_config(cli=settings, env={})  # the bounds every learner's settings must meet
    try:
        sizes = [number("--learners", n, int) for n in str(learners).split(",")]
    except ValueError:
        sizes = []
    if not sizes or min(sizes) < 1:
        raise ValueError(f"--learners takes class sizes of 1 or more, comma-separated, got {learners!r}")
    each = number("--questions-each", questions_each, int) if questions_each is not None else None
    if each is not None and each < 1:
        raise ValueError(f"--questions-each takes 1 or more, got {questions_each!r}")
    if eval_set:
        load_eval_set(Path(eval_set))  # a set that cannot be read is refused by name (EvalSetError)
    check_save_name(save)
    if base_url is not None and not SERVER_URL.match(base_url):
        raise ValueError(f"--base-url takes a server's URL (http://HOST:PORT/v1), got {base_url!r}")
    choices = (*SERVERS, classload.LOCAL)
    if base_url is None and server not in choices:
        refuse(f"no server named {server!r}: choose one of {', '.join(choices)}, or give --base-url")

    def show(level):
        console.print(classload.level_line(level), highlight=False)

    try:
        report = classload.class_load(sizes, server=server, base_url=base_url,
                                      eval_set=Path(eval_set) if eval_set else classload.DEFAULT_SET,
                                      questions_each=each,
                                      settings=settings, model_path=model, on_level=show,
                                      shown=not as_json and sys.stdout.isatty())
    except (ServerNotReady, classload.ClassFailed) as err:  # the levels above it were shown as they ended
        refuse(err, status=1)  # a class that failed, not a refused input
    console.print(classload.markdown(report), markup=False, highlight=False)
    if save:
        for path in classload.save(report, ROOT / "docs_results", save):
            console.print(f"saved: {path.relative_to(ROOT)}", highlight=False)
    if as_json:
        print(json.dumps(report))
