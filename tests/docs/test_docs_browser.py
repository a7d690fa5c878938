"""The built site, checked as a person would: headless Chromium reads it in Spanish, opens the folds,
searches, and follows the language switcher on a page of each kind.

Needs Debian's chromium (`apt-get install chromium`; .ci/run installs it). Playwright drives
the system browser, so nothing is downloaded at run time. `invoke docs-check` runs this file and
leaves a screenshot of each step of the Spanish walk in build/docs-check/ (look at them).
"""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = ROOT / "build" / "docs-check"
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")]


@pytest.fixture(scope="module")
def site_url(tmp_path_factory):
    site = tmp_path_factory.mktemp("site")
    subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
                   cwd=ROOT, check=True, env={"NO_MKDOCS_2_WARNING": "1", "PATH": "/usr/bin:/bin"})
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


@pytest.fixture(scope="module")
def browser():
    playwright = pytest.importorskip("playwright.sync_api")
    with playwright.sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"])
        yield chromium
        chromium.close()


def test_language_switcher_takes_an_english_break_page_to_its_spanish_twin(site_url, browser):
    page = browser.new_page()
    page.goto(f"{site_url}/breaks/00-no-cap/")
    assert page.locator("html").get_attribute("lang") == "en"
    assert "Agent without termination" in page.content()
    # As a person would: open the language menu, then pick Español.
    page.locator(".md-header__option .md-select").first.hover()
    page.get_by_role("link", name="Español").click()
    page.wait_for_url("**/es/breaks/00-no-cap/")
    assert page.locator("html").get_attribute("lang") == "es"
    assert "Agente sin terminación" in page.content()
    assert page.locator("pre code").count() >= 2, "the diff and the fix are on the Spanish page too"
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SCREENSHOTS / "break-00-es.png"), full_page=False)
    assert (SCREENSHOTS / "break-00-es.png").stat().st_size > 10_000


SUFFIX = {"en": ".svg", "es": ".es.svg"}


@pytest.mark.parametrize("lang", sorted(SUFFIX))
def test_every_break_page_shows_its_measured_results_chart(site_url, browser, lang):
    """Each break the index links to shows its CPU chart, in the page's language, once its fold is opened."""
    page = browser.new_page()
    home = f"{site_url}/breaks/" if lang == "en" else f"{site_url}/es/breaks/"
    page.goto(home)
    every_link = page.locator("article a").evaluate_all("links => links.map(a => a.href.split('#')[0])")
    hrefs = sorted({href for href in every_link if re.fullmatch(re.escape(home) + r"\d\d-[a-z-]+/", href)})
    assert len(hrefs) == len(list(ROOT.glob("breaks/*/break.toml"))) == 17, hrefs
    for href in hrefs:
        page.goto(href)
        images = page.locator("img[src*='assets/results/']")
        assert images.count() == 1, f"{href}: one measured results chart (invoke docs-results draws it)"
        # The Spanish build serves <id>.es.svg under the English name (the i18n plugin's suffix layout)
        chart = ROOT / "docs" / "assets" / "results" / (href.rstrip("/").rsplit("/", 1)[1] + SUFFIX[lang])
        served = page.request.get(images.first.evaluate("img => img.src")).body()
        assert served == chart.read_bytes(), f"{href}: the chart in the page's language ({chart.name})"
        assert not images.first.is_visible(), f"{href}: the chart waits in its fold"
        page.locator("details.example summary").first.click()
        images.first.wait_for(state="visible")
        assert images.first.evaluate("img => img.complete && img.naturalWidth > 0"), href


def _shot(page, name: str, element=None) -> Path:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / name
    (element or page).screenshot(path=str(path))
    assert path.stat().st_size > 5_000, path
    return path


