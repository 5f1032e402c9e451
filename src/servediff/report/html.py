"""report.html: one self-contained page (no network) with the report and its plots.

Rendered from a scrubbed summary and the scrubbed Markdown report, parsed by
markdown-it-py (CommonMark and tables; raw HTML, links and images off). Every piece
of text that came from the evidence (model outputs, errors, log tails, tags)
is HTML-escaped; the plots are SVG drawn by matplotlib, which escapes the
text it writes. The page loads nothing: no script source, no stylesheet link,
no font, no image URL, and a content security policy that forbids them.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from markdown_it import MarkdownIt
from markdown_it.common.utils import escapeHtml
from markdown_it.renderer import RendererProtocol
from markdown_it.token import Token
from markdown_it.utils import EnvType, OptionsDict

from servediff.analysis.findings import Summary
from servediff.report.markdown import SAW
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


def _text(renderer: RendererProtocol, tokens: Sequence[Token], idx: int, options: OptionsDict,
          env: EnvType) -> str:
    """Plain text, escaped, with the bundle's files it names (outside code) as links."""
    text: str = escapeHtml(tokens[idx].content)
    return EVIDENCE_PATH.sub(r'<a href="\1">\1</a>', text)


def _parser() -> MarkdownIt:
    """CommonMark with tables, as report.md is written. Raw HTML is escaped, and links,
    images and autolinks are off: text from the evidence (model outputs, errors, log
    tails) cannot make the page load or point anywhere."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    md.disable(["link", "image", "autolink", "html_inline", "html_block"])
    md.add_render_rule("text", _text)
    return md


MARKDOWN = _parser()


def markdown_to_html(markdown: str) -> str:
    page: str = MARKDOWN.render(markdown)
    return page


def _split_at(markdown: str, title: str) -> tuple[list[Token], list[Token]]:
    """report.md's blocks before the second-level section `title`, and from it on."""
    tokens = MARKDOWN.parse(markdown)
    for i, token in enumerate(tokens[:-1]):
        if (token.type == "heading_open" and token.tag == "h2"
                and tokens[i + 1].content == title):
            return tokens[:i], tokens[i:]
    return tokens, []


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
    head, rest = _split_at(body, SAW)

    def render(tokens: list[Token]) -> str:
        out: str = MARKDOWN.renderer.render(tokens, MARKDOWN.options, {})
        return out
    return page(title, render(head) + "<h2>Plots</h2>" + "\n".join(figures) + "\n"
                + render(rest))


def page(title: str, body: str) -> str:
    """A whole HTML page: the report's style, its Content-Security-Policy (nothing loaded
    from elsewhere), `title` as its title and first heading, then `body`."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f'<meta http-equiv="Content-Security-Policy" content="{CSP}">'
            f"<title>{html.escape(title)}</title><style>{STYLE}</style></head><body>"
            f"<h1>{html.escape(title)}</h1>" + body + "</body></html>\n")
