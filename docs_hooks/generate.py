"""MkDocs hook: turn the break catalogue into Markdown fragments the pages include.

Registered in ``mkdocs.yml`` under ``hooks:``.  Before every build
(``on_pre_build``, so before any page is read by pymdownx.snippets, which has
``check_paths: true``) it reads every ``breaks/<id>/break.toml`` and writes,
into ``build/generated/breaks/<id>/``:

- ``title.{en,es}.md``   the page's H1
- ``cause.{en,es}.md``   the hidden cause, one sentence
- ``symptom.md``, ``symptom.es.md``  the ``[symptom]`` strings as a table
- ``hints.{en,es}.md``   three collapsible hints, closed until opened
- ``model.{en,es}.md``   the model that reproduces the break (real or stand-in, and why)
- ``run.{en,es}.md``     the commands, and what ``invoke exp`` runs for this break
- ``fix.patch``          ``break.patch`` reversed: the diff that restores the guard

and ``build/generated/breaks/index.{en,es}.md``, the catalogue as a table.

``build/`` is outside ``docs_dir``, so writing there never retriggers
``mkdocs serve``.  Files are only rewritten when their content changes.

The metadata stays the single source: nothing here is specific to one break.
Optional Spanish keys are used when a ``break.toml`` has them, otherwise the
English text is shown (and labelled as such):
``removes_es`` (top level), ``stand_in_why_es`` (in ``[run]``) and a
``[symptom.es]`` table with the same keys as ``[symptom]``.
"""

from __future__ import annotations

import logging
import re
import shlex
import tomllib
from pathlib import Path
from typing import Any

log = logging.getLogger("mkdocs.hooks.generate")

LANGS = ("en", "es")
OUT = Path("build") / "generated" / "breaks"

# What the named stand-ins do (mirrors miniagent.models.scripted.BEHAVIOURS;
# the English text is read from there when the package imports).
BEHAVIOURS_ES = {
    "oracle": "llama una vez a conjugate y después responde con el resultado de la herramienta",
    "stubborn": "nunca se da por satisfecho: repite la misma llamada a conjugate y no responde nunca",
    "wanderer": "nunca se da por satisfecho: cada turno hace una llamada a conjugate distinta y no responde nunca",
    "clumsy": "llama con algo que no es un verbo hasta que ve la lista de tiempos, y entonces se corrige",
    "rambler": "su respuesta no acaba nunca: todas terminan con finish_reason 'length'",
    "planner": "declara un plan de tres verbos, conjuga cada uno y después responde",
}

