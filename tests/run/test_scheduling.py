"""Engine scheduling against the simulator: cache-warm first request, generator input with
bounded pending work, run_to output complete and ordered, limits learned from 429s."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.simulator import Reply, Simulator

from ..conftest import LONG_INSTRUCTIONS, Review, chat_requests, ok_exchanges


def test_cache_warm_sends_one_request_before_fan_out(sim, make_extractor):
    out = make_extractor(instructions=LONG_INSTRUCTIONS, concurrency=8).run(
        [f"review {i}: fine" for i in range(24)]
    )
    assert out["kx_error"].isna().all()
    history = chat_requests(sim)
    first, rest = history[0], history[1:]
    assert all(h.t_start >= first.t_end for h in rest)
    writes = [h.usage["prompt_tokens_details"]["cache_write_tokens"] for h in history]
    cached = [h.usage["prompt_tokens_details"]["cached_tokens"] for h in history]
    assert writes[0] > 0 and cached[0] == 0
    # Every later row reads the whole shared prefix the first request wrote.
    assert all(c >= writes[0] - 64 for c in cached[1:])


def test_without_warm_up_concurrent_first_requests_all_miss(sim, make_extractor):
    sim.responder = lambda r: Reply(delay=0.2)  # keep the first wave in flight together
    make_extractor(instructions=LONG_INSTRUCTIONS, concurrency=8, cache_warm=False).run(
        [f"review {i}: fine" for i in range(8)]
    )
    history = chat_requests(sim)
    misses = [h for h in history if h.usage["prompt_tokens_details"]["cached_tokens"] == 0]
    assert len(misses) == 8  # each of them paid to write the same prefix


def test_generator_input_has_bounded_pending_work(sim, make_extractor):
    concurrency = 4
    pulled = 0
    worst = 0

    def rows():
        nonlocal pulled, worst
        for i in range(60):
            pulled += 1
            worst = max(worst, pulled - len(ok_exchanges(sim)))
            yield {"review": f"row {i}", "n": i}

    # Early rows are slow, so later ones finish first and must wait in the reorder buffer.
    sim.responder = lambda r: Reply(delay=0.3) if r.user_text.endswith((" 0", " 1")) else None
    out = make_extractor(concurrency=concurrency).run(rows(), text="review")
    assert len(out) == 60 and list(out["n"]) == list(range(60))
    assert list(out.index) == list(range(60))
    assert worst <= 2 * concurrency + 1


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet", ".csv"])
def test_run_to_writes_every_row_in_order(sim, make_extractor, tmp_path: Path, suffix):
    sim.responder = lambda r: Reply(delay=0.05) if r.index % 7 == 0 else None
    path = tmp_path / f"out{suffix}"
    rows = ({"review": f"review {i}", "n": i} for i in range(250))
    report = make_extractor(concurrency=16).run_to(path, rows, text="review")
    assert report.rows == 250 and report.ok == 250
    if suffix == ".jsonl":
        back = pd.read_json(path, lines=True)
        assert all(isinstance(a, list) for a in back["aspects"])
    elif suffix == ".parquet":
        back = pd.read_parquet(path)
        assert all(isinstance(json.loads(a), list) for a in back["aspects"])
    else:
        back = pd.read_csv(path)
    assert len(back) == 250
    assert list(back["n"]) == list(range(250))
    assert back["kx_error"].isna().all()
    assert back["kx_prompt_tokens"].sum() == sum(
        h.usage["prompt_tokens"] for h in ok_exchanges(sim)
    )
    assert not list(tmp_path.glob(".*.part"))


def test_run_to_writes_to_a_temp_file_and_renames_at_the_end(
    sim, make_extractor, tmp_path: Path, monkeypatch
):
    monkeypatch.setattr("kimi_extract.pipeline.output.WRITE_BATCH_ROWS", 50)
    path = tmp_path / "out.jsonl"
    seen: list[tuple[bool, list[int]]] = []

    def look(request):
        if request.user_text == "review 150":  # after the first 50-row batches were written
            parts = [p.stat().st_size for p in tmp_path.glob(".out.jsonl.*.part")]
            seen.append((path.exists(), parts))
        return None

    sim.responder = look
    make_extractor(concurrency=8).run_to(path, (f"review {i}" for i in range(160)))
    assert seen and seen[0][0] is False  # only the temp file (the run's own), with rows in it
    assert len(seen[0][1]) == 1 and seen[0][1][0] > 0
    assert path.exists() and not list(tmp_path.glob(".out.jsonl*.part"))
    assert len(pd.read_json(path, lines=True)) == 160


def test_run_to_checks_the_path_before_any_request(sim, make_extractor, tmp_path: Path):
    with pytest.raises(kx.ConfigurationError, match="jsonl"):
        make_extractor().run_to(tmp_path / "out.xlsx", ["a"])
    with pytest.raises(kx.ConfigurationError, match="does not exist"):
        make_extractor().run_to(tmp_path / "missing" / "out.jsonl", ["a"])
    assert sim.history == []


def test_learns_server_concurrency_limit_and_loses_nothing():
    with Simulator(max_concurrency=4, responder=lambda r: Reply(delay=0.05)) as server:
        ex = kx.Extractor(
            Review,
            base_url=server.base_url,
            api_key=server.api_key,
            concurrency=32,
            progress=False,
        )
        out = ex.run([f"row {i}" for i in range(80)])
        assert out["kx_error"].isna().all()
        throttled = [h for h in server.history if h.status == 429]
        # Only the opening window (32, below every Kimi tier's 50) overshoots this tiny limit;
        # once the 429 message names it, nothing sent later is refused. In the order of events
        # (no clock): every refusal arrived before the first retry of a refused row, which the
        # client sends only after reading a 429 and waiting the 1 s it asks for.
        assert 0 < len(throttled) <= 32 - 4
        refused_rows = {h.body["messages"][-1]["content"] for h in throttled}
        first_retry = next(
            i
            for i, h in enumerate(server.history)
            if h.body["messages"][-1]["content"] in refused_rows and h.status == 200
        )
        assert all(h.index < server.history[first_retry].index for h in throttled)
        assert ex.last_run is not None and ex.last_run.throttles == len(throttled)


def test_client_rpm_limit_keeps_server_quiet(fast_time):
    # The client's pacing and the server's window on one clock, 40x faster than real time.
    with Simulator(rpm=120, clock=fast_time.now) as server:
        ex = kx.Extractor(
            Review,
            base_url=server.base_url,
            api_key=server.api_key,
            concurrency=8,
            rpm=120,
            progress=False,
        )
        out = ex.run([f"row {i}" for i in range(20)])
        assert out["kx_error"].isna().all()
        assert all(h.status == 200 for h in server.history)


@pytest.mark.parametrize("rows", [1, 3, 40])
def test_more_workers_than_rows_never_deadlock(sim, make_extractor, rows):
    # In-memory input looks ahead over all its rows; workers left over when the input ends must
    # all stop (a waiter left behind would hang the run).
    out = make_extractor(concurrency=64).run([f"review {i}" for i in range(rows)])
    assert len(out) == rows and out["kx_error"].isna().all()
    gen = make_extractor(concurrency=64).run(f"review {i}" for i in range(rows))
    assert len(gen) == rows
