"""The documentation site: every page exists in both languages and it builds strictly.

Pages use the mkdocs-static-i18n *suffix* layout: ``page.md`` is English and
``page.es.md`` is its Spanish twin.  A page without its twin would silently
fall back to the other language, so it is a test failure here.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
import urllib.parse
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
SECOND_LANGUAGE = "es"


def _twin(page: Path) -> Path:
    """``x.md`` <-> ``x.es.md``."""
    suffix = f".{SECOND_LANGUAGE}.md"
    if page.name.endswith(suffix):
        return page.with_name(page.name[: -len(suffix)] + ".md")
    return page.with_name(page.name[: -len(".md")] + suffix)


def _pages() -> list[Path]:
    return sorted(DOCS.rglob("*.md"))


def test_docs_exist() -> None:
    assert (DOCS / "index.md").is_file(), "docs/index.md is missing"


def test_every_page_has_its_twin() -> None:
    missing = [
        f"{page.relative_to(ROOT)} has no {_twin(page).relative_to(ROOT)}"
        for page in _pages()
        if not _twin(page).is_file()
    ]
    assert not missing, "pages without their other-language twin:\n" + "\n".join(missing)


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (it comes with the 'dev' extra: pip install -e '.[dev]')")
    site = tmp_path / "site"
    # Run from the repository root: pymdownx.snippets resolves included files
    # (base_path ".") relative to the working directory.
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
         "--config-file", str(ROOT / "mkdocs.yml"), "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    # Both languages were built, and the Spanish home page is really Spanish.
    assert (site / "index.html").is_file()
    spanish_home = site / SECOND_LANGUAGE / "index.html"
    assert spanish_home.is_file(), "the Spanish site was not built"
    assert 'lang="es"' in spanish_home.read_text(encoding="utf-8")


def _tables():
    sys.path.insert(0, str(ROOT / "docs_hooks"))
    import tables

    return tables


@pytest.mark.parametrize("lang", ["en", "es"])
def test_the_generated_tables_have_a_row_for_every_guard_stop_reason_and_lab(lang: str) -> None:
    """The guard, stop-reason and labs tables are generated; a guard, a stop reason or a lab without its row fails."""
    import inspect

    from miniagent.agent import grounding, guards, scope
    from miniagent.lab.words import words

    tables = _tables()
    said = words(lang)
    assert set(said["stop_reasons"]) == tables.stop_reasons() == {
        "answered", "max_turns", "max_tool_calls", "call_budget", "wall_clock", "auto_continue_limit",
        "token_budget", "format_errors", "stuck", "out_of_grammar", "invalid_input", "model_failed", "context_full",
        "cancelled", "server_failed"}
    classes = {name for module in (guards, grounding, scope) for name, cls in inspect.getmembers(module, inspect.isclass)
               if cls.__module__ == module.__name__ and cls.__name__ not in ("Grounds",)}
    # Guards the loop carries without a class of their own: the plan's budget (in ToolCallCap), the per-tool
    # timeout (WallClock.tool_timeout) and the final round (GrammarTutor.final_round).
    assert set(said["guards"]) == classes | {"PlanBudget", "ToolTimeout", "FinalRound"}
    table = tables.guards_table(lang)
    for row in said["guards"].values():
        assert row["name"] in table and (row.get("stop") is None or row["stop"] in tables.stop_reasons())
        assert row.get("setting") is None or f"`{row['setting']}`" in table
    # theory 05's diagram: every guard in its layer, each line inside its box
    diagram = tables.layers_diagram(lang).splitlines()[1:-1]
    assert len({len(line) for line in diagram}) == 1, "a box edge out of line"
    flat = " ".join(line.strip("| +-") for line in diagram)
    flat = " ".join(flat.replace("|", " ").split())
    for key, row in said["guards"].items():
        name = " ".join((row["name"][0].lower() + row["name"][1:]).split())
        assert name in flat or " ".join(row["name"].split()) in flat, (key, flat)
    assert flat.index(" ".join(said["guards"]["WallClock"]["name"].split())) < flat.index(said["tables"]["layer2"])
    labs = sorted(p.name for p in (DOCS / "labs").glob("[0-9][0-9]-*.md") if p.name.count(".") == 1)
    listed = tables.labs_list(ROOT, lang)
    assert [line.split("](labs/")[1].rstrip(")") for line in listed.splitlines()] == labs and len(labs) == 4
    planted = {**said["stop_reasons"]}
    planted.pop("stuck")
    original = said["stop_reasons"]
    said["stop_reasons"] = planted  # a stop reason without its row: the table refuses to be drawn
    try:
        with pytest.raises(KeyError, match="no row for \\['stuck'\\]"):
            tables.stop_reasons_table(lang)
    finally:
        said["stop_reasons"] = original


@pytest.mark.parametrize("page", ["03-failure-mode-tour.md", "03-failure-mode-tour.es.md"])
def test_the_tour_predicts_every_break(page: str) -> None:
    """Lab 03's loop names each break by its alias: a break added to breaks/ must be added there too."""
    import re

    text = (DOCS / "labs" / page).read_text(encoding="utf-8")
    loop = re.search(r"for b in (.*?); do", text, re.S).group(1)
    named = set(loop.replace("\\", " ").split())
    aliases = {folder.name.split("-", 1)[1] for folder in (ROOT / "breaks").iterdir() if folder.is_dir()}
    assert named == aliases