TEXT = {
    "en": {
        "heading": "Break {num}: {title}",
        "hint": "Hint {n}",
        "sym_label": {"outcome": "Outcome", "cpu": "CPU", "trace": "Trace"},
        "sym_head": "| What you see | |",
        "sym_fold": "What you will see (open it once you have written your prediction)",
        "real": "**Model: the real one.** This break is reproduced with the lab's own model, Gemma 3 270M "
                "run by llama.cpp (`--llm llama`).",
        "stand_in": "**Model: a named stand-in, `{llm}`** ({what}). The real model does not reproduce this "
                    "break: {why}",
        "stand_in_nowhy": "**Model: a named stand-in, `{llm}`** ({what}).",
        "ci": "The maintainer check (`invoke check-breaks`) runs it with `{ci}` to stay fast; "
              "`invoke check-breaks --real` uses the model above.",
        "run_intro": "Replace `<you>` with your name (it becomes your folder under `learners/`).",
        "you": "<you>", "lang_flag": "",
        "run_predict": "# 1. write your prediction first (adds a section to your notebook)",
        "run_exp": "# 2. run the break from a sandbox copy, under the harness",
        "run_table": "What `invoke exp` uses for this break (change it with `--input`, `--timeout`, `--llm`):",
        "col_setting": "Setting", "col_value": "Value",
        "q": "question (`--input`)", "llm": "model (`--llm`)", "flags": "extra agent flags",
        "timeout": "harness timeout (`--timeout`), counted from the loop's start", "none": "none",
        "needs": "what the run must show before the timeout may end it (`needs`)",
        "cmd": "The agent command it starts inside the sandbox:",
        "by_hand": "The same run by hand, under the harness, from your own tree (the trace goes to `runs/`). With `invoke break {alias}` applied it is the broken run; with your `src/` "
                   "intact (or after `invoke fix {alias}`) it is the run with the guard in place:",
        "english": "",
        "idx_head": "| Break | Title | What it removes | Model |",
        "idx_real": "real (Gemma 3 270M)",
        "idx_stand": "stand-in `{llm}`",
        "missing": "!!! failure \"No break.toml\"\n    `breaks/{id}/` has a patch but no `break.toml` yet: "
                   "its metadata (title, run, symptom, hidden cause, hints) is missing.\n",
    },
    "es": {
        "heading": "Rotura {num}: {title}",
        "hint": "Pista {n}",
        "sym_label": {"outcome": "Resultado", "cpu": "CPU", "trace": "Traza"},
        "sym_head": "| Lo que ves | |",
        "sym_fold": "Lo que verás (ábrelo cuando hayas escrito tu predicción)",
        "real": "**Modelo: el de verdad.** Esta rotura se reproduce con el modelo del propio laboratorio, "
                "Gemma 3 270M ejecutado con llama.cpp (`--llm llama`).",
        "stand_in": "**Modelo: un sustituto con nombre, `{llm}`** ({what}). El modelo de verdad no "
                    "reproduce esta rotura: {why}",
        "stand_in_nowhy": "**Modelo: un sustituto con nombre, `{llm}`** ({what}).",
        "ci": "La comprobación de mantenimiento (`invoke check-breaks`) la ejecuta con `{ci}` para ir "
              "rápido; `invoke check-breaks --real` usa el modelo de arriba.",
        "run_intro": "Cambia `<tu-nombre>` por tu nombre (será tu carpeta dentro de `learners/`). La primera vez, "
                     "`--lang es` crea tu cuaderno en español; después se puede omitir.",
        "you": "<tu-nombre>", "lang_flag": " --lang es",
        "run_predict": "# 1. primero tu predicción (añade una sección a tu cuaderno)",
        "run_exp": "# 2. ejecuta la rotura desde una copia aislada, dentro del arnés",
        "run_table": "Lo que usa `invoke exp` en esta rotura (se cambia con `--input`, `--timeout`, `--llm`):",
        "col_setting": "Ajuste", "col_value": "Valor",
        "q": "pregunta (`--input`)", "llm": "modelo (`--llm`)", "flags": "opciones extra del agente",
        "timeout": "tiempo límite del arnés (`--timeout`), contado desde que arranca el bucle", "none": "ninguna",
        "needs": "lo que la ejecución tiene que mostrar antes de que el tiempo límite pueda cortarla (`needs`)",
        "cmd": "La orden del agente que lanza dentro de la copia:",
        "by_hand": "La misma ejecución a mano, dentro del arnés y desde tu propio árbol (la traza queda en "
                   "`runs/`). Con `invoke break {alias}` aplicado es la ejecución "
                   "rota; con tu `src/` intacto (o después de `invoke fix {alias}`) es la ejecución con la guarda "
                   "en su sitio:",
        "english": " *(en inglés, tal como figura en el catálogo)*",
        "idx_head": "| Rotura | Título | Qué quita | Modelo |",
        "idx_real": "real (Gemma 3 270M)",
        "idx_stand": "sustituto `{llm}`",
        "missing": "!!! failure \"Falta break.toml\"\n    `breaks/{id}/` tiene parche pero todavía no tiene "
                   "`break.toml`: faltan sus metadatos (título, ejecución, síntoma, causa oculta, pistas).\n",
    },
}


# --------------------------------------------------------------------------
# Reversing a unified diff
# --------------------------------------------------------------------------

_HUNK_RE = re.compile(r"^@@ -(\d+(?:,\d+)?) \+(\d+(?:,\d+)?) @@(.*)$")
_INDEX_RE = re.compile(r"^index ([0-9a-f]+)\.\.([0-9a-f]+)(.*)$")


