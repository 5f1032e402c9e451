"""report.html: one self-contained page (no network) with the report and its plots.

Rendered from a scrubbed summary and the scrubbed Markdown report. Every piece
of text that came from the evidence (model outputs, errors, log tails, tags)
is HTML-escaped; the plots are SVG drawn by matplotlib, which escapes the
text it writes. The page loads nothing: no script source, no stylesheet link,
no font, no image URL, and a content security policy that forbids them.
"""

from __future__ import annotations

import html
import re

from servediff.analysis.findings import Summary
from servediff.report.plots import PLOTS

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 72em; color: #222; }
h1 { font-size: 1.6em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
figure { margin: 1.5em 0; } figcaption { font-weight: 600; margin-bottom: .4em; }
figure svg { max-width: 100%; height: auto; }
table { border-collapse: collapse; margin: .6em 0; }
td, th { border: 1px solid #ccc; padding: 2px 8px; text-align: left; vertical-align: top; }
code { background: #f4f4f4; padding: 0 3px; }
.missing { color: #777; font-style: italic; }
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:"


# a file of the bundle named in the report: a link to it (report.html lies at the root)
EVIDENCE_PATH = re.compile(
    r"(?<![\w/.])((?:cells|loads|logs|partial)/[\w.\-/]+\.(?:json|jsonl|log|txt))")


def _inline(text: str) -> str:
    """Escaped text with the report's inline Markdown: `code`, **bold**, _emphasis_, and
    links to the bundle's files named outside code."""
    parts = re.split(r"(`[^`]+`)", text)
    out = []
    for i, part in enumerate(parts):
        if i % 2:
            out.append(f"<code>{html.escape(part[1:-1])}</code>")
            continue
        part = html.escape(part)
        part = re.sub(r"\*\*([^*]+)\*\*", r"<strong>\1</strong>", part)
        part = re.sub(r"(?<!\w)_(?=\S)(.+?)(?<=\S)_(?!\w)", r"<em>\1</em>", part)
        out.append(EVIDENCE_PATH.sub(r'<a href="\1">\1</a>', part))
    return "".join(out)


def markdown_to_html(markdown: str) -> str:
    """The subset of Markdown report.md uses: headings, lists, tables, paragraphs."""
    out: list[str] = []
    table: list[list[str]] = []
    items: list[str] = []

    def flush() -> None:
        if table:
            head, *rows = [r for r in table if not all(set(c) <= {"-", " "} for c in r)]
            out.append("<table><tr>" + "".join(f"<th>{_inline(c)}</th>" for c in head)
                       + "</tr>" + "".join("<tr>" + "".join(f"<td>{_inline(c)}</td>" for c in r)
                                           + "</tr>" for r in rows) + "</table>")
            table.clear()
        if items:
            out.append("<ul>" + "".join(f"<li>{_inline(i)}</li>" for i in items) + "</ul>")
            items.clear()

    for line in markdown.splitlines():
        if line.startswith("|"):
            table.append([c.strip() for c in line.strip().strip("|").split("|")])
            continue
        if line.startswith("- "):
            items.append(line[2:])
            continue
        flush()
        if m := re.match(r"(#{1,4}) (.*)", line):
            level = len(m.group(1))
            out.append(f"<h{level}>{_inline(m.group(2))}</h{level}>")
        elif line.strip():
            out.append(f"<p>{_inline(line)}</p>")
    flush()
    return "\n".join(out)


def render_html(summary: Summary, markdown: str, title: str) -> str:
    figures = []
    for key, (caption, draw, missing) in PLOTS.items():
        svg = draw(summary)
        body = svg if svg else f'<p class="missing">{html.escape(missing)}</p>'
        figures.append(f'<figure id="plot-{key}" data-plot="{key}" '
                       f'data-drawn="{"yes" if svg else "no"}">'
                       f"<figcaption>{html.escape(caption)}</figcaption>{body}</figure>")
    body = markdown.split("\n", 1)[1] if markdown.startswith("# ") else markdown
    # The headline findings first, then the plots, then the rest of the report.
    head, sep, rest = body.partition("\n## What you saw")
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
        f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
        f"<h1>{html.escape(title)}</h1>" + markdown_to_html(head)
        + "<h2>Plots</h2>" + "\n".join(figures) + "\n"
        + markdown_to_html(sep.lstrip("\n") + rest) + "</body></html>\n"
    )
