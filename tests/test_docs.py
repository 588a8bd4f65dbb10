"""The user docs point at things that exist: files, folders, modules, section anchors.

README.md, BENCHMARKS.md and every page under docs/ name files of the repository
(``classify_images/coding/fisher.py``, ``scripts/benchmarks/bench_dsift.py``), dotted module
names (``classify_images.classifiers.calibration``) and sections of other pages
(``[cold-build](docs/benchmarks/cold-build.md#...)``). A move or a renamed heading breaks them
silently; these tests name each broken reference with its file and line.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC_FILES = sorted([ROOT / "README.md", ROOT / "BENCHMARKS.md", *(ROOT / "docs").rglob("*.md")])

# Topic pages README links to that are being written on other branches at the same time: accepted
# while absent. Remove a name once its page is merged.
PAGES_BEING_WRITTEN: set[str] = set()  # pages linked before they are written (none now)

# A repository path: starts at a top-level folder of the tree, ends in a name character or a slash.
_PATH = re.compile(r"(?<![\w./-])((?:classify_images|scripts|tests|docs|\.ci)/[\w./-]*[\w/])")
_MODULE = re.compile(r"(?<![\w./-])(classify_images(?:\.\w+)+)")
_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
_HEADING = re.compile(r"^#{1,6} +(.*?) *#*$")


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces to dashes."""
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every heading anchor of a Markdown page, with GitHub's -1, -2 suffixes for repeated headings."""
    seen: dict[str, int] = {}
    result = set()
    in_code = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
        match = None if in_code else _HEADING.match(line)
        if match:
            slug = github_slug(match.group(1))
            count = seen.get(slug, 0)
            seen[slug] = count + 1
            result.add(slug if count == 0 else f"{slug}-{count}")
    return result


def _module_exists(dotted: str) -> bool:
    """True when a prefix of the dotted name is a module or package and at most one attribute follows."""
    parts = dotted.split(".")
    for end in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:end])
        if base.with_suffix(".py").is_file() or (base / "__init__.py").is_file():
            return len(parts) - end <= 1
    return False


def _references(page: Path):
    """(line number, line) of every line of a page."""
    return enumerate(page.read_text(encoding="utf-8").splitlines(), start=1)


@pytest.mark.parametrize("page", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_repository_path_named_exists(page):
    missing = []
    for number, line in _references(page):
        for path in sorted({match.group(1).rstrip(".") for match in _PATH.finditer(line)}):
            if not (ROOT / path).exists() and path not in PAGES_BEING_WRITTEN:
                missing.append(f"{page.relative_to(ROOT)}:{number}: {path}")
    assert not missing, "paths named in the docs that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_module_named_exists(page):
    missing = []
    for number, line in _references(page):
        for match in _MODULE.finditer(line):
            if not _module_exists(match.group(1).rstrip(".")):
                missing.append(f"{page.relative_to(ROOT)}:{number}: {match.group(1)}")
    assert not missing, "modules named in the docs that do not exist:\n" + "\n".join(missing)


@pytest.mark.parametrize("page", DOC_FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_anchor_resolves(page):
    broken = []
    for number, line in _references(page):
        for match in _LINK.finditer(line):
            target = match.group(1)
            if re.match(r"[a-z]+:", target):
                continue  # http(s), mailto: not checked here
            path_part, _, anchor = target.partition("#")
            destination = (page.parent / path_part).resolve() if path_part else page
            if destination.is_relative_to(ROOT) and str(destination.relative_to(ROOT)) in PAGES_BEING_WRITTEN:
                continue
            if not destination.exists():
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such file)")
            elif anchor and destination.suffix == ".md" and anchor not in anchors(destination):
                broken.append(f"{page.relative_to(ROOT)}:{number}: {target} (no such section)")
    assert not broken, "links in the docs that lead nowhere:\n" + "\n".join(broken)


def test_github_slug_follows_githubs_rule():
    assert (
        github_slug("The Fisher encoder against VLFeat's `vl_fisher`") == "the-fisher-encoder-against-vlfeats-vl_fisher"
    )
    assert github_slug("ScSPM encode + pool: per-image work") == "scspm-encode--pool-per-image-work"
