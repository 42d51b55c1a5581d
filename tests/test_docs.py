"""The README fits on a screen (10 KB) and leads to every page under docs/; no relative link in them points at a
file or a heading that does not exist (anchors as GitHub makes them from headings)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
PAGES = sorted((REPO / "docs").glob("*.md"))
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.M | re.S)


def prose(path: Path) -> str:
    """The Markdown outside fenced code blocks (a link-like string in code is not a link)."""
    return FENCE.sub("", path.read_text())


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of `path`: lower case, punctuation dropped, spaces to hyphens,
    a repeated one numbered."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *#*$", prose(path), re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        if n:
            seen[f"{slug}-{n}"] = 1
    return set(seen)


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]


def test_readme_fits_in_10_kb():
    size = len(README.read_bytes())
    assert size <= 10 * 1024, f"README.md is {size} bytes; move detail into docs/ (limit 10,240)"


def test_every_docs_page_is_linked_from_the_readme():
    linked = {(README.parent / t.split("#")[0]).resolve() for t in relative_links(README) if not t.startswith("#")}
    unlinked = [p.relative_to(REPO).as_posix() for p in PAGES if p.resolve() not in linked]
    assert PAGES and not unlinked, f"docs pages the README does not link: {unlinked}"


def test_relative_links_point_at_existing_files_and_headings():
    broken = []
    for page in [README, *PAGES]:
        for target in relative_links(page):
            file, _, anchor = target.partition("#")
            dest = (page.parent / file).resolve() if file else page
            if not dest.exists():
                broken.append(f"{page.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
                broken.append(f"{page.relative_to(REPO)}: {target} (no such heading in {dest.name})")
    assert not broken, "broken links:\n" + "\n".join(broken)


def test_code_blocks_close():
    """An unclosed fence turns the rest of a page into code, hiding its links from the checks above."""
    open_at_end = [
        p.relative_to(REPO).as_posix()
        for p in [README, *PAGES]
        if len(re.findall(r"^(?:```|~~~)", p.read_text(), re.M)) % 2
    ]
    assert not open_at_end, f"a code fence left open in {open_at_end}"


def test_the_checks_see_links_and_headings(tmp_path):
    """The parsing above finds what it must: a link outside code, none inside, a heading's GitHub anchor."""
    page = tmp_path / "p.md"
    page.write_text(
        "## The `sweep.yaml`: keys\n## Caps\n## Caps\n[a](x.md#caps-1) ![b](y.png)\n"
        "```\n[c](z.md)\n```\n[d](https://example.org)\n"
    )
    assert relative_links(page) == ["x.md#caps-1", "y.png"]
    assert anchors(page) == {"the-sweepyaml-keys", "caps", "caps-1"}
