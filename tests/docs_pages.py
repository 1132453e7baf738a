"""The user-facing pages and the fenced code blocks in them, as tests/promises/test_docs.py runs
them.

A page is README.md, CONTRIBUTING.md or a ``docs/*.md`` file (``docs/reference/`` holds the Kimi
API's own documents, vendored as published: they are not ours to run or rewrite). A block is a
fenced block whose fence starts a line; the line before it may carry a marker:

- ``<!-- not run: reason -->``: the block is shown, not run (a synopsis, a command that needs a
  key or a cluster); the reason is required.
- ``<!-- no requests: reason -->``: a Python session that sends no request at all (it scores
  frames it builds itself, say), so it must not start the bundled simulator.

A Python block whose first line is ``# continues ...`` runs after the block before it on the same
page, in the same process (the session a reader pastes both into); any other starts a session.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
MARKER = re.compile(r"^<!-- (?P<kind>not run|no requests): (?P<reason>.*?) -->\s*$")


def pages() -> list[Path]:
    """Every page whose blocks must be run or checked, README first."""
    found = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").glob("*.md"))]
    return [path for path in found if path.exists()]


def page_name(path: Path) -> str:
    """The page's path in the checkout (a page elsewhere, as tests write them: its name)."""
    return path.relative_to(ROOT).as_posix() if path.is_relative_to(ROOT) else path.name


@dataclass(frozen=True)
class Block:
    """One fenced block: where it is, its language, its marker and its code."""

    page: str
    line: int  #: 1-based line of the opening fence
    lang: str
    marker: str | None  #: "not run", "no requests" or None
    reason: str
    code: str

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced blocks of one page, in order. An unclosed fence is an error naming its line."""
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    number = 0
    while number < len(lines):
        opening = FENCE.match(lines[number])
        if not opening:
            number += 1
            continue
        end = number + 1
        while end < len(lines) and lines[end].rstrip() != "```":
            end += 1
        if end == len(lines):
            raise AssertionError(f"{page_name(path)}:{number + 1}: a code fence is never closed")
        marker = MARKER.match(lines[number - 1]) if number else None
        found.append(
            Block(
                page=page_name(path),
                line=number + 1,
                lang=opening["lang"],
                marker=marker["kind"] if marker else None,
                reason=marker["reason"].strip() if marker else "",
                code="\n".join(lines[number + 1 : end]),
            )
        )
        number = end + 1
    return found


def all_blocks() -> list[Block]:
    return [block for path in pages() for block in blocks(path)]


@dataclass(frozen=True)
class Session:
    """The Python blocks a reader pastes into one fresh ``python``, in order."""

    page: str
    line: int  #: the first block's fence
    sends_requests: bool  #: False when its first block is marked ``no requests``
    code: str

    @property
    def uses_simulator(self) -> bool:
        """Whether the code itself points a run at the bundled simulator."""
        return 'base_url="simulator"' in self.code


def sessions(path: Path) -> list[Session]:
    grouped: list[list[Block]] = []
    for block in blocks(path):
        if block.lang != "python" or block.marker == "not run":
            continue
        if block.code.startswith("# continues") and grouped:
            grouped[-1].append(block)
        else:
            grouped.append([block])
    return [
        Session(
            page=group[0].page,
            line=group[0].line,
            sends_requests=group[0].marker != "no requests",
            code="\n\n".join(block.code for block in group),
        )
        for group in grouped
    ]


def all_sessions() -> list[Session]:
    return [session for path in pages() for session in sessions(path)]