def _swap_path_lines(old: str, new: str) -> tuple[str, str]:
    """``--- a/x`` / ``+++ b/y`` -> ``--- a/y`` / ``+++ b/x`` (``/dev/null`` moves with its side)."""
    old_path, new_path = old[4:], new[4:]

    def strip(path: str) -> str:
        return path[2:] if path[:2] in ("a/", "b/") else path

    def side(path: str, prefix: str) -> str:
        return path if path.startswith("/dev/null") else prefix + strip(path)

    return "--- " + side(new_path, "a/"), "+++ " + side(old_path, "b/")


def reverse_patch(text: str) -> str:
    """The unified diff that undoes ``text``.

    File lines swap, hunk ranges swap, ``-`` and ``+`` swap; context lines
    stay.  Within each run of changed lines the removals are put first, as
    diff tools print them (the old and new texts of the hunk are unchanged
    by that reordering, so the patch applies the same).
    """
    lines = text.splitlines()
    out: list[str] = []
    block: list[str] = []

    def flush() -> None:
        out.extend([line for line in block if line.startswith("-")] + [line for line in block if line.startswith("+")])
        block.clear()

    in_hunk = False
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("diff --git "):
            flush()
            in_hunk = False
            out.append(line)
        elif not in_hunk and line.startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ "):
            out.extend(_swap_path_lines(line, lines[i + 1]))
            i += 1
        elif not in_hunk and (m := _INDEX_RE.match(line)):
            out.append(f"index {m.group(2)}..{m.group(1)}{m.group(3)}")
        elif not in_hunk and line.startswith(("new file mode", "deleted file mode")):
            out.append(line.replace("new file", "deleted file", 1) if line.startswith("new")
                       else line.replace("deleted file", "new file", 1))
        elif m := _HUNK_RE.match(line):
            flush()
            in_hunk = True
            out.append(f"@@ -{m.group(2)} +{m.group(1)} @@{m.group(3)}")
        elif in_hunk and line.startswith("-"):
            block.append("+" + line[1:])
        elif in_hunk and line.startswith("+"):
            block.append("-" + line[1:])
        else:  # context (" ..."), "\ No newline at end of file", or a header line
            flush()
            out.append(line)
        i += 1
    flush()
    return "\n".join(out) + "\n"


# --------------------------------------------------------------------------
# Fragments
# --------------------------------------------------------------------------


def _behaviours_en() -> dict[str, str]:
    try:
        from miniagent.models.scripted import BEHAVIOURS
    except Exception:  # the docs can build without the package installed
        return {}
    return dict(BEHAVIOURS)


def _lang_text(table: Any, lang: str) -> tuple[str, bool]:
    """A ``{en, es}`` table's text for ``lang``: (text, is_fallback_to_english)."""
    if isinstance(table, dict):
        if table.get(lang):
            return str(table[lang]), False
        return str(table.get("en", "")), lang != "en"
    return str(table or ""), lang != "en"


