"""Outputs (``run_to``, the table writer): checked before the first request, one complete table
or none at the target whatever else writes there, no row lost to a disk error or odd text.

Each test was checked to fail on the code before its fix.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kimi_extract as kx
from kimi_extract.simulator import Reply
from kimi_extract.table.export import TableWriter, partial_path

ROOT = Path(__file__).parents[2]
FORMATS = [".csv", ".jsonl", ".parquet"]


def read(path: Path) -> pd.DataFrame:
    if path.suffix == ".jsonl":
        return pd.read_json(path, lines=True)
    if path.suffix == ".parquet":
        return pd.read_parquet(path)
    return pd.read_csv(path)


def old_table(path: Path) -> bytes:
    """A valid table at ``path`` (what an earlier run left there); its bytes."""
    frame = pd.DataFrame({"old": [f"kept {i}" for i in range(50)], "n": range(50)})
    if path.suffix == ".jsonl":
        frame.to_json(path, orient="records", lines=True)
    elif path.suffix == ".parquet":
        frame.to_parquet(path)
    else:
        frame.to_csv(path, index=False)
    return path.read_bytes()


def leftovers(directory: Path) -> list[str]:
    """Temporary files a writer left behind."""
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".part"))


# -- the output path is checked before the first request ----------------------------------------


@pytest.mark.parametrize(
    "where",
    ["/sys/o.csv", "/proc/o.jsonl", "DIR", "DIR/missing/o.csv", "DIR/file.txt/o.csv"],
)
def test_run_to_refuses_a_place_it_cannot_write_before_any_request(
    sim, make_extractor, tmp_path: Path, where: str
) -> None:
    (tmp_path / "file.txt").write_text("not a directory")
    target = where.replace("DIR", str(tmp_path / "out.csv") if where == "DIR" else str(tmp_path))
    if where == "DIR":
        (tmp_path / "out.csv").mkdir()  # a directory where the file should go
    with pytest.raises(kx.ConfigurationError) as info:
        make_extractor().run_to(target, ["a", "b"])
    assert target in str(info.value) and "\n" not in str(info.value)
    assert sim.history == []
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("path", [5, None, b"out.csv", ["out.csv"], ""])
def test_run_to_path_of_the_wrong_type_is_a_configuration_error(
    sim, make_extractor, path: Any
) -> None:
    with pytest.raises(kx.ConfigurationError, match="path must be a file path"):
        make_extractor().run_to(path, ["a"])
    assert sim.history == []


def test_a_failed_input_check_leaves_no_temporary_file(sim, make_extractor, tmp_path: Path):
    with pytest.raises(kx.ConfigurationError, match="nope"):
        make_extractor().run_to(tmp_path / "out.csv", [{"t": "a"}], text="nope")
    assert list(tmp_path.iterdir()) == [] and sim.history == []


# -- two writers, one target; a temporary file deleted mid-run ----------------------------------


@pytest.mark.parametrize("suffix", FORMATS)
def test_two_writers_of_one_target_never_leave_an_empty_file(tmp_path: Path, suffix: str):
    target = tmp_path / f"out{suffix}"
    old_table(target)
    first, second = TableWriter(target), TableWriter(target)
    first.write(pd.DataFrame({"who": ["first"] * 3}))
    second.write(pd.DataFrame({"who": ["second"] * 5}))
    first.commit()
    assert read(target)["who"].tolist() == ["first"] * 3
    second.commit()
    assert read(target)["who"].tolist() == ["second"] * 5  # the last to finish wins, whole
    assert leftovers(tmp_path) == []


#: Writers racing on one target: (writer, action) steps in any order.
_ACTIONS = st.sampled_from(["write", "write", "commit", "abort", "lose", "swap"])


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    suffix=st.sampled_from(FORMATS),
    writers=st.integers(2, 3),
    steps=st.lists(st.tuples(st.integers(0, 2), _ACTIONS), max_size=14),
)
def test_racing_writers_leave_the_old_table_or_one_whole_new_one(
    tmp_path_factory: pytest.TempPathFactory, suffix: str, writers: int, steps: list
) -> None:
    """Whatever the interleaving of writes, commits, aborts and temporary files deleted under
    them or replaced by another file, the target is at every moment the old table or the
    complete table of the writer that committed last; a writer whose temporary file was lost
    publishes nothing and raises, and keeps its rows; an aborted writer's rows are all in the
    file it names; no temporary file of ours is left."""
    directory = tmp_path_factory.mktemp("race")
    target = directory / f"out{suffix}"
    old = old_table(target)
    pool = [TableWriter(target) for _ in range(writers)]
    written: list[list[str]] = [[] for _ in pool]
    done = [False] * writers
    lost = [False] * writers
    strangers: set[str] = set()  # files another program put at a writer's temporary name
    published: list[str] | None = None  # None: the old table
    for who, action in steps:
        who %= writers
        writer = pool[who]
        if done[who]:
            continue
        if action == "write":
            rows = [f"w{who}-{len(written[who]) + i}" for i in range(2)]
            writer.write(pd.DataFrame({"row": rows}))
            written[who] += rows
        elif action == "lose":
            writer.tmp.unlink(missing_ok=True)  # a temp cleaner
            lost[who] = True
            strangers.discard(writer.tmp.name)
        elif action == "swap":
            writer.tmp.unlink(missing_ok=True)  # another program's file takes the name
            writer.tmp.write_bytes(b"not ours")
            lost[who] = True
            strangers.add(writer.tmp.name)
        elif action == "commit":
            done[who] = True
            try:
                writer.commit()
            except OSError:
                assert lost[who]
                kept = writer.abort()
                assert kept is not None and kept.exists()
                if written[who]:
                    assert read(kept)["row"].tolist() == written[who]
            else:
                assert not lost[who]
                published = written[who]
        else:
            done[who] = True
            kept = writer.abort()
            assert kept == partial_path(target)
            if written[who]:
                assert read(kept)["row"].tolist() == written[who]
        if published is None:
            assert target.read_bytes() == old
        elif published:
            assert read(target)["row"].tolist() == published
        else:
            assert target.read_bytes() == b""  # a writer that wrote no row: an empty output
    for who, writer in enumerate(pool):
        if not done[who]:
            writer.abort()
    assert leftovers(directory) == sorted(strangers)  # a file not ours is never removed


RACER = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import kimi_extract as kx
    from kimi_extract.table.export import TableWriter
    from tests.conftest import Review

    base_url, api_key, me, other, rows, *targets = sys.argv[1:]
    real_commit = TableWriter.commit

    def commit_when_both_wrote(self):
        # Both runs have written their rows before either renames: the writers overlap.
        (self.path.parent / f"{me}{self.path.suffix}.wrote").touch()
        theirs = self.path.parent / f"{other}{self.path.suffix}.wrote"
        deadline = time.monotonic() + 60
        while not theirs.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        real_commit(self)

    TableWriter.commit = commit_when_both_wrote
    ex = kx.Extractor(Review, base_url=base_url, api_key=api_key, progress=False, store=False)
    for target in targets:
        report = ex.run_to(target, [f"{me} {i}" for i in range(int(rows))])
        print("ok", report.ok, flush=True)
    """
)


