"""The generated blocks of the pages: find them, rewrite them, list the stale ones."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from dear.errors import DearError
from dear.runtime.io import write_text

BEGIN = re.compile(r"<!-- generated: (?P<spec>[^>]+?) -->\n")
END = "<!-- end generated -->"
COMMAND = "python -m dear.docs"


@dataclass(frozen=True)
class Block:
    spec: str  # what writes it: a generator's name and its arguments ("params train")
    start: int  # offset of the first character of the body
    end: int  # offset of the END marker


def pages(root: Path) -> list[Path]:
    """README.md and every page of docs/ (the demo's snapshot folder holds data, not pages)."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


FENCE = re.compile(r"^[ \t]*```.*?^[ \t]*```", re.S | re.M)


def blocks(text: str, page: Path) -> list[Block]:
    """The page's blocks in order; markers inside fenced code (examples) are not blocks."""
    fenced = [match.span() for match in FENCE.finditer(text)]
    found = []
    for match in BEGIN.finditer(text):
        if any(start <= match.start() < end for start, end in fenced):
            continue
        end = text.find(END, match.end())
        if end < 0:
            raise DearError(f"{page}: block '{match['spec']}' has no '{END}' line; close it")
        found.append(Block(match["spec"].strip(), match.end(), end))
    return found


def rewrite(text: str, page: Path, generate: Callable[[str], str]) -> str:
    """The page with every block's body replaced by what its generator writes now."""
    parts, last = [], 0
    for block in blocks(text, page):
        parts += [text[last:block.start], generate(block.spec).rstrip("\n") + "\n"]
        last = block.end
    return "".join(parts) + text[last:]


def stale(root: Path, generate: Callable[[str], str]) -> list[str]:
    """'page: spec' of every block whose body differs from what its generator writes now."""
    out = []
    for page in pages(root):
        text = page.read_text()
        for block in blocks(text, page):
            if text[block.start:block.end] != generate(block.spec).rstrip("\n") + "\n":
                out.append(f"{page.relative_to(root)}: {block.spec}")
    return out


def refresh(root: Path, generate: Callable[[str], str]) -> list[Path]:
    """Rewrite every page whose blocks changed; returns those pages."""
    changed = []
    for page in pages(root):
        text = page.read_text()
        new = rewrite(text, page, generate)
        if new != text:
            write_text(page, new)
            changed.append(page)
    return changed