@pytest.fixture(scope="module")
def built_site(tmp_path_factory) -> Path:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed")
    site = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--quiet", "--config-file", str(ROOT / "mkdocs.yml"),
                    "--site-dir", str(site)], cwd=ROOT, check=True, capture_output=True, timeout=300)
    return site


SWITCHER_LINK = re.compile(r'<a href="([^"]+)" hreflang="(en|es)" class="md-select__link">')


def test_every_pages_language_switcher_leads_to_its_twin_and_back(built_site):
    """Every built page, both ways: each language link opens a page in that language, whose link back opens this
    page. The browser check clicks the switcher on a page of each kind; this one reads every page's links."""
    pages = sorted(p for p in built_site.rglob("index.html") if "assets" not in p.parts)
    assert len(pages) >= 50

    def url_of(page: Path) -> str:
        return "/" + (page.parent.relative_to(built_site).as_posix() + "/").lstrip("./")

    def opened(url: str, href: str) -> Path:
        path = urllib.parse.urljoin(url, href).split("#")[0]
        return built_site / path.lstrip("/") / "index.html"

    def links(page: Path) -> dict[str, str]:
        found = {lang: href for href, lang in SWITCHER_LINK.findall(page.read_text(encoding="utf-8"))}
        assert set(found) == {"en", "es"}, f"{url_of(page)}: the switcher offers {sorted(found)}"
        return found

    for page in pages:
        here = re.search(r'<html lang="(en|es)"', page.read_text(encoding="utf-8")).group(1)
        for lang, href in links(page).items():
            twin = opened(url_of(page), href)
            assert twin.is_file(), f"{url_of(page)}: {lang} leads to {href}, which was not built"
            assert f'<html lang="{lang}"' in twin.read_text(encoding="utf-8"), f"{url_of(page)} -> {href}"
            assert opened(url_of(twin), links(twin)[here]) == page, f"{url_of(page)} -> {href} does not lead back"


def _break_pages() -> list[str]:
    return sorted(p.name.removesuffix(".md") for p in (DOCS / "breaks").glob("[0-9][0-9]-*.md")
                  if not p.name.endswith(".es.md"))


@pytest.mark.parametrize("lang", ["en", "es"])
def test_break_pages_fold_the_symptom_the_results_and_the_cause(built_site, lang):
    """Predict first: what a break does is folded (closed <details>) until the learner opens it,
    and no heading inside a fold reaches the table of contents."""
    import re

    for name in _break_pages():
        html = (built_site / ("es/" if lang == "es" else "") / "breaks" / name / "index.html").read_text(encoding="utf-8")
        article = html[html.index("<article"):html.index("</article>")]
        folds = re.findall(r"<details class=\"(\w+)\">(.*?)</details>", article, re.S)
        kinds = [kind for kind, _ in folds]
        assert "danger" in kinds and "example" in kinds and "warning" in kinds, f"{lang} {name}: {kinds}"
        symptom = next(body for kind, body in folds if kind == "danger")
        results = next(body for kind, body in folds if kind == "example")
        assert "<table>" in symptom and "<table>" in results, f"{lang} {name}"
        assert "docs-results" in results, f"{lang} {name}: the measured table is inside the fold"
        assert all("<h" not in body for _, body in folds), f"{lang} {name}: a heading inside a fold"
        # nothing folded is shown unfolded as well: the chart, the symptom table, the measured table
        outside = re.sub(r"<details.*?</details>", "", article, flags=re.S)
        assert "assets/results/" not in outside and "What you see" not in outside and "Lo que ves" not in outside
        assert "stop_reason</td>" not in outside, f"{lang} {name}: a measured table outside its fold"
        assert "<details open" not in article, f"{lang} {name}: a fold is open by default"