def test_two_processes_run_to_one_target(sim, tmp_path: Path) -> None:
    """Two processes write the same targets (csv, jsonl, parquet) at once, over an old table:
    both succeed, and each target is one complete table."""
    targets = [tmp_path / f"out{suffix}" for suffix in FORMATS]
    for target in targets:
        old_table(target)
    sizes = {"A": 7, "B": 11}
    procs = {
        me: subprocess.Popen(
            [sys.executable, "-c", RACER, sim.base_url, sim.api_key, me, other, str(sizes[me])]
            + [str(t) for t in targets],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
        )
        for me, other in (("A", "B"), ("B", "A"))
    }
    for me, proc in procs.items():
        out, err = proc.communicate(timeout=180)
        assert proc.returncode == 0 and out.split() == ["ok", str(sizes[me])] * 3, err
    for target in targets:
        back = read(target)
        assert back["input"].tolist() in (
            [f"A {i}" for i in range(7)],
            [f"B {i}" for i in range(11)],
        )
        assert back["kx_error"].isna().all()
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_temp_file_deleted_mid_run_keeps_the_old_target_and_every_row(
    sim, make_extractor, tmp_path: Path, monkeypatch, suffix: str
) -> None:
    monkeypatch.setattr("kimi_extract.pipeline.output.WRITE_BATCH_ROWS", 5)
    target = tmp_path / f"out{suffix}"
    old = old_table(target)
    real_write = TableWriter.write

    def write_then_clean(self: TableWriter, frame: pd.DataFrame) -> None:
        real_write(self, frame)
        self.tmp.unlink(missing_ok=True)  # a temp cleaner passes after the first batch

    monkeypatch.setattr(TableWriter, "write", write_then_clean)
    with pytest.raises(kx.RunStopped) as info:
        make_extractor(concurrency=2).run_to(target, [f"row {i}" for i in range(23)])
    assert "deleted" in str(info.value) and str(target) in str(info.value)
    assert target.read_bytes() == old
    kept = partial_path(target)
    assert info.value.partial_file == str(kept) and str(kept) in str(info.value)
    assert read(kept)["input"].tolist() == [f"row {i}" for i in range(23)]
    assert info.value.partial is None  # every row is in the file
    assert leftovers(tmp_path) == []


