"""The pages run as written: every code block of README.md, CONTRIBUTING.md and docs/*.md.

Every Python session (tests/docs_pages.py says how blocks group into sessions) runs in a fresh
``python`` process, started in a scratch copy of the checkout's ``examples/`` the way the README
says to run it (a checkout, ``pip install -e .``), with no API key, no ``KIMI_*`` variable and an
empty ``HOME``: only what the block itself shows. A session starts the bundled simulator exactly
when its code says ``base_url="simulator"``; one the page marks ``<!-- no requests: ... -->``
never does. Blocks in other languages are each checked by the test ``CHECKED_ELSEWHERE`` names,
or marked ``<!-- not run: reason -->``; a block that is neither fails
``test_every_block_is_run_or_checked``.

Beside the blocks: every relative link and ``#anchor`` of the pages resolves, and the pages
cite no commit hash or issue number.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from kimi_extract.cli import build_parser

from ..docs_pages import ROOT, Block, all_blocks, all_sessions, blocks, page_name, pages

#: Printed when a process starts the bundled simulator (kimi_extract/shared_simulator.py).
SIMULATOR_BANNER = "requests go to the bundled Kimi simulator"

#: Blocks other than Python that another test runs or checks: (page, language, the start of the
#: block's first line) -> "tests/file.py::test_name".
CHECKED_ELSEWHERE = {
    ("README.md", "bash", "pip install -e . && kimi-extract run"): (
        "tests/promises/test_readme.py::test_quick_start_command_works_as_printed"
    ),
    ("README.md", "bash", 'pip install -e ".[dev]" && pytest -q'): (
        "tests/promises/test_readme.py::test_the_test_command_is_the_one_ci_runs"
    ),
    ("docs/quality.md", "toml", "[base]"): (
        "tests/cli/test_cli_quality.py::test_the_quality_pages_candidates_file_reads_as_shown"
    ),
    ("docs/cli.md", "text", "kimi-extract run INPUT"): (
        "tests/promises/test_docs.py::test_the_command_line_synopsis_names_real_commands_and_flags"
    ),
}

SESSIONS = all_sessions()


def _bare_environment(home: Path) -> dict[str, str]:
    """What a fresh shell in a checkout has: no key, no KIMI_* setting, an empty HOME. Only the
    interpreter's own PATH and the PYTHONPATH that selects this checkout are kept."""
    env = {"PATH": os.environ.get("PATH", ""), "HOME": str(home), "MPLBACKEND": "Agg"}
    if os.environ.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    return env


def test_the_pages_have_their_python_sessions():
    per_page = {page_name(path): 0 for path in pages()}
    for session in SESSIONS:
        per_page[session.page] += 1
    for page in ("README.md", "docs/images.md", "docs/quality.md", "docs/dask.md"):
        assert per_page[page] >= 1, page
    assert per_page["docs/testing.md"] >= 2
    assert all("KIMI_" not in s.code for s in SESSIONS)
    assert all("api_key" not in s.code for s in SESSIONS if s.page != "docs/testing.md")


