"""The built site, checked as a person would: headless Chromium follows the language switcher.

Needs Debian's chromium (`apt-get install chromium`; .ci/run installs it). Playwright drives
the system browser, so nothing is downloaded at run time. `invoke docs-check` runs this file.
"""

from __future__ import annotations

import functools
import http.server
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
SCREENSHOTS = ROOT / "build" / "docs-check"
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (apt-get install chromium)")


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


def test_every_break_page_shows_its_measured_results_chart(site_url, browser):
    page = browser.new_page()
    for number in range(10):
        page.goto(f"{site_url}/breaks/")
        link = page.locator(f"a[href*='0{number}-']").first
        link.click()
        images = page.locator("img[src*='assets/results/']")
        if images.count():  # present once `invoke docs-results` has measured the break
            assert images.first.evaluate("img => img.complete && img.naturalWidth > 0"), page.url