def _indent(text: str, spaces: int = 4) -> str:
    pad = " " * spaces
    return "\n".join(pad + line if line.strip() else "" for line in text.splitlines())


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Inline code that survives backticks inside (none expected, but be safe)."""
    text = str(text)
    fence = "``" if "`" in text else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _title(data: dict, lang: str) -> str:
    return _lang_text(data.get("title", {}), lang)[0]


def _is_real(run: dict) -> bool:
    return run.get("llm") == "llama"


def _number(break_id: str) -> str:
    return break_id.split("-", 1)[0]


def _alias(break_id: str) -> str:
    return break_id.split("-", 1)[1] if "-" in break_id else break_id


def _symptom_fragment(data: dict, lang: str) -> str:
    t = TEXT[lang]
    symptom = data.get("symptom", {})
    base = {k: v for k, v in symptom.items() if isinstance(v, str)}
    local = symptom.get(lang) if isinstance(symptom.get(lang), dict) else None
    rows = [t["sym_head"], "|---|---|"]
    fallback = False
    for key, text in base.items():
        if lang != "en":
            if local and local.get(key):
                text = local[key]
            else:
                fallback = True
        rows.append(f"| **{t['sym_label'].get(key, key)}** | {_cell(text)} |")
    note = "\n*Textos en inglés, tal como figuran en el catálogo.*\n" if fallback and lang == "es" else ""
    # Folded until opened: the learner predicts first, then looks.
    return f'??? danger "{t["sym_fold"]}"\n' + _indent("\n".join(rows) + "\n" + note) + "\n"


def _hints_fragment(data: dict, lang: str) -> str:
    hints = data.get("hints", {})
    items = hints.get(lang) or hints.get("en") or []
    parts = []
    for n, hint in enumerate(items, 1):
        parts.append(f'??? tip "{TEXT[lang]["hint"].format(n=n)}"\n{_indent(hint)}\n')
    return "\n".join(parts)


def _model_fragment(data: dict, lang: str, behaviours_en: dict[str, str]) -> str:
    t = TEXT[lang]
    run = data.get("run", {})
    llm = run.get("llm", "?")
    if _is_real(run):
        text = t["real"]
    else:
        kind, _, name = llm.partition(":")
        what_en = behaviours_en.get(name, "")
        what = BEHAVIOURS_ES.get(name, what_en) if lang == "es" else what_en
        what = what or llm
        why = run.get(f"stand_in_why_{lang}") if lang != "en" else run.get("stand_in_why")
        why_fallback = False
        if not why and run.get("stand_in_why"):
            why, why_fallback = run["stand_in_why"], lang != "en"
        if why:
            text = t["stand_in"].format(llm=llm, what=what, why=why)
            if why_fallback:
                text += t["english"]
        else:
            text = t["stand_in_nowhy"].format(llm=llm, what=what)
    ci = run.get("ci_llm")
    if ci and ci != llm:
        text += "\n\n" + t["ci"].format(ci=ci)
    return text + "\n"


def _run_fragment(data: dict, lang: str) -> str:
    t = TEXT[lang]
    run = data.get("run", {})
    alias = _alias(data["id"])
    question, llm = run.get("input", ""), run.get("llm", "llama")
    flags = [str(f) for f in run.get("flags", [])]
    timeout = run.get("timeout_s")
    timeout_s = f"{float(timeout):g} s" if timeout is not None else "?"
    shown_flags = _code(" ".join(flags)) if flags else t["none"]
    agent = ["python", "-m", "miniagent", "ask", question, "--trace", "trace.jsonl", "--json", "--llm", llm, *flags]
    agent_cmd = " ".join(shlex.quote(a) for a in agent)
    needs = {str(k): int(v) for k, v in run.get("needs", {}).items()}
    shown_needs = ", ".join(f"`{k}` ≥ {n}" for k, n in needs.items()) or t["none"]
    by_hand = ["python", "-m", "miniagent.lab.harness", "--timeout", f"{float(timeout or 30):g}",
               *(f"--needs={k}={n}" for k, n in needs.items()),
               "--trace", f"runs/{alias}-trace.jsonl", "--out", f"runs/{alias}-by-hand", "--",
               "python", "-m", "miniagent", "ask", question, "--llm", llm, *flags]
    by_hand_cmd = " ".join(shlex.quote(a) for a in by_hand)
    return (
        f"{t['run_intro']}\n\n"
        "```bash\n"
        f"{t['run_predict']}\n"
        f"invoke predict {alias} --learner {t['you']}{t['lang_flag']}\n"
        f"{t['run_exp']}\n"
        f"invoke exp {alias} --learner {t['you']}\n"
        "```\n\n"
        f"{t['run_table']}\n\n"
        f"| {t['col_setting']} | {t['col_value']} |\n|---|---|\n"
        f"| {t['q']} | {_cell(_code(question))} |\n"
        f"| {t['llm']} | {_code(llm)} |\n"
        f"| {t['flags']} | {_cell(shown_flags)} |\n"
        f"| {t['timeout']} | {timeout_s} |\n"
        f"| {t['needs']} | {shown_needs} |\n\n"
        f"{t['cmd']}\n\n"
        "```bash\n"
        f"{agent_cmd}\n"
        "```\n\n"
        f"{t['by_hand'].format(alias=alias)}\n\n"
        "```bash\n"
        f"{by_hand_cmd}\n"
        "```\n"
    )


def _index_fragment(entries: list[tuple[str, dict | None]], lang: str) -> str:
    t = TEXT[lang]
    rows = [t["idx_head"], "|---|---|---|---|"]
    for break_id, data in entries:
        if data is None:
            rows.append(f"| [`{break_id}`]({break_id}.md) | ? | ? | ? |")
            continue
        removes = data.get(f"removes_{lang}") if lang != "en" else None
        removes = removes or data.get("removes", "")
        run = data.get("run", {})
        model = t["idx_real"] if _is_real(run) else t["idx_stand"].format(llm=run.get("llm", "?"))
        rows.append(f"| [`{break_id}`]({break_id}.md) | {_cell(_title(data, lang))} | {_cell(removes)} | {model} |")
    note = ""
    if lang != "en" and any(d is not None and not d.get("removes_es") for _, d in entries):
        note = "\n*La columna «Qué quita» está en inglés, tal como figura en el catálogo.*\n"
    return "\n".join(rows) + "\n" + note


def _write(path: Path, text: str) -> bool:
    """Write only when the content changes (keeps mtimes stable for serve)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def generate(root: Path) -> list[Path]:
    """Write every fragment under ``root / OUT``; return the files that changed."""
    behaviours_en = _behaviours_en()
    out_root = root / OUT
    changed: list[Path] = []
    entries: list[tuple[str, dict | None]] = []
    breaks_dir = root / "breaks"
    folders = sorted(p for p in breaks_dir.iterdir() if p.is_dir()) if breaks_dir.is_dir() else []
    for folder in folders:
        toml_path, patch_path = folder / "break.toml", folder / "break.patch"
        if not toml_path.is_file() and not patch_path.is_file():
            continue
        out = out_root / folder.name
        files: dict[str, str] = {}
        if patch_path.is_file():
            files["fix.patch"] = reverse_patch(patch_path.read_text(encoding="utf-8"))
        if not toml_path.is_file():
            # A break whose metadata is not written yet: the page still builds, and says so.
            log.info("generate: %s has no break.toml; writing placeholder fragments", folder.name)
            for lang in LANGS:
                missing = TEXT[lang]["missing"].format(id=folder.name)
                files[f"title.{lang}.md"] = "# " + TEXT[lang]["heading"].format(
                    num=_number(folder.name), title=_alias(folder.name)) + "\n"
                for name in ("cause", "hints", "model", "run"):
                    files[f"{name}.{lang}.md"] = missing
            files["symptom.md"] = TEXT["en"]["missing"].format(id=folder.name)
            files["symptom.es.md"] = TEXT["es"]["missing"].format(id=folder.name)
            entries.append((folder.name, None))
        else:
            data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
            data.setdefault("id", folder.name)
            entries.append((folder.name, data))
            for lang in LANGS:
                files[f"title.{lang}.md"] = "# " + TEXT[lang]["heading"].format(
                    num=_number(folder.name), title=_title(data, lang)) + "\n"
                cause, fallback = _lang_text(data.get("hidden_cause", {}), lang)
                files[f"cause.{lang}.md"] = cause + (TEXT[lang]["english"] if fallback else "") + "\n"
                files[f"hints.{lang}.md"] = _hints_fragment(data, lang)
                files[f"model.{lang}.md"] = _model_fragment(data, lang, behaviours_en)
                files[f"run.{lang}.md"] = _run_fragment(data, lang)
            files["symptom.md"] = _symptom_fragment(data, "en")
            files["symptom.es.md"] = _symptom_fragment(data, "es")
        for name, text in files.items():
            if _write(out / name, text):
                changed.append(out / name)
    for lang in LANGS:
        path = out_root / f"index.{lang}.md"
        if _write(path, _index_fragment(entries, lang)):
            changed.append(path)
    return changed


# --------------------------------------------------------------------------
# MkDocs events
# --------------------------------------------------------------------------


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


def on_pre_build(config: Any, **kwargs: Any) -> None:
    changed = generate(_root(config))
    if changed:
        log.debug("generate: %d fragment(s) written", len(changed))


def on_serve(server: Any, config: Any, builder: Any, **kwargs: Any) -> Any:
    """Rebuild when a break's metadata or a measured result changes (both live outside docs/)."""
    root = _root(config)
    for folder in ("breaks", "docs_results"):
        if (root / folder).is_dir():
            server.watch(str(root / folder))
    return server


if __name__ == "__main__":  # python docs_hooks/generate.py: regenerate without building
    for p in generate(Path(__file__).resolve().parent.parent):
        print(p)