@pytest.mark.parametrize("session", SESSIONS, ids=[f"{s.page}:{s.line}" for s in SESSIONS])
def test_python_session_runs_offline_as_written(session, tmp_path: Path) -> None:
    # A scratch copy of the repository's examples, so files the blocks write land in tmp.
    shutil.copytree(ROOT / "examples", tmp_path / "examples")
    home = tmp_path / "home"
    home.mkdir()
    done = subprocess.run(
        [sys.executable, "-"],
        input=session.code,
        cwd=tmp_path,
        env=_bare_environment(home),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"{session.code}\n--- stderr:\n{done.stderr[-3000:]}"
    if not session.sends_requests:
        assert not session.uses_simulator, "a 'no requests' session names the simulator"
    # It ran offline against the bundled simulator exactly when the page says so; a page that
    # does not say so (a scripted backend, scoring alone) must not reach it.
    assert (SIMULATOR_BANNER in done.stderr) == session.uses_simulator, done.stderr[-3000:]
    assert list(home.iterdir()) == []  # no default result store, nothing else written there


# -- every block is covered ---------------------------------------------------------------------


def _claim(block: Block) -> str | None:
    """The CHECKED_ELSEWHERE key ``block`` matches, if any."""
    first = block.code.split("\n", 1)[0]
    for key in CHECKED_ELSEWHERE:
        page, lang, start = key
        if block.page == page and block.lang == lang and first.startswith(start):
            return str(key)
    return None


def uncovered(found: list[Block]) -> list[str]:
    """The blocks no runner covers: not Python, not checked elsewhere, not marked 'not run'."""
    problems = []
    for block in found:
        if block.marker == "not run":
            if not block.reason:
                problems.append(f"{block.where}: '<!-- not run: ... -->' needs a reason")
        elif block.lang != "python" and _claim(block) is None:
            problems.append(
                f"{block.where}: a ```{block.lang or '(no language)'} block no test runs: run it "
                "in a test and add it to CHECKED_ELSEWHERE, or mark it <!-- not run: reason -->"
            )
    return problems


def test_every_block_is_run_or_checked():
    found = all_blocks()
    assert uncovered(found) == []
    claimed = {_claim(block) for block in found}
    stale = [key for key in map(str, CHECKED_ELSEWHERE) if key not in claimed]
    assert stale == [], "CHECKED_ELSEWHERE names blocks that are gone"
    for where in CHECKED_ELSEWHERE.values():
        path, _, name = where.partition("::")
        assert f"def {name}(" in (ROOT / path).read_text(encoding="utf-8"), where


def test_a_block_no_runner_covers_fails(tmp_path: Path):
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\n```python\nprint(1)\n```\n\n```bash\nrm -rf build\n```\n\n"
        "<!-- not run: a synopsis -->\n```\nkimi-extract ...\n```\n\n"
        "<!-- not run:  -->\n```sql\nselect 1\n```\n",
        encoding="utf-8",
    )
    found = blocks(page)
    assert [(b.lang, b.marker) for b in found] == [
        ("python", None),
        ("bash", None),
        ("", "not run"),
        ("sql", "not run"),
    ]
    problems = uncovered([Block(**{**vars(b), "page": "docs/page.md"}) for b in found])
    assert len(problems) == 2 and "bash" in problems[0] and "needs a reason" in problems[1]


def test_the_command_line_synopsis_names_real_commands_and_flags():
    (synopsis,) = [b for b in blocks(ROOT / "docs" / "cli.md") if b.lang == "text"]
    parser = build_parser()
    (commands,) = [a for a in parser._actions if a.dest == "command"]  # the subparsers
    seen = set()
    command = None
    for line in synopsis.code.splitlines():
        words = line.split()
        if words[:1] == ["kimi-extract"] and not words[1].startswith("-"):
            command = words[1]
            assert command in commands.choices, line
            seen.add(command)
        elif words[:1] == ["kimi-extract"]:
            command = None
        options = commands.choices[command]._option_string_actions if command else {}
        options = options or parser._option_string_actions
        for no, flag in re.findall(r"(no )?(?<![\w-])(--[\w-]+)", line):
            # "(same flags, no --dry-run)": a flag the synopsis says a command lacks
            assert (flag in options) != bool(no), f"{command or 'kimi-extract'}, {flag}: {line}"
    assert {"run", "run-docs", "simulate", "review", "eval", "compare"} <= seen


# -- links, anchors, and no hashes or issue numbers -----------------------------------------------

LINK = re.compile(r"\]\((?P<target>[^)\s]+)\)")


