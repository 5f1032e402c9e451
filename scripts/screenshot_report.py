"""Screenshots of a run's report.html in headless Chromium: the top of the page and its
plots, for the docs.

    python scripts/screenshot_report.py RUN OUT_PREFIX [--chromium PATH]

writes OUT_PREFIX-top.png (the first screen, 1400 x 900) and OUT_PREFIX-plots.png (the
plots section). Needs the `test` extra (Playwright) and a Chromium
(scripts/setup-chromium.sh).
"""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.integration.browser import FLAGS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("prefix")
    parser.add_argument("--chromium", default=shutil.which("chromium"))
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=args.chromium, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.goto((args.run / "report.html").resolve().as_uri(), wait_until="load")
            page.screenshot(path=f"{args.prefix}-top.png")
            first = page.locator("figure[data-plot]").first.bounding_box()
            last = page.locator("figure[data-plot]").last.bounding_box()
            if first is None or last is None:
                raise SystemExit(f"{args.run}/report.html: no plots to show")
            page.screenshot(path=f"{args.prefix}-plots.png", full_page=True, clip={
                "x": 0, "y": first["y"] - 10, "width": 1400,
                "height": last["y"] + last["height"] - first["y"] + 20})
        finally:
            browser.close()
    print(f"wrote {args.prefix}-top.png and {args.prefix}-plots.png")


if __name__ == "__main__":
    main()