# -- a write that fails after the run: a documented error, the rows kept -------------------------


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_target_that_became_a_directory_is_run_stopped_with_the_rows_kept(
    sim, make_extractor, tmp_path: Path, suffix: str
) -> None:
    target = tmp_path / f"out{suffix}"

    def block_target(request):
        if not target.exists():
            target.mkdir()  # someone takes the name while the run goes on
        return None

    sim.responder = block_target
    with pytest.raises(kx.RunStopped) as info:
        make_extractor().run_to(target, [f"row {i}" for i in range(6)])
    kept = partial_path(target)
    assert info.value.partial_file == str(kept) and str(kept) in str(info.value)
    assert isinstance(info.value.cause, OSError)
    assert read(kept)["input"].tolist() == [f"row {i}" for i in range(6)]
    assert leftovers(tmp_path) == []


def test_rows_go_to_the_temp_dir_when_the_target_directory_is_gone(
    sim, make_extractor, tmp_path: Path, monkeypatch
) -> None:
    outdir, spare = tmp_path / "out", tmp_path / "spare"
    outdir.mkdir()
    spare.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(spare))

    def replace_dir(request):
        if outdir.is_dir():
            shutil.rmtree(outdir)  # the temporary file goes with it
            outdir.write_text("a file now")
        return None

    sim.responder = replace_dir
    with pytest.raises(kx.RunStopped) as info:
        make_extractor().run_to(outdir / "o.jsonl", [f"row {i}" for i in range(4)])
    kept = spare / "o.partial.jsonl"
    assert info.value.partial_file == str(kept) and str(kept) in str(info.value)
    assert read(kept)["input"].tolist() == [f"row {i}" for i in range(4)]


FULL_DISK = textwrap.dedent(
    """
    import json, resource, signal, sys
    import kimi_extract as kx
    import kimi_extract.pipeline.output as output
    from kimi_extract.simulator import Simulator
    from tests.conftest import Review

    # No file may grow past N bytes (EFBIG), as on a disk that fills up mid-run.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    output.WRITE_BATCH_ROWS = 5
    with Simulator() as sim:
        ex = kx.Extractor(Review, base_url=sim.base_url, api_key=sim.api_key, progress=False,
                          store=False, concurrency=2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
        for target in sys.argv[2:]:
            try:
                ex.run_to(target, [f"row {i}" for i in range(40)])
                print(json.dumps({"finished": True}))
            except kx.RunStopped as stop:
                partial = None if stop.partial is None else stop.partial["input"].tolist()
                print(json.dumps({"file": stop.partial_file, "partial": partial,
                                  "msg": str(stop)}), flush=True)
    """
)


