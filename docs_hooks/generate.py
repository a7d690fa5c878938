"""MkDocs hook: turn the break catalogue into Markdown fragments the pages include.

Before every build it reads each ``breaks/<id>/break.toml`` (:meth:`miniagent.lab.catalogue.Break.load`),
``break.patch`` and ``docs_results/<id>.json``, and writes under ``build/generated/breaks/``: each break's title,
cause, symptom, hints, model, commands and measured results, in English and Spanish, its ``fix.patch``, and the
catalogue's tables.  Why: docs/maintainers.md.
"""

from __future__ import annotations

import json
import logging
import shlex
from pathlib import Path
from typing import Any

from miniagent.lab.catalogue import Break, alias_of, number_of
from miniagent.lab.patching import reverse_patch
from miniagent.lab.words import LANGS, number, section, words

log = logging.getLogger("mkdocs.hooks.generate")

OUT = Path("build") / "generated" / "breaks"  # outside docs_dir: writing here never retriggers `mkdocs serve`

# What the named stand-ins do (mirrors miniagent.models.scripted.BEHAVIOURS;
# the English text is read from there when the package imports).
BEHAVIOURS_ES = words("es")["behaviours"]

TEXT = section("docs")


# --------------------------------------------------------------------------
# Fragments
# --------------------------------------------------------------------------


def _behaviours_en() -> dict[str, str]:
    from miniagent.models.scripted import BEHAVIOURS

    return dict(BEHAVIOURS)


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


def _symptom_fragment(brk: Break, lang: str) -> str:
    t = TEXT[lang]
    rows = [t["sym_head"], "|---|---|"]
    for key, texts in brk.symptom.items():
        rows.append(f"| **{t['sym_label'].get(key, key)}** | {_cell(texts[lang])} |")
    # Folded until opened: the learner predicts first, then looks.
    return f'??? danger "{t["sym_fold"]}"\n' + _indent("\n".join(rows) + "\n") + "\n"


def _hints_fragment(brk: Break, lang: str) -> str:
    parts = []
    for n, hint in enumerate(brk.hints[lang], 1):
        parts.append(f'??? tip "{TEXT[lang]["hint"].format(n=n)}"\n{_indent(hint)}\n')
    return "\n".join(parts)


def _model_fragment(brk: Break, lang: str, behaviours_en: dict[str, str]) -> str:
    t = TEXT[lang]
    llm = brk.llm
    if brk.real_model:
        text = t["real"]
    else:
        kind, _, name = llm.partition(":")
        what_en = behaviours_en.get(name, "")
        what = BEHAVIOURS_ES[name] if lang == "es" else what_en
        what = what or llm
        why = brk.stand_in_why.get(lang)
        if why:
            text = t["stand_in"].format(llm=llm, what=what, why=why)
        else:
            text = t["stand_in_nowhy"].format(llm=llm, what=what)
    if brk.ci_llm != llm:
        text += "\n\n" + t["ci"].format(ci=brk.ci_llm)
    return text + "\n"


