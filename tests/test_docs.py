"""The documentation site: every page exists in both languages and it builds strictly.

Pages use the mkdocs-static-i18n *suffix* layout: ``page.md`` is English and
``page.es.md`` is its Spanish twin.  A page without its twin would silently
fall back to the other language, so it is a test failure here.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