# --------------------------------------------------------------------------
# Spanish all the way
# --------------------------------------------------------------------------

# One term per concept, and the calques a native reader flagged (they must not come back).
SPANISH_NEVER = {
    "rotura": "a break is an «avería»",
    "plazo por herramienta": "the per-call timeout is the «plazo por llamada»",
    "tiempo límite por herramienta": "the per-call timeout is the «plazo por llamada»",
    "plan B": "the graceful fallback is the «mensaje de respaldo»",
    "resultado correcto": "a successful tool result is a «resultado sin error»",
    "sustituto con nombre": "a named stand-in is a «sustituto programado»",
    "En los huesos": "a calque of 'bare bones'",
    "vestir una conjetura": "a calque",
    "el vencimiento vuelve": "a calque",
    "Una sentada": "a calque",
    "distinguir «ha respondido nada»": "needs «no»",
}


def _spanish_texts() -> list[tuple[str, str]]:
    import tomllib

    sys.path.insert(0, str(ROOT))
    from docs_hooks.generate import generate

    generate(ROOT)
    out = [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in sorted(DOCS.rglob("*.es.md"))]
    out += [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8"))
            for p in sorted((ROOT / "build" / "generated").rglob("*.es.md"))]
    out += [("learners/_template/notebook.es.md",
             (ROOT / "learners" / "_template" / "notebook.es.md").read_text(encoding="utf-8"))]
    for path in sorted((ROOT / "breaks").glob("*/break.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))

        def spanish(value):
            if isinstance(value, dict):
                for key, item in value.items():
                    yield from ([item] if key == "es" and isinstance(item, str) else
                                item if key == "es" and isinstance(item, list) else spanish(item))
        out.append((str(path.relative_to(ROOT)), "\n".join(spanish(data))))
    return out


def test_spanish_uses_one_term_per_concept():
    import re

    problems = []
    for where, text in _spanish_texts():
        for phrase, why in SPANISH_NEVER.items():
            if re.search(rf"\b{re.escape(phrase)}", text, re.I if phrase.islower() else 0):
                problems.append(f"{where}: «{phrase}» ({why})")
    assert not problems, "\n".join(problems)


def test_no_spanish_break_page_shows_english_catalogue_text(built_site):
    """Every catalogue text has its Spanish version, and the Spanish pages show it (no English fallback,
    no "outcome · resultado" labels)."""
    import html
    import re
    import tomllib

    for name in _break_pages():
        data = tomllib.loads((ROOT / "breaks" / name / "break.toml").read_text(encoding="utf-8"))
        raw = (built_site / "es" / "breaks" / name / "index.html").read_text(encoding="utf-8")
        page = " ".join(html.unescape(re.sub(r"<[^>]+>", "", raw)).split())
        english = [data["removes"]["en"], data["hidden_cause"]["en"], *data["hints"]["en"],
                   *(texts["en"] for texts in data["symptom"].values())]
        if "stand_in_why" in data["run"]:
            english.append(data["run"]["stand_in_why"]["en"])
        plain = lambda text: " ".join(text.replace("`", "").replace("*", "").split())[:50]  # noqa: E731
        for text in english:
            assert plain(text) not in page, f"{name}: English catalogue text on the Spanish page: {plain(text)}"
        for text in (data["hidden_cause"]["es"], *(texts["es"] for texts in data["symptom"].values())):
            assert plain(text) in page, f"{name}: {plain(text)}"
        for mixed in (" · resultado", "broken · roto", "(stand-in · sustituto)", "en inglés, tal como figura"):
            assert mixed not in page, f"{name}: {mixed}"
    index = html.unescape((built_site / "es" / "breaks" / "index.html").read_text(encoding="utf-8"))
    assert "la deduplicación de llamadas idénticas" in index and "identical-call dedup" not in index
