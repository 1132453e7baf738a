"""``ex.iter_rows`` / ``ex.aiter_rows``: finished rows as one-row frames, in completion order,
with ``run``'s columns and guarantees (store, budget, row errors, Ctrl-C)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import textwrap
import threading
from collections import defaultdict
from typing import Any

import pandas as pd
import pytest

import kimi_extract as kx
from kimi_extract.testing import (
    BASE_URL,
    ScriptedBackend,
    VirtualClock,
    api_error,
    completion,
    use_backend,
    use_clock,
)

from ..conftest import INTERRUPTIBLE, WAITING_IN_LIBRARY, Review, ctrl_c_when_ready

BAD = '{"sentiment": "thrilled", "aspects": []}'


def answers() -> ScriptedBackend:
    """Answers by row text: "fails" is always invalid, "flaky" gets a 500 first, the rest an
    answer made from their text."""
    sent: dict[str, int] = defaultdict(int)

    def reply(body: dict[str, Any]) -> Any:
        text = next(m["content"] for m in body["messages"] if m["role"] == "user")
        sent[text] += 1
        if "fails" in text:
            return BAD
        if "flaky" in text and sent[text] == 1:
            return api_error(500, "server_error")
        sentiment = "negative" if "bad" in text else "positive"
        return completion({"sentiment": sentiment, "aspects": text.split()[:2]}, prompt_tokens=90)

    return ScriptedBackend(reply)


def extractor(**options: Any) -> kx.Extractor[Any]:
    return kx.Extractor(
        Review, base_url=BASE_URL, api_key="sk-test-0123456789", progress=False, **options
    )


DATA = pd.DataFrame(
    {
        "review": ["good lid", "bad handle", "it fails", "flaky spout", "good base", "bad cord"],
        "shop": ["a", "b", "c", "d", "e", "f"],
    },
    index=pd.Index([10, 11, 12, 13, 14, 15], name="id"),
)


def without_latency(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=["kx_latency_s"])


@pytest.mark.parametrize("lazy", [False, True])
def test_iter_rows_gives_runs_rows_and_values(lazy):
    """The rows of iter_rows, put back in input order, are run's frame (row errors included)."""
    ex = extractor(concurrency=3)

    def data() -> Any:
        if not lazy:
            return DATA
        return ({"review": r, "shop": s} for r, s in zip(DATA.review, DATA.shop, strict=True))

    with use_backend(answers()), use_clock(VirtualClock()):
        expected = ex.run(data(), text="review")
        rows = list(ex.iter_rows(data(), text="review"))
    assert all(len(row) == 1 for row in rows)
    assert all(list(row.columns) == list(expected.columns) for row in rows)
    together = pd.concat(rows).sort_index()
    pd.testing.assert_frame_equal(without_latency(together), without_latency(expected))
    assert together.loc[together.index[2], "kx_error"].startswith("ValidationFailedError")


def test_rows_come_in_completion_order():
    """The first row's answer is held until the consumer has the second row: the second comes
    first."""
    handed = threading.Event()

    class HoldFirst(ScriptedBackend):
        async def post(self, url: str, payload: bytes) -> Any:
            text = json.loads(payload)["messages"][-1]["content"]
            if text == "first":
                await asyncio.to_thread(handed.wait, 30)
            return await super().post(url, payload)

    backend = HoldFirst(lambda body: {"sentiment": "neutral", "aspects": []})
    ex = extractor(concurrency=2)
    order = []
    with use_backend(backend):
        for row in ex.iter_rows(["first", "second"]):
            order.append(row["input"].iloc[0])
            handed.set()
    assert order == ["second", "first"]


def test_aiter_rows_in_completion_order_too():
    class HoldFirst(ScriptedBackend):
        handed: asyncio.Event | None = None

        async def post(self, url: str, payload: bytes) -> Any:
            text = json.loads(payload)["messages"][-1]["content"]
            if text == "first":
                assert HoldFirst.handed is not None
                # Held until the consumer has a row (a generous bound: a run that handed over
                # no row before this one finished would otherwise wait here for ever).
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(HoldFirst.handed.wait(), 30)
            return await super().post(url, payload)

    ex = extractor(concurrency=2)

    async def main() -> list[str]:
        HoldFirst.handed = asyncio.Event()
        order = []
        async for row in ex.aiter_rows(["first", "second"]):
            order.append(row["input"].iloc[0])
            HoldFirst.handed.set()
        return order

    with use_backend(HoldFirst(lambda body: {"sentiment": "neutral", "aspects": []})):
        assert asyncio.run(main()) == ["second", "first"]