def test_a_full_disk_under_run_to_is_run_stopped_and_loses_no_row(tmp_path: Path):

    targets = [tmp_path / f"out{suffix}" for suffix in FORMATS]
    proc = subprocess.run(
        [sys.executable, "-c", FULL_DISK, "2500", *map(str, targets)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=180,
    )
    assert proc.returncode == 0, proc.stderr
    stops = [json.loads(line) for line in proc.stdout.strip().splitlines()]
    assert len(stops) == 3, proc.stdout
    for target, stop in zip(targets, stops, strict=True):
        assert "finished" not in stop and "File too large" in stop["msg"]
        assert not target.exists()
        in_file: list[str] = []
        if target.suffix == ".parquet":
            # pyarrow cannot complete a parquet file after a failed write: the message says so.
            assert stop["file"] is None and "could not be kept" in stop["msg"]
        else:
            in_file = read(Path(stop["file"]))["input"].tolist()
        # The rows in the file, then the rows the disk could not take: in order, none twice.
        unwritten = stop["partial"]
        assert unwritten, stop
        rows = in_file + unwritten
        start = 0 if in_file else int(unwritten[0].split()[1])
        assert rows == [f"row {i}" for i in range(start, start + len(rows))]
    assert leftovers(tmp_path) == []


# -- odd text: what run returns, run_to writes ---------------------------------------------------


SURROGATE = "bad \udc80 text"


@pytest.mark.parametrize("suffix", FORMATS)
@pytest.mark.parametrize("case", ["input cell", "extra column", "server error", "generator"])
def test_run_to_writes_what_run_handles(
    sim, make_extractor, tmp_path: Path, suffix: str, case: str
) -> None:
    text = "text"
    if case == "input cell":
        data: Any = pd.DataFrame({"text": ["fine", SURROGATE]}, dtype=object)
    elif case == "extra column":
        data = pd.DataFrame({"text": ["fine", "also"], "note": [SURROGATE, "x"]}, dtype=object)
    elif case == "generator":
        data = ({"text": t, "note": n} for t, n in [("fine", SURROGATE), (SURROGATE, "x")])
    else:
        data = pd.DataFrame({"text": ["fine", "also"]})
        sim.responder = lambda r: Reply(
            status=400, error_type="invalid_request_error", error_message=SURROGATE
        )
    target = tmp_path / f"out{suffix}"
    report = make_extractor().run_to(target, data, text=text)
    back = read(target)
    assert len(back) == report.rows == 2
    escaped = SURROGATE.replace("\udc80", "\\udc80")
    cells = [str(v) for v in back.to_numpy().ravel()]
    assert any(escaped in c for c in cells)
    assert not any("\udc80" in c for c in cells)


#: Any text (lone surrogates included); most hold one of the characters writers get wrong.
_ANY_TEXT = st.text(st.characters(exclude_categories=()), max_size=6)
_ODD_TEXT = st.one_of(
    _ANY_TEXT,
    st.builds(
        lambda before, odd, after: before + odd + after,
        _ANY_TEXT,
        st.sampled_from(["\udc80", "\ud800", "\udfff", "\r", "\n", '"', ",", "\\", "\x00"]),
        _ANY_TEXT,
    ),
)


def read_raw(path: Path) -> list[dict[str, Any]]:
    """The rows of a file as plain values, read without pandas' type guessing."""
    import csv

    if path.suffix == ".jsonl":
        lines = path.read_text(encoding="utf-8").split("\n")  # (not splitlines: U+2028 etc.)
        return [json.loads(line) for line in lines if line]
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq

        return list(pq.read_table(path).to_pylist())
    with path.open(encoding="utf-8", newline="") as handle:
        return list(csv.DictReader(handle))


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    suffix=st.sampled_from(FORMATS),
    texts=st.lists(_ODD_TEXT, min_size=1, max_size=6),
)
def test_any_text_is_written_with_lone_surrogates_escaped(
    tmp_path_factory: pytest.TempPathFactory, suffix: str, texts: list[str]
) -> None:
    """Every str a frame can hold (lone surrogates included, in cells, nested values and the
    index) is written and reads back as itself with its surrogates escaped."""

    def escape(text: str) -> str:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")

    frame = pd.DataFrame(
        {"t": pd.Series(texts, dtype=object), "nested": [{"k": [t]} for t in texts]},
        dtype=object,
    ).set_axis(pd.Index([f"r{i}{t}" for i, t in enumerate(texts)], dtype=object))
    target = tmp_path_factory.mktemp("text") / f"out{suffix}"
    writer = TableWriter(target)
    writer.write(frame)
    writer.commit()
    rows = read_raw(target)
    assert [r["index"] for r in rows] == [escape(f"r{i}{t}") for i, t in enumerate(texts)]
    assert [r["t"] for r in rows] == [escape(t) for t in texts]
    nested = [r["nested"] if suffix == ".jsonl" else json.loads(r["nested"]) for r in rows]
    assert nested == [{"k": [escape(t)]} for t in texts]


@pytest.mark.parametrize("suffix", FORMATS)
def test_a_surrogate_inside_a_dict_subclass_is_escaped_too(tmp_path: Path, suffix: str) -> None:
    from collections import OrderedDict

    frame = pd.DataFrame({"a": pd.Series([OrderedDict(k=SURROGATE), "plain"], dtype=object)})
    writer = TableWriter(tmp_path / f"out{suffix}")
    writer.write(frame)
    writer.commit()
    rows = read_raw(tmp_path / f"out{suffix}")
    first = rows[0]["a"] if suffix == ".jsonl" else json.loads(rows[0]["a"])
    assert first == {"k": SURROGATE.replace("\udc80", "\\udc80")}
    assert rows[1]["a"] == "plain"
