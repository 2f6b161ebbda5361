"""Every relative link of README.md and docs/*.md names a file of the checkout and, with a
``#anchor``, a heading of that file (as a code host makes a heading's anchor: lower case,
punctuation dropped, spaces as hyphens) or an explicit ``<a id=...>``. Cheap, and it keeps the
README's "see docs/..." and the pages' links to each other honest."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helpers.doc_sessions import documents
from helpers.paths import REPO

LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^\s*```")


def prose(path: Path) -> list[tuple[int, str]]:
    """The lines of ``path`` outside fenced code, with their numbers; inline code removed."""
    lines, inside = [], False
    for number, text in enumerate(path.read_text().split("\n"), 1):
        if FENCE.match(text):
            inside = not inside
            continue
        if not inside:
            lines.append((number, re.sub(r"`[^`]*`", "``", text)))
    return lines


def anchor(heading: str) -> str:
    text = re.sub(r"<[^>]+>", "", heading.strip().lower())
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    found, seen = set(), {}
    text = path.read_text()
    inside = False
    for line in text.split("\n"):
        if FENCE.match(line):
            inside = not inside
        elif not inside and (m := re.match(r"#{1,6}\s+(.*)", line)):
            slug = anchor(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            found.add(slug if n == 0 else f"{slug}-{n}")
    found.update(re.findall(r'<a\s+(?:id|name)="([^"]+)"', text))
    return found


def test_anchor_as_a_code_host_makes_it():
    assert anchor("`kfs export`: topics as Parquet") == "kfs-export-topics-as-parquet"
    assert anchor("Credentials on Spark's executors") == "credentials-on-sparks-executors"
    assert anchor("A live cluster, no broker's disk") == "a-live-cluster-no-brokers-disk"


@pytest.mark.parametrize("path", documents(), ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(path):
    broken = []
    for number, text in prose(path):
        for target in LINK.findall(text):
            if re.match(r"[a-z][a-z0-9+.-]*:", target):  # https:, mailto:
                continue
            file, _, fragment = target.partition("#")
            dest = (path.parent / file).resolve() if file else path
            if not dest.exists():
                broken.append(f"{path.relative_to(REPO)}:{number}: {target}: no such file")
            elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
                broken.append(f"{path.relative_to(REPO)}:{number}: {target}: no such heading")
    assert not broken, "\n".join(broken)
