"""Grounding's work is bounded and can be stopped: counted in work units (``ground.Work``),
never timed.

- Per leaf, the fuzzy comparisons are bounded by a constant (``FUZZY_CELLS_PER_LEAF``) whatever
  the text: text without spaces (``"a" * 200_000``, random ACGT), a value thousands of
  characters long and one character off.
- A row's work is linear in its text: doubling the text at most doubles the characters read
  (plus a constant per leaf).
- ``Work.stop()`` (from another thread) ends an alignment at its next step; ``aground_row``
  stops its worker thread when its task is cancelled; a Ctrl-C during grounding ends the run
  with ``RunInterrupted`` and, for ``run_documents``, a partial frame.
"""

from __future__ import annotations

import asyncio
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from kimi_extract.ground import Interrupted, Work, align
from kimi_extract.ground import match as match_module
from kimi_extract.ground import numbers as numbers_module
from kimi_extract.ground import search as search_module
from kimi_extract.run import grounding

from ..conftest import INTERRUPTIBLE

#: The most fuzzy comparison cells one leaf may cost: ``CANDIDATES`` windows of at most two
#: needle lengths + 8 located (needle <= ``MAX_PARTIAL_CHARS``), ``REFINED`` of them refined
#: (25 comparisons each) and scored; or, for a longer needle, ``REFINED * 2`` windows compared
#: once each.
M = match_module.MAX_PARTIAL_CHARS
FUZZY_CELLS_PER_LEAF = (
    search_module.CANDIDATES * M * (2 * M + 8)
    + match_module.REFINED * 26 * M * (M + 4 + 2 * match_module.SNAP_CHARS)
    + search_module.INDEX_FROM * M
)
LONG_CELLS_PER_LEAF = match_module.REFINED * 2 * 2 * 5_000 * (5_000 + 2 * match_module.SNAP_CHARS)


def _acgt(size: int, seed: int = 1) -> str:
    rng = random.Random(seed)
    return "".join(rng.choice("ACGT") for _ in range(size))


def _values(text: str) -> list[tuple[str, str]]:
    return [
        ("a", text[1000:1040]),
        ("b", text[5000:5020].replace(text[5005], "x", 1)),
        ("c", "aaaa b aaaa"),
        ("d", "ACGTTGCAACGTTGCAAC"),
        ("e", text[:30] + "Q" + text[31:60]),
    ]


@pytest.mark.parametrize("kind", ["a*n", "acgt"])
def test_text_without_spaces_costs_a_bounded_number_of_cells_per_leaf(kind):
    text = "a" * 200_000 if kind == "a*n" else _acgt(400_000)
    work = Work()
    spans = align(text, _values(text), work=work)
    assert len(spans) == 5
    assert work.compared <= len(spans) * FUZZY_CELLS_PER_LEAF, work.compared


def test_a_long_value_one_character_off_costs_a_bounded_number_of_cells():
    text = " ".join(f"word{i} {_acgt(6, i)}" for i in range(3_000))
    value = text[2_000:6_500]
    value = value[:2_000] + ("Z" if value[2_000] != "Z" else "Y") + value[2_001:]
    work = Work()
    (span,) = align(text, [("x", value)], work=work)
    assert span.kind in ("fuzzy", "near")
    assert span.start is not None and abs(span.start - 2_000) < 20
    assert work.compared <= LONG_CELLS_PER_LEAF, work.compared


def _numbers_and_abbreviations(size: int, seed: int = 3) -> str:
    """Text full of what the number-word and abbreviation passes look for."""
    rng = random.Random(seed)
    pieces = [
        "twenty-one", "three hundred and five", "1.2 million", "120万", "三个", "一百二十万",
        "Free Software Foundation", "FSF", "Found.", "A-B-C", "of the", "1,200.50", "k",
    ]  # fmt: skip
    parts, length = [], 0
    while length < size:
        parts.append(rng.choice(pieces))
        length += len(parts[-1]) + 1
    return " ".join(parts)


@pytest.mark.parametrize("kind", ["prose", "acgt", "numbers and abbreviations"])
def test_a_rows_work_is_linear_in_its_text(kind):
    if kind == "acgt":
        base = _acgt(100_000)
    elif kind == "prose":
        base = " ".join(f"clause {i} of the agreement, version {i % 7}" for i in range(3_000))
    else:
        base = _numbers_and_abbreviations(100_000)
    leaves = [(f"v[{i}]", base[j : j + 25]) for i, j in enumerate(range(0, 50_000, 2_500))]
    leaves += [("absent", "nothing like this is written here at all")]
    # the number-word passes (once per row) and the abbreviation patterns (once per leaf)
    leaves += [("n", "3"), ("m", "1200000"), ("w", "twenty-one"), ("f", "FSF")]
    leaves += [("g", "Free Soft. Found."), ("h", "Free Software Foundation"), ("z", "ZQX")]
    counts = []
    for copies in (1, 2, 4):
        work = Work()
        align(base * copies, leaves, work=work)
        counts.append(work.scanned)
    per_leaf = 2 * len(base)  # slack: one more search of the base text per leaf
    assert counts[1] <= 2 * counts[0] + len(leaves) * per_leaf, counts
    assert counts[2] <= 2 * counts[1] + len(leaves) * per_leaf, counts


class _StopAfter(Work):
    """A Work whose stop flag is set by another thread after ``steps`` steps; counts the steps
    taken after that."""

    def __init__(self, steps: int) -> None:
        super().__init__(threading.Event())
        self.steps = steps
        self.after = 0

    def _step(self) -> None:
        self.steps -= 1
        if self.stopped:
            self.after += 1
        elif self.steps == 0:
            stopper = threading.Thread(target=self.stop)
            stopper.start()
            stopper.join()

    def scan(self, chars: int) -> None:
        self._step()
        super().scan(chars)

    def cells(self, count: int) -> None:
        self._step()
        super().cells(count)