def _prose(text: str) -> str:
    """The text outside code blocks and code spans."""
    text = re.sub(r"(?ms)^```.*?^```[ \t]*$", "", text)
    return re.sub(r"(`+)(?:(?!\1).)+?\1", "", text, flags=re.S)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```[ \t]*$", "", path.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"(?m)^#{1,6} (.+?)\s*$", text)}


def broken_links(path: Path) -> list[str]:
    broken = []
    for match in LINK.finditer(_prose(path.read_text(encoding="utf-8"))):
        target = match["target"]
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        where = (path.parent / file).resolve() if file else path
        if not where.exists():
            broken.append(f"{page_name(path)}: {target} (no such file)")
        elif anchor and (where.suffix != ".md" or anchor not in anchors(where)):
            broken.append(f"{page_name(path)}: {target} (no such heading)")
    return broken


def test_slugs_follow_github():
    assert slug("Kimi's schema dialect") == "kimis-schema-dialect"
    assert slug("Reliability: what is guaranteed, and how to resume") == (
        "reliability-what-is-guaranteed-and-how-to-resume"
    )
    assert slug("Enriching large DataFrames: limits, caching, budgets") == (
        "enriching-large-dataframes-limits-caching-budgets"
    )
    assert slug("## `kimi_extract.dask`".lstrip("# ")) == "kimi_extractdask"


@pytest.mark.parametrize("path", pages(), ids=page_name)
def test_every_link_and_anchor_resolves(path: Path):
    assert broken_links(path) == []


def test_a_broken_link_or_anchor_is_found(tmp_path: Path):
    (tmp_path / "other.md").write_text("# Other\n\n## A part: here\n", encoding="utf-8")
    page = tmp_path / "page.md"
    page.write_text(
        "# Page\n\n[ok](other.md#a-part-here) [ok](#page) [web](https://example.com/x#y)\n"
        "[gone](missing.md) [no part](other.md#nowhere) [self](#nowhere) `[code](x.md)`\n",
        encoding="utf-8",
    )
    assert len(broken_links(page)) == 3


#: Sections other helpers are editing now; the lead removes each entry when the section moves
#: to docs/ and its hashes are rewritten.
PENDING: set[tuple[str, str]] = set()

ISSUE = re.compile(r"(?<![\w&/])#\d+\b")
HASH = re.compile(r"\b(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}\b")


def citations(page: str, text: str) -> list[str]:
    """Issue numbers and commit hashes in the prose of ``text``."""
    for owner, heading in PENDING:
        if owner == page and heading in text:
            before, _, rest = text.partition(heading + "\n")
            after = re.search(r"(?m)^## ", rest)
            text = before + (rest[after.start() :] if after else "")
    prose = _prose(text)
    return [f"{page}: {m[0]}" for m in (*ISSUE.finditer(prose), *HASH.finditer(prose))]


def test_no_commit_hash_or_issue_number_in_the_pages():
    found = []
    for path in pages():
        found += citations(page_name(path), path.read_text(encoding="utf-8"))
    assert found == []


def test_a_hash_or_an_issue_number_is_found():
    text = "Fixed in #12 at 2be1494; `#2` and `a1b2c3d` are code; sha256 deadbeefcafe is hex.\n"
    assert citations("x.md", text) == ["x.md: #12", "x.md: 2be1494"]


# -- CONTRIBUTING's layer map is tests/package/test_layers.py's ---------------------------------


def contributing_layers(text: str) -> dict[str, int]:
    """Module -> layer, read from the "Modules:" lines under CONTRIBUTING's layer headings."""
    section = text.split("\n## The layer map\n", 1)[1].split("\n## ", 1)[0]
    found: dict[str, int] = {}
    for heading in re.finditer(r"^### Layer (\d+): .*?$(.*?)(?=^### |\Z)", section, re.M | re.S):
        listed = re.search(r"^Modules: (.*?)(?:\n\n|\Z)", heading[2], re.M | re.S)
        assert listed is not None, f"layer {heading[1]} has no 'Modules:' line"
        for name in re.findall(r"`([\w.]+)`", listed[1]):
            assert name not in found, f"{name} is listed twice"
            found[name] = int(heading[1])
    return found


def test_contributing_maps_every_module_to_its_layer():
    from ..package.test_layers import LAYERS

    expected = {module or "kimi_extract": layer for module, layer in LAYERS.items()}
    mapped = contributing_layers((ROOT / "CONTRIBUTING.md").read_text(encoding="utf-8"))
    missing = sorted(set(expected) - set(mapped))
    unknown = sorted(set(mapped) - set(expected))
    moved = sorted(m for m in set(expected) & set(mapped) if expected[m] != mapped[m])
    assert (missing, unknown, moved) == ([], [], []), (
        "CONTRIBUTING.md's layer map differs from LAYERS in tests/package/test_layers.py "
        "(missing, not in LAYERS, in another layer)"
    )
