"""Every internal link of the built site leads somewhere: each href and src of every HTML page
that is not a URL with a scheme resolves to a file of the site, and its #fragment, if any, to an
id on that page. README.md's relative links are checked against the checkout.

    mkdocs build --strict -d SITE && python docs/check_links.py SITE
"""

from __future__ import annotations

import re
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit


class Page(HTMLParser):
    """The links and the ids of one HTML page."""

    def __init__(self):
        super().__init__()
        self.links: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag, attrs):
        for name, value in attrs:
            if name in ("href", "src") and value:
                self.links.append(value)
            if name == "id" and value:
                self.ids.add(value)


def parsed(path: Path) -> Page:
    page = Page()
    page.feed(path.read_text(errors="replace"))
    return page


def target_file(site: Path, page: Path, link: str) -> tuple[Path | None, str]:
    """The file a relative link names (None: a URL elsewhere) and its fragment."""
    parts = urlsplit(link)
    if parts.scheme or parts.netloc or link.startswith(("mailto:", "data:")):
        return None, ""
    if not parts.path:
        return page, parts.fragment
    base = site if parts.path.startswith("/") else page.parent
    target = (base / unquote(parts.path).lstrip("/")).resolve()
    if target.is_dir():
        target = target / "index.html"
    return target, parts.fragment


def broken_links(site: Path) -> list[str]:
    pages = {path.resolve(): parsed(path) for path in site.rglob("*.html")}
    broken = []
    for path, page in pages.items():
        for link in page.links:
            target, fragment = target_file(site, path, link)
            if target is None:
                continue
            if not target.is_file():
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no such file)")
            elif fragment and target in pages and fragment not in pages[target].ids:
                broken.append(f"{path.relative_to(site.resolve())}: {link} (no #{fragment} there)")
    return broken


def broken_readme_links(root: Path) -> list[str]:
    text = (root / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    return [f"README.md: {link}" for link in links
            if not urlsplit(link).scheme and not (root / urlsplit(link).path).exists()]


def main(argv: list[str]) -> int:
    site = Path(argv[0])
    broken = broken_links(site) + broken_readme_links(Path(__file__).resolve().parent.parent)
    for line in broken:
        print(f"broken link: {line}", file=sys.stderr)
    print(f"{len(broken)} broken internal links", file=sys.stderr)
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