def test_the_run_ends_the_iteration_even_when_it_ends_while_rows_wait():
    """The consumer takes the first row, then waits until the run has ended (told by a hook):
    the second row and the run's end were both queued meanwhile, and iteration still ends."""
    ended = asyncio.Event()

    class End:
        def on_run_end(self, event: Any) -> None:
            ended.set()

    ex = extractor(concurrency=1, hooks=[End()])

    async def main() -> list[str]:
        seen = []
        async for row in ex.aiter_rows(["first", "second"]):
            seen.append(row["input"].iloc[0])
            if len(seen) == 1:
                await asyncio.wait_for(ended.wait(), 30)
        return seen

    async def bounded() -> list[str]:
        return await asyncio.wait_for(main(), 60)  # a generous bound: it hung, not failed

    with use_backend(ScriptedBackend(lambda body: {"sentiment": "neutral", "aspects": []})):
        assert asyncio.run(bounded()) == ["first", "second"]


def test_a_row_handed_over_is_in_the_store(tmp_path):
    """Stop reading after the first row: a rerun serves that row from the store."""
    store = tmp_path / "store.sqlite3"
    ex = extractor(store=store, concurrency=1)
    with use_backend(answers()):
        first = next(iter(ex.iter_rows(DATA, text="review")))
    with use_backend(ScriptedBackend([])) as nothing:
        again = ex.run(DATA.loc[first.index], text="review")
    assert not nothing.requests
    assert bool(again["kx_from_store"].iloc[0])
    pd.testing.assert_series_equal(again["sentiment"], first["sentiment"])


def test_a_budget_stop_raises_after_the_rows_as_run_does():
    ex = extractor(concurrency=1, max_completion_tokens=200, max_total_tokens=1_000)
    with use_backend(answers()), pytest.raises(kx.BudgetExceeded) as by_run:
        ex.run(DATA, text="review")
    rows = []
    with use_backend(answers()), pytest.raises(kx.BudgetExceeded) as by_iter:
        for row in ex.iter_rows(DATA, text="review"):
            rows.append(row)
    assert 0 < len(rows) < len(DATA)
    assert by_iter.value.partial is not None and by_run.value.partial is not None
    pd.testing.assert_frame_equal(
        without_latency(by_iter.value.partial), without_latency(by_run.value.partial)
    )
    assert by_iter.value.partial["kx_error"].str.startswith("budget").sum() >= 1


def test_column_options_are_checked_at_the_call():
    ex = extractor()
    with pytest.raises(kx.ConfigurationError, match="no_such_column|not a column|column"):
        ex.iter_rows(DATA, text="no_such_column")
    with pytest.raises(kx.ConfigurationError):
        ex.aiter_rows(DATA, text=3)  # type: ignore[arg-type]


SCRIPT = (
    INTERRUPTIBLE
    + WAITING_IN_LIBRARY
    + textwrap.dedent(
        """
    import sys
    import kimi_extract as kx
    from kimi_extract.simulator import Reply, Simulator
    from pydantic import BaseModel

    class Out(BaseModel):
        value: str

    def answer(request):
        if request.user_text.startswith("quick"):
            return Reply(content={"value": request.user_text})
        return Reply(delay=60)

    texts = [f"quick {i}" for i in range(3)] + [f"slow {i}" for i in range(17)]
    with Simulator(responder=answer) as sim:
        ex = kx.Extractor(Out, base_url=sim.base_url, api_key=sim.api_key, progress=False,
                          concurrency=4, store=sys.argv[1])
        handed = 0
        tell_when(lambda: handed == 3, lambda: "three")
        try:
            for row in ex.iter_rows(texts):
                handed += 1
        except kx.RunInterrupted as exc:
            partial = exc.partial
            done = partial["value"].notna().sum()
            not_run = (partial["kx_error"] == "not run: interrupted").sum()
            print("interrupted", handed, "handed over 3" in str(exc), len(partial), done,
                  not_run, flush=True)
    """
    )
)


def test_ctrl_c_during_iter_rows_raises_run_interrupted_with_every_finished_row(tmp_path):
    _, out, err, code = ctrl_c_when_ready(
        [SCRIPT, str(tmp_path / "store.sqlite3")], lambda first: first.strip() == "three"
    )
    # 3 rows handed over (and said so), all 20 in .partial: the 3 with values, 17 not run.
    assert out.split() == ["interrupted", "3", "True", "20", "3", "17"], out + err
    assert code == 0, err