def test_a_spanish_reader_walks_home_break_00_a_hint_and_the_folded_results(site_url, browser):
    """Home (ES) -> break 00 (ES) -> hint 1 -> the measured results, clicked as a person would,
    with a screenshot of each step in build/docs-check/."""
    page = browser.new_page(viewport={"width": 1280, "height": 900})
    page.goto(f"{site_url}/es/")
    assert page.locator("html").get_attribute("lang") == "es"
    assert "Arranque en tres líneas" in page.content()
    _shot(page, "1-home-es.png")

    page.get_by_role("link", name="00 · Sin topes").first.click()
    page.wait_for_url("**/es/breaks/00-no-cap/")
    assert page.locator("h1").first.inner_text().startswith("Avería 00")
    folds = page.locator("article details")
    assert folds.count() >= 6 and page.locator("article details[open]").count() == 0, "everything folded at first"
    _shot(page, "2-break-00-es.png")

    hint = page.locator("article details.tip").first
    assert not hint.locator("p").first.is_visible()
    hint.locator("summary").click()
    assert hint.get_attribute("open") is not None and hint.locator("p").first.is_visible()
    assert "Pista 1" in hint.locator("summary").inner_text()
    hint.scroll_into_view_if_needed()
    _shot(page, "3-hint-1-es.png", hint)

    results = page.locator("article details.example").first
    chart = results.locator("img")
    assert not chart.is_visible(), "the measured results are folded until opened"
    results.locator("summary").click()
    chart.wait_for(state="visible")
    assert chart.evaluate("img => img.complete && img.naturalWidth > 0")
    assert "con la avería" in results.inner_text() and "broken" not in results.inner_text()
    width = chart.evaluate("img => img.getBoundingClientRect().width")
    natural = chart.evaluate("img => img.naturalWidth")
    assert width >= 0.85 * natural, f"the chart is drawn at {width:.0f} of its {natural} px: its text would shrink"
    svg = page.request.get(chart.evaluate("img => img.src")).text()
    assert "segundos desde el arranque" in svg and "seconds" not in svg, "the chart speaks the page's language"
    results.scroll_into_view_if_needed()
    _shot(page, "4-results-es.png", results)


def test_search_returns_pages_in_the_language_being_read(site_url, browser):
    for lang, prefix, query in (("es", "/es/", "cortacircuitos"), ("en", "/", "breaker")):
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.goto(f"{site_url}{prefix}breaks/")
        page.wait_for_load_state("networkidle")  # the search worker has its index
        page.locator(".md-search__input").first.click()
        page.locator("input.md-search__input").press_sequentially(query, delay=50)
        items = page.locator(".md-search-result__item a")
        items.first.wait_for(state="visible", timeout=30_000)
        hrefs = [items.nth(i).get_attribute("href") for i in range(items.count())]
        assert hrefs
        for href in hrefs:
            is_spanish = "/es/" in href
            assert is_spanish == (lang == "es"), f"searching the {lang} site gave {href}"
        if lang == "es":
            _shot(page, "5-search-es.png")
            target = items.first.evaluate("a => a.href")
            assert target.split("#")[0] != page.url.split("#")[0], f"the first result is this page: {target}"
            items.first.click()
            page.wait_for_url(target)
            assert page.locator("html").get_attribute("lang") == "es", "a result opens the Spanish page"


# A page of each kind (every page's links are read in test_docs.py, which builds the site once without a browser).
KINDS = ["", "setup/", "theory/03-constrained-decoding/", "labs/03-failure-mode-tour/", "breaks/09-orphan-server/", "classroom/", "maintainers/"]


@pytest.mark.parametrize("path", KINDS)
def test_the_language_switcher_works_on_a_page_of_each_kind(site_url, browser, path):
    """The English page switches to its Spanish twin and back, as a person would."""
    page = browser.new_page()
    page.goto(f"{site_url}/{path}")
    for target, lang in (("Español", "es"), ("English", "en")):
        page.locator(".md-header__option .md-select").first.hover()
        page.get_by_role("link", name=target).click()
        page.wait_for_load_state()
        assert page.locator("html").get_attribute("lang") == lang, f"{path}: {target}"
    assert page.url.rstrip("/").endswith(path.rstrip("/")) or not path, f"{path}: came back to {page.url}"