def _run_fragment(brk: Break, lang: str) -> str:
    t = TEXT[lang]
    alias, question, llm, timeout = brk.alias, brk.input, brk.llm, brk.timeout_s
    flags = [str(f) for f in brk.flags]
    timeout_s = f"{timeout:g} s"
    shown_flags = _code(" ".join(flags)) if flags else t["none"]
    agent = ["python", "-m", "miniagent", "ask", question, "--trace", "trace.jsonl", "--json", "--llm", llm, *flags]
    agent_cmd = " ".join(shlex.quote(a) for a in agent)
    needs = brk.needs
    shown_needs = ", ".join(f"`{k}` ≥ {n}" for k, n in needs.items()) or t["none"]
    by_hand = ["python", "-m", "miniagent.lab.harness", "--timeout", f"{timeout:g}",
               *(f"--needs={k}={n}" for k, n in needs.items()),
               "--trace", f"runs/{alias}-trace.jsonl", "--out", f"runs/{alias}-by-hand", "--",
               "python", "-m", "miniagent", "ask", question, "--llm", llm, *flags]
    by_hand_cmd = " ".join(shlex.quote(a) for a in by_hand)
    return (
        f"{t['run_intro']}\n\n"
        "```bash\n"
        f"{t['you_line']}\n"
        f"invoke predict {alias} --learner {t['you']}{t['lang_flag']}\n"
        "```\n\n"
        f"{t['run_fill'].format(timeout=timeout_s)}\n\n"
        "```bash\n"
        f"invoke exp {alias} --learner {t['you']}\n"
        "```\n\n"
        f"{t['run_loop'].format(alias=alias)}\n\n"
        "```bash\n"
        f"invoke break {alias}\n"
        f"invoke watch {alias}\n"
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


def _index_fragment(entries: list[tuple[str, Break | None]], lang: str, prefix: str = "") -> str:
    t = TEXT[lang]
    rows = [t["idx_head"], "|---|---|---|---|"]
    for break_id, brk in entries:
        if brk is None:
            rows.append(f"| [`{break_id}`]({prefix}{break_id}.md) | ? | ? | ? |")
            continue
        model = t["idx_real"] if brk.real_model else t["idx_stand"].format(llm=brk.llm)
        rows.append(f"| [`{break_id}`]({prefix}{break_id}.md) | {_cell(brk.title[lang])} | {_cell(brk.removes[lang])} "
                    f"| {model} |")
    return "\n".join(rows) + "\n"


RESULTS = section("docs_results")


def _results_fragment(data: dict, lang: str) -> str:
    """The measured table of a break, in one language, from ``docs_results/<id>.json``."""
    t = RESULTS[lang]

    def cells(r: dict) -> list[str]:
        calls = ", ".join(f"{tool} ×{n}" for tool, n in sorted((r.get("tool_calls_by_tool") or {}).items())) or "0"
        wall = number(r["wall_s"], lang, ".1f")
        if r.get("kill_latency_s") is not None:
            wall += " (" + t["killed"].format(latency=number(r["kill_latency_s"], lang, ".2f")) + ")"
        final = r.get("final_answer")
        final = "“" + _cell(final) + "”" if final else t["none"]
        return [f"`{r['outcome']}`", f"`{r['stop_reason']}`" if r.get("stop_reason") else t["none"], wall,
                f"{r['cpu_mean']:.0f}", f"{r['cpu_max']:.0f}", f"{r['rss_max_mb']:.0f}", calls,
                str(r["identical_calls"]), str(r["tool_errors"]), str(r["turns"]), final, str(len(r["processes_left"]))]

    b, f = data["broken"], data["fixed"]
    flags = " ".join(data.get("flags") or [])
    intro = t["intro"].format(
        when=data["measured_at"].replace("T", " "), cores=data["cores"], model=data["llm"],
        stand_in="" if data["real_model"] else t["stand_in"], timeout=f"{data['timeout_s']:g}",
        input=data["input"], flags=t["flags"].format(flags=flags) if flags else "",
        others_b=f"{b.get('other_cpu_mean', 0):.0f}", others_f=f"{f.get('other_cpu_mean', 0):.0f}",
        busy=t["busy"] if b.get("machine_busy") or f.get("machine_busy") else "")
    lines = [intro, "", t["head"], "|---|---|---|"]
    lines += [f"| {label} | {cb} | {cf} |" for label, cb, cf in zip(t["rows"], cells(b), cells(f))]
    lines += ["", f"![{t['alt']}](../assets/results/{data['id']}.svg)", ""]
    if data.get("samples_note"):
        lines += [f"<small>{t['note']}</small>", ""]
    return "\n".join(lines)


SUMMARY = section("docs_summary")


def _summary_fragment(results: list[dict], lang: str) -> str:
    """Lab 03's table: every break's latest measured pair, in one language."""
    t = SUMMARY[lang]
    lines = [t["head"], "|---|---|---|---|---|---|"]
    for r in results:
        b, f = r["broken"], r["fixed"]
        model = r["llm"] + ("" if r["real_model"] else t["stand_in"])
        lines.append(f"| [{r['id']}](../breaks/{r['id']}.md) | `{model}` | {b['outcome']} ({b['stop_reason'] or '—'}) | "
                     f"{f['outcome']} ({f['stop_reason'] or '—'}) | {b['cpu_mean']:.0f} / {f['cpu_mean']:.0f} | "
                     f"{len(b['processes_left'])} / {len(f['processes_left'])} |")
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> bool:
    """Write only when the content changes (keeps mtimes stable for serve)."""
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        return False
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return True


def _placeholders(break_id: str) -> dict[str, str]:
    """The fragments of a break whose metadata is not written yet: the page still builds, and says so."""
    log.info("generate: %s has no break.toml; writing placeholder fragments", break_id)
    files = {}
    for lang in LANGS:
        missing = TEXT[lang]["missing"].format(id=break_id)
        files[f"title.{lang}.md"] = "# " + TEXT[lang]["heading"].format(num=number_of(break_id),
                                                                        title=alias_of(break_id)) + "\n"
        for name in ("cause", "hints", "model", "run"):
            files[f"{name}.{lang}.md"] = missing
    files["symptom.md"] = TEXT["en"]["missing"].format(id=break_id)
    files["symptom.es.md"] = TEXT["es"]["missing"].format(id=break_id)
    return files


def generate(root: Path) -> list[Path]:
    """Write every fragment under ``root / OUT``; return the files that changed."""
    behaviours_en = _behaviours_en()
    out_root = root / OUT
    changed: list[Path] = []
    entries: list[tuple[str, Break | None]] = []
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
            files.update(_placeholders(folder.name))
            entries.append((folder.name, None))
        else:
            brk = Break.load(folder)  # the catalogue's own parser: strict, both languages of every text
            entries.append((folder.name, brk))
            for lang in LANGS:
                files[f"title.{lang}.md"] = "# " + TEXT[lang]["heading"].format(
                    num=number_of(folder.name), title=brk.title[lang]) + "\n"
                files[f"cause.{lang}.md"] = brk.hidden_cause[lang] + "\n"
                files[f"hints.{lang}.md"] = _hints_fragment(brk, lang)
                files[f"model.{lang}.md"] = _model_fragment(brk, lang, behaviours_en)
                files[f"run.{lang}.md"] = _run_fragment(brk, lang)
            files["symptom.md"] = _symptom_fragment(brk, "en")
            files["symptom.es.md"] = _symptom_fragment(brk, "es")
            measured = root / "docs_results" / f"{folder.name}.json"
            if measured.is_file():
                results = json.loads(measured.read_text(encoding="utf-8"))
                if "samples" in results.get("broken", {}):
                    for lang in LANGS:
                        files[f"results.{lang}.md"] = _results_fragment(results, lang)
        for name, text in files.items():
            if _write(out / name, text):
                changed.append(out / name)
    measured = [json.loads(p.read_text(encoding="utf-8")) for p in sorted((root / "docs_results").glob("[0-9][0-9]-*.json"))]
    for lang in LANGS:
        path = out_root / f"index.{lang}.md"
        if _write(path, _index_fragment(entries, lang)):
            changed.append(path)
        path = out_root / f"index-home.{lang}.md"  # the same table, linked from the site's home page
        if _write(path, _index_fragment(entries, lang, prefix="breaks/")):
            changed.append(path)
        path = out_root / f"summary.{lang}.md"
        if _write(path, _summary_fragment(measured, lang)):
            changed.append(path)
    return changed


# --------------------------------------------------------------------------
# MkDocs events
# --------------------------------------------------------------------------


def _root(config: Any) -> Path:
    return Path(config["config_file_path"]).resolve().parent


# Before any page is read: pymdownx.snippets has check_paths: true, so every fragment must exist by then.
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
