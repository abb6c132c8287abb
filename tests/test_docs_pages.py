"""Every docs page read as a person reads it, rendered: code spans that close, paragraphs that
start and end as sentences do, and every how-to guide showing a command. (A page once opened with
the tail of another's example and another stopped mid-sentence, an open backtick in its last
line; the site built and every link resolved.)"""

from html.parser import HTMLParser
from pathlib import Path

import markdown
import pytest

DOCS = Path(__file__).resolve().parent.parent / "docs"
PAGES = sorted(DOCS.rglob("*.md"))
GUIDES = sorted((DOCS / "guides").glob("*.md"))
ENDINGS = (".", ":", "!", "?", ")")


class Paragraphs(HTMLParser):
    """Each <p>'s text (code spans as `CODE`, so a stray backtick is the page's own), whether it
    opens with text (rather than code or a link), and the fenced blocks' text."""

    def __init__(self):
        super().__init__()
        self.paragraphs: list[tuple[str, bool]] = []
        self.blocks: list[str] = []
        self._text: list[str] | None = None
        self._opens_with_text = False
        self._tags: list[str] = []
        self._block: list[str] | None = None

    def handle_starttag(self, tag, attrs):
        if tag == "p" and not self._tags:
            self._text, self._opens_with_text = [], None
        elif tag == "pre":
            self._block = []
        elif self._text is not None and self._opens_with_text is None:
            self._opens_with_text = False
        self._tags.append(tag)
        if tag == "code" and self._text is not None:
            self._text.append("CODE")

    def handle_endtag(self, tag):
        self._tags.pop()
        if tag == "p" and self._text is not None and not self._tags:
            self.paragraphs.append(("".join(self._text).strip(), bool(self._opens_with_text)))
            self._text = None
        elif tag == "pre":
            self.blocks.append("".join(self._block))
            self._block = None

    def handle_data(self, data):
        if self._block is not None:
            self._block.append(data)
        if self._text is None or "code" in self._tags:
            return
        if self._opens_with_text is None and data.strip():
            self._opens_with_text = True
        self._text.append(data)


def rendered(page: Path) -> Paragraphs:
    html = markdown.markdown(page.read_text(), extensions=["tables", "admonition", "fenced_code"])
    parsed = Paragraphs()
    parsed.feed(html)
    return parsed


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(DOCS)))
def test_a_page_reads_as_sentences_with_every_code_span_closed(page):
    for text, opens_with_text in rendered(page).paragraphs:
        if not text:  # a picture alone
            continue
        assert "`" not in text, f"an unclosed code span: {text[:200]}"
        if opens_with_text and text and text[0].isalpha():
            assert not text[0].islower(), f"a paragraph that starts mid-sentence: {text[:120]}"
        assert text.endswith(ENDINGS) or text.endswith("CODE"), f"a paragraph that stops mid-sentence: {text[-120:]}"


@pytest.mark.parametrize("page", GUIDES, ids=lambda p: p.name)
def test_every_guide_shows_a_command(page):
    blocks = rendered(page).blocks
    assert any(line.strip() for block in blocks for line in block.splitlines()), f"{page.name} shows no command"


def test_the_resume_guide_shows_the_resume_command_first():
    blocks = rendered(DOCS / "guides" / "resume.md").blocks
    assert blocks and blocks[0].startswith("raypex train --resume runs/")


def test_the_checks_see_what_broke_the_pages_once():
    """The three ways pages were broken, each found."""
    broken = Paragraphs()
    broken.feed(markdown.markdown("whole one is ckpt-1; continue it with: ...`.\n\nthe newest `ckpt\n"))
    (first, _), (second, _) = broken.paragraphs
    assert first[0].islower() and "`" in first and not second.endswith(ENDINGS)
