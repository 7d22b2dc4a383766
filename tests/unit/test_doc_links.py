"""Every relative link in README.md and docs/*.md points at a file that exists, and every
`#anchor` at a heading of its target (GitHub's heading ids). No network: links with a scheme
are not followed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|<img [^>]*src=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`+[^`]*`+")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced code blocks, without inline code spans."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(CODE_SPAN.sub("", line))
    return lines


def slug(heading: str) -> str:
    """GitHub's id of a heading: markup dropped, lower case, punctuation removed, spaces to -."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    text, fenced = path.read_text(encoding="utf-8"), False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            base = slug(match.group(2))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(path: Path) -> list[str]:
    found = []
    for line in prose_lines(path.read_text(encoding="utf-8")):
        for match in LINK.finditer(line):
            found.append(match.group(1) or match.group(2))
    return found


def broken(path: Path) -> list[str]:
    problems = []
    for target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            problems.append(f"{target}: no such file")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{target}: no heading #{fragment} in {dest.relative_to(ROOT)}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    assert broken(page) == []


def test_the_readme_states_the_test_command() -> None:
    """`.ci/run` runs "the README's test command"."""
    assert "make test" in (ROOT / "README.md").read_text(encoding="utf-8")


def test_the_docs_index_lists_every_page() -> None:
    index = (ROOT / "docs" / "README.md").read_text(encoding="utf-8")
    listed = {Path(t).name for t in links(ROOT / "docs" / "README.md")}
    missing = [p.name for p in PAGES[1:] if p.name != "README.md" and p.name not in listed]
    assert index and missing == []


def test_the_slugs_are_githubs() -> None:
    assert slug("Disk space and clean-up (seed 001 §7.7)") == "disk-space-and-clean-up-seed-001-77"
    assert slug("Files between nodes (`/files/serve`)") == "files-between-nodes-filesserve"
    assert slug("Cloud limits are the cluster's") == "cloud-limits-are-the-clusters"