def test_a_stopped_alignment_ends_at_its_next_step():
    text = " ".join(f"clause {i} of the agreement" for i in range(20_000))
    leaves = [(f"v[{i}]", f"clause {i * 37} of the agreemant") for i in range(200)]
    work = _StopAfter(steps=50)
    with pytest.raises(Interrupted):
        align(text, leaves, work=work)
    assert work.after <= 1  # the step that saw the stop raised (or the next one)
    assert work.leaves < len(leaves)


def test_a_cancelled_row_stops_its_grounding_thread(monkeypatch):
    started, ended = threading.Event(), threading.Event()
    outcome: list[str] = []

    class Watched(Work):
        def scan(self, chars: int) -> None:
            started.set()
            try:
                super().scan(chars)
            except Interrupted:
                outcome.append("interrupted")
                ended.set()
                raise

        def cells(self, count: int) -> None:
            started.set()
            try:
                super().cells(count)
            except Interrupted:
                outcome.append("interrupted")
                ended.set()
                raise

    monkeypatch.setattr(grounding, "Work", Watched)
    text = " ".join(f"clause {i} of the agreement" for i in range(20_000))
    value = {"items": [f"clause {i * 37} of the agreemant" for i in range(2_000)]}

    async def main() -> None:
        task = asyncio.ensure_future(grounding.aground_row(text, value))
        while not started.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())  # returns once the loop's executor threads are done
    assert ended.is_set() and outcome == ["interrupted"]


CHILD = INTERRUPTIBLE + textwrap.dedent(
    """
    import sys, pandas as pd
    import kimi_extract as kx
    from kimi_extract.run import grounding
    from kimi_extract.simulator import Reply, Simulator
    from pydantic import BaseModel

    class Out(BaseModel):
        items: list[str]

    ENTRY, FOLDER = sys.argv[1], sys.argv[2]
    text = " ".join(f"clause {i} of the agreement" for i in range(100_000))
    answer = {"items": [f"clause {i * 37} of the agreemant" for i in range(700)]}
    real = grounding.ground_pages if ENTRY == "run_documents" else grounding.ground_row
    def watched(*args, **kwargs):
        print("grounding", flush=True)
        try:
            return real(*args, **kwargs)
        except BaseException as exc:
            print("grounding stopped:", type(exc).__name__, flush=True)
            raise
    if ENTRY == "run_documents":
        import kimi_extract.run.document_merge as document_merge
        document_merge.ground_pages = watched
        open(f"{FOLDER}/doc.txt", "w").write(text)
    else:
        grounding.ground_row = watched
    with Simulator(responder=lambda request: Reply(content=answer)) as sim:
        ex = kx.Extractor(Out, base_url=sim.base_url, api_key=sim.api_key, progress=False,
                          grounding=True, store=False)
        try:
            if ENTRY == "run_documents":
                ex.run_documents(FOLDER)
            else:
                ex.run([text])
            print("finished", flush=True)
        except KeyboardInterrupt as stop:
            part = getattr(stop, "partial", None)
            print(type(stop).__name__, "partial", None if part is None else len(part), flush=True)
    """
)


@pytest.mark.parametrize("entry", ["run", "run_documents"])
def test_ctrl_c_during_grounding_ends_the_run_and_keeps_the_partial(tmp_path, entry):
    proc = subprocess.Popen(
        [sys.executable, "-c", CHILD, entry, str(tmp_path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "grounding", (line, proc.stderr.read() if proc.stderr else "")
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)  # a sanity bound, not a measure
    lines = out.strip().splitlines()
    # the grounding stopped before the run ended, and the run reports the interruption with
    # its partial frame (one row)
    assert lines[0] == "grounding stopped: Interrupted", (out, err)
    assert lines[-1] == "RunInterrupted partial 1", (out, err)


def test_the_number_readers_are_given_bounded_runs(monkeypatch):
    """Runs of number words or numerals too long to be one number are not read: the readers
    (text2num, cn2an) are not linear in what they are given (cn2an on 40,000 numerals took
    seconds)."""
    given: list[int] = []
    for name in ("_english", "_chinese"):
        reader = getattr(numbers_module, name)

        def recorded(run: str, reader=reader) -> object:
            given.append(len(run))
            return reader(run)

        monkeypatch.setattr(numbers_module, name, recorded)
    text = "It has three parts. " + "一二" * 5_000 + " and " + "one two " * 2_000 + " 一百二十万 "
    spans = align(text, [("a", "3"), ("b", "1200000")])
    assert [text[s.start : s.end] for s in spans if s.start is not None] == ["three", "一百二十万"]
    assert given and max(given) <= 200, max(given)


@pytest.mark.parametrize(
    ("text", "value"),
    [("A-" * 40_000, "AB"), ("Found" * 16_000, "Found. of Things")],
    ids=["acronym", "abbreviation"],
)
def test_an_abbreviation_pattern_reads_the_text_in_linear_time(text, value):
    """An abbreviation's pattern is tried from many places of this text; each attempt reads a
    bounded stretch (before: each read on to the end of the run, quadratic: 28 s and 14 s of CPU
    here). A sanity bound on CPU time, 50x what it takes."""
    started = time.process_time()
    (span,) = align(text, [("x", value)])
    assert time.process_time() - started < 1.0
    assert span.kind in ("none", "near", "fuzzy")
