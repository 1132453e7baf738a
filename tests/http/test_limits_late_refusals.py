"""429s that come back late, on a virtual clock: a gateway slow to refuse, or a loaded event loop
that reads its 429s late (the limiter matrix's full run met this once, at load 3-11).

A known defect, kept as a strict expected failure until it is fixed: with 30 % random refusals
("engine overloaded") on a concurrency-5 server and each 429 read 0.5 s late, a stall in the
opening restarts the rate at what the server delivered (~1.5/s); the next unnamed 429 cuts it to
what was accepted in the last 2 s, which is nothing, so the rate falls to its 0.2/s floor. The
cut's trial then needs 20 judged sends, more than the 60 s send log holds at that rate: it is
never judged, the rate never grows back, and 200 rows take over 20 minutes instead of 45 s.
A fix needs both a cut that is not measured over too few sends and a trial that ends (judging a
trial by time alone, tried, cut again and again to the floor).
"""

from __future__ import annotations

import pytest

from .virtual_gateway import Shape, dumps, run


@pytest.mark.xfail(strict=True, reason="known defect: the rate held at its floor (docstring)")
def test_late_random_refusals_do_not_hold_the_rate_at_its_floor():
    clean = run(Shape("concurrency", concurrency=5), rows=200, refusal_s=0.5)
    noisy = run(
        Shape("concurrency", concurrency=5, random_share=0.3, seed=1), rows=200, refusal_s=0.5
    )
    assert noisy.ok == 200, dumps(noisy)
    # Random refusals take 30 % of the sends; anything under a third of the rate is a collapse.
    assert noisy.end <= 3 * clean.end, (clean.end, dumps(noisy))


@pytest.mark.parametrize("workaround", ["adaptive=False", "told the concurrency"])
def test_the_documented_workarounds_keep_the_rate(workaround):
    clean = run(Shape("concurrency", concurrency=5), rows=200, refusal_s=0.5)
    options = {"adaptive": False} if workaround == "adaptive=False" else {"workers": 5}
    noisy = run(
        Shape("concurrency", concurrency=5, random_share=0.3, seed=1),
        rows=200,
        refusal_s=0.5,
        **options,
    )
    assert noisy.ok == 200, dumps(noisy)
    assert noisy.end <= 3 * clean.end, (clean.end, dumps(noisy))
