"""Rendering report.html in headless Chromium (Debian's, driven by Playwright)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

# Without the background-networking flags Chromium keeps dialling out on this
# machine's closed network; the page itself loads nothing from anywhere.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def render(page_path: Path, chromium: Path, screenshot: Path | None = None) -> dict[str, Any]:
    """Open the page; the script errors, failed requests and the plots it shows."""
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
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            plots = page.eval_on_selector_all(
                "figure[data-plot]",
                """els => els.map(e => ({key: e.dataset.plot, drawn: e.dataset.drawn,
                    svg: e.querySelectorAll('svg').length,
                    width: e.querySelector('svg') ? e.querySelector('svg')
                        .getBoundingClientRect().width : 0,
                    paths: e.querySelectorAll('svg path').length}))""")
            title = page.title()
            if screenshot is not None:
                page.screenshot(path=str(screenshot), full_page=False)
        finally:
            browser.close()
    return {"errors": errors, "requests": [r for r in requests
                                           if not r.startswith(("file:", "data:"))],
            "plots": plots, "title": title}
