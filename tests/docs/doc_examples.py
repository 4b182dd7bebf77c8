"""The ```python blocks of the documentation (``docs/**/*.md``) and of ``README.md``, as runnable examples.

A block runs as written, in this process, with ``ZKQUEUE_CONNECT`` naming a fresh chroot of a real ZooKeeper and
the current directory set to a scratch folder of its page. The HTML comment on the line just before a block (blank
lines between are allowed) changes that; docs/contributing.md documents the markers for writers:

- ``<!-- fragment -->`` (or ``<!-- fragment: why -->``): not run (a piece of a larger program, a config, a sketch
  that needs Spark, FastAPI or a remote host).
- ``<!-- file: NAME.py -->``: not run; written as ``NAME.py`` into the page's folder before the page's first block
  runs, so the page's blocks import it (``from tasks import send_mail``).
- ``<!-- continue -->``: runs in the globals the block before it left (the page's last block that ran), as the
  next cell of one program.
- ``<!-- quickstart:NAME -->``: the README's quick start, run as separate programs and a ``zkqueue worker`` by
  ``tests/tasks/test_readme_quickstart.py``; not run here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,}|~{3,})[ \t]*(?P<info>[^\n`]*)$")
MARKER = re.compile(r"^\s*<!--\s*(?P<kind>fragment|file|continue|quickstart)\b\s*:?\s*(?P<arg>.*?)\s*-->\s*$")


@dataclass(frozen=True)
class Block:
    """One ```python block: where it is, its code, and what its marker says to do with it."""

    source: str      # path relative to the repository, e.g. "docs/guides/jobs.md"
    line: int        # 1-based line of the opening fence
    code: str
    kind: str        # "run", "continue", "file", "fragment", "quickstart"
    arg: str = ""    # the file name of a "file" block, or the reason of a fragment

    @property
    def id(self) -> str:
        return f"{self.source}:{self.line}"


def markdown_files(root: Path = ROOT) -> list[Path]:
    """README.md and every page under docs/, in a stable order."""
    return [root / "README.md", *sorted((root / "docs").rglob("*.md"))]


def parse(text: str, source: str) -> list[Block]:
    """Every python block of one markdown text, with its marker."""
    lines = text.split("\n")
    blocks: list[Block] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, info = m["indent"], m["ticks"], m["info"].strip()
        end = i + 1
        close = re.compile(rf"^[ \t]*{re.escape(ticks[0])}{{{len(ticks)},}}[ \t]*$")
        while end < len(lines) and not close.match(lines[end]):
            end += 1
        language = info.split()[0].lower() if info else ""
        if language in ("python", "py"):
            body = [line[len(indent):] if line.startswith(indent) else line.lstrip() for line in lines[i + 1:end]]
            kind, arg = "run", ""
            j = i - 1
            while j >= 0 and not lines[j].strip():
                j -= 1
            marker = MARKER.match(lines[j]) if j >= 0 else None
            if marker:
                kind = {"fragment": "fragment", "file": "file", "continue": "continue",
                        "quickstart": "quickstart"}[marker["kind"]]
                arg = marker["arg"]
            blocks.append(Block(source, i + 1, "\n".join(body) + "\n", kind, arg))
        i = end + 1
    return blocks


def all_blocks(root: Path = ROOT) -> list[Block]:
    out: list[Block] = []
    for path in markdown_files(root):
        if path.exists():
            out += parse(path.read_text(), path.relative_to(root).as_posix())
    return out


def runnable(blocks: list[Block]) -> list[Block]:
    """The blocks that run as examples (the tests' parameters): "run" and "continue" blocks."""
    return [b for b in blocks if b.kind in ("run", "continue")]


def chain(blocks: list[Block], block: Block) -> list[Block]:
    """``block`` and the blocks of its page it continues, first to last: what runs in one namespace up to it."""
    page = [b for b in runnable(blocks) if b.source == block.source]
    at = page.index(block)
    start = at
    while start > 0 and page[start].kind == "continue":
        start -= 1
    return page[start:at + 1]


def files_of(blocks: list[Block], source: str) -> dict[str, str]:
    """The ``<!-- file: NAME -->`` blocks of one page: name -> code."""
    return {b.arg: b.code for b in blocks if b.source == source and b.kind == "file"}
