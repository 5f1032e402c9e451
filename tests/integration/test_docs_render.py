"""The docs site, built strictly, rendered in headless Chromium (Debian's, driven by
Playwright) from a local HTTP server: the home page (the README) and the plan reference
show the navigation in the README's order, run no failing script and load nothing from
elsewhere. With SERVEDIFF_SCREENSHOT_DIR set, their screenshots are written there
(docs/site-home.png and docs/site-plans.png were made so)."""

from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Iterator
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tests.integration.browser import FLAGS
from tests.unit.test_docs_site import ROOT, build

pytestmark = pytest.mark.integration

# the navigation of mkdocs.yml, in the README's order
NAV = ["Home", "The demo", "Plans, every setting", "Where drift starts", "Signatures",
       "What a flag costs", "Reports", "The summary", "Engines", "On a Ray cluster",
       "Validation on real engines", "Benchmarks", "Reliability", "Architecture",
       "Development"]


class Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("site") / "site"
    done = build(ROOT / "mkdocs.yml", folder)
    assert done.returncode == 0, done.stderr
    server = ThreadingHTTPServer(("127.0.0.1", 0),
                                 functools.partial(Quiet, directory=str(folder)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()
    thread.join()


def open_page(url: str, chromium: Path, shot: Path) -> dict[str, Any]:
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=str(chromium), args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.on("pageerror", lambda exc: errors.append(str(exc)))
            page.on("console", lambda msg: errors.append(msg.text)
                    if msg.type == "error" else None)
            page.on("request", lambda req: requests.append(req.url))
            page.goto(url, wait_until="networkidle")
            nav = page.eval_on_selector_all(
                "nav a", "els => els.filter(e => e.offsetParent !== null)"
                ".map(e => e.textContent.trim())")
            heading = page.eval_on_selector("h1", "e => e.textContent.trim()")
            page.screenshot(path=str(shot), full_page=False)
        finally:
            browser.close()
    origin = "/".join(url.split("/")[:3])
    return {"errors": errors, "nav": nav, "heading": heading,
            "elsewhere": [r for r in requests if not r.startswith(origin)]}


@pytest.mark.parametrize(("page", "heading", "name"), [
    ("", "servediff", "site-home.png"),
    ("plans/", "Plans: the reference", "site-plans.png")])
def test_the_home_page_and_the_plan_reference_render_with_their_navigation(
        site: str, chromium: Path, tmp_path: Path, page: str, heading: str, name: str):
    shot = tmp_path / name
    seen = open_page(site + page, chromium, shot)
    assert seen["errors"] == [] and seen["elsewhere"] == []
    assert seen["heading"] == heading
    shown = [x for x in seen["nav"] if x in NAV]
    assert shown == NAV, seen["nav"]
    assert shot.stat().st_size > 10_000
    if target := os.environ.get("SERVEDIFF_SCREENSHOT_DIR"):
        shutil.copyfile(shot, Path(target) / name)
