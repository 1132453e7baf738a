"""A regression sweep for the limiter: many rate-limit shapes, on a virtual clock.

    python benchmarks/limiters_sweep.py --save before.json          # on the old code
    python benchmarks/limiters_sweep.py --compare before.json       # on the new code
    python benchmarks/limiters_sweep.py --refusal-s 0.01 --save x.json
    python benchmarks/limiters_sweep.py --rank 20 --load x.json      # furthest from their bound

The limiter matrix (section 7, ``limiters_virtual.py``) has 52 cells chosen for the issue's
targets; a change that meets more of them can still make a shape outside it much slower. This
runs 864: fixed and sliding windows of 1, 5, 10, 30 and 60 s at 60, 600 and 6,000 requests per
minute; token buckets of burst 1, 10 and 100 at the same rates; concurrency limits of 2, 10 and
50; 3 % random refusals on a 10 s window, a bucket and a concurrency limit; a TPM in 10 s and 60 s
windows; a limit that halves after 30 s; each with Kimi's 429 text, a generic 429 with
``Retry-After`` and a bare one; answers of 0.3, 1 and 8 s; runs of 100 and 600 rows; 100 workers.
Each is the real ``Transport`` and ``Limiter`` against ``ratelimits.Shape`` on the virtual clock
of ``tests/http/virtual_gateway.py``, with the retry jitter seeded: the same code gives the same
figures on any machine. About 3 minutes.

``--compare`` prints how many shapes finish more than 10 % sooner or later than the saved run,
rows lost in either, and the shapes that got slower (or refuse 5 points more), worst first.
``--rank N`` prints the N cases that end the most seconds past the soonest their limit allows
(``bound``: no refusals, every request sent as the limit has room, 100 at a time), with the
ratio: where the limiter leaves most time unused (1/s token buckets of burst 1 were at 1.48x,
886-900 s for 600 rows that could end by 599-607 s). ``--load`` ranks a saved run instead of
running one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent)]

from tests.http.virtual_gateway import Shape, run  # noqa: E402

WORKERS = 100
STYLES = ("bare", "retry-after", "kimi")
LATENCIES = (0.3, 1.0, 8.0)
ROWS = (100, 600)
#: A shape is "slower" below this ratio of the old end time to the new, "faster" above its
#: inverse.
SLOWER = 0.9


def shapes() -> list[dict[str, Any]]:
    """The sweep's rate-limit shapes (``ratelimits.Shape`` keyword arguments)."""
    found: list[dict[str, Any]] = []
    for kind, window in itertools.product(("fixed", "sliding"), (1.0, 5.0, 10.0, 30.0, 60.0)):
        for per_minute in (60, 600, 6000):
            found.append({"kind": kind, "per_minute": per_minute, "window_s": window})
    for per_minute, burst in itertools.product((60, 600, 6000), (1, 10, 100)):
        found.append({"kind": "bucket", "per_minute": per_minute, "burst": burst})
    for slots in (2, 10, 50):
        found.append({"kind": "concurrency", "concurrency": slots})
    # Random refusals (3 %, seeded) on a window, a bucket and a concurrency limit: one refusal
    # alone may be random, and a rule that reads it as a limit costs here.
    for limit in (
        {"kind": "sliding", "per_minute": 600, "window_s": 10.0},
        {"kind": "bucket", "per_minute": 600, "burst": 10},
        {"kind": "concurrency", "concurrency": 10},
    ):
        found.append({**limit, "random_share": 0.03, "seed": 1})
    # A TPM (~42 tokens a request with no padding: about 10 requests/s) in 10 s and 60 s
    # windows, and a limit that halves mid-run.
    for kind, window in (("sliding", 10.0), ("fixed", 60.0)):
        found.append({"kind": kind, "per_minute": 25_200, "unit": "tokens", "window_s": window})
    found.append(
        {
            "kind": "sliding",
            "per_minute": 600,
            "window_s": 10.0,
            "change_at": 30.0,
            "change_to": 300,
        }
    )
    return found


def sweep(refusal_s: float) -> dict[str, list[float]]:
    """Every case: end time, requests refused, requests sent, rows lost."""
    out: dict[str, list[float]] = {}
    for shape, style, latency, rows in itertools.product(shapes(), STYLES, LATENCIES, ROWS):
        o = run(
            Shape(**shape),
            rows=rows,
            style=style,
            latency_s=latency,
            workers=WORKERS,
            refusal_s=refusal_s,
        )
        key = json.dumps([shape, style, latency, rows])
        out[key] = [round(o.end, 2), o.gateway.refused(), len(o.gateway.attempts), len(o.lost)]
    return out


def compare(old: dict[str, list[float]], new: dict[str, list[float]]) -> list[str]:
    """Lines saying how ``new`` differs from ``old`` (module docstring)."""
    worse, faster, lost_old, lost_new = [], 0, 0, 0
    for key, (end_old, refused_old, sent_old, lost_o) in old.items():
        if key not in new:
            continue
        end_new, refused_new, sent_new, lost_n = new[key]
        lost_old, lost_new = lost_old + int(lost_o), lost_new + int(lost_n)
        ratio = end_old / end_new if end_new else 1.0
        share_old, share_new = refused_old / sent_old, refused_new / sent_new
        if ratio < SLOWER or share_new > share_old + 0.05:
            worse.append((ratio, share_old, share_new, key, end_old, end_new))
        faster += ratio > 1 / SLOWER
    lines = [
        f"cases {len(old)}: {faster} more than 10 % sooner, {len(worse)} slower or refusing "
        f"more; rows lost {lost_old} before, {lost_new} now"
    ]
    unmatched = sum(1 for key in new if key not in old)
    if unmatched:
        lines[0] += f" ({unmatched} cases not in the saved run: save a new one to compare them)"
    for ratio, share_old, share_new, key, end_old, end_new in sorted(worse):
        lines.append(
            f"{ratio:.2f}x  refused {share_old:.1%} -> {share_new:.1%}  "
            f"{end_old:.1f} s -> {end_new:.1f} s  {key}"
        )
    return lines


def bound(shape: dict[str, Any], latency: float, rows: int) -> float | None:
    """The soonest ``rows`` can end under ``shape`` with answers of ``latency`` seconds: with no
    refusal, each request sent as soon as the limit has room (a window's count at once as each
    window begins, a bucket's burst at once and then its rate) and ``WORKERS`` at a time. None
    for the shapes it does not model (random refusals, a token limit, a limit that changes)."""
    if any(key in shape for key in ("random_share", "unit", "change_at")):
        return None
    if shape["kind"] in ("fixed", "sliding"):
        per_window = shape["per_minute"] * shape["window_s"] / 60
        soonest = (math.ceil(rows / per_window) - 1) * shape["window_s"] + latency
    elif shape["kind"] == "bucket":
        soonest = max(0, rows - shape["burst"]) / (shape["per_minute"] / 60) + latency
    else:
        soonest = math.ceil(rows / shape["concurrency"]) * latency
    return max(soonest, math.ceil(rows / WORKERS) * latency)


def rank(figures: dict[str, list[float]], count: int) -> list[str]:
    """The ``count`` cases that end the most seconds past their ``bound``, most first."""
    found = []
    for key, (end, refused, sent, _lost) in figures.items():
        shape, style, latency, rows = json.loads(key)
        soonest = bound(shape, latency, rows)
        if soonest is not None and soonest > 0:
            found.append((end - soonest, end / soonest, end, soonest, refused, sent, key))
    found.sort(key=lambda case: -case[0])
    return [
        f"+{past:.0f} s ({ratio:.2f}x): {end:.1f} s, bound {soonest:.1f} s, "
        f"{refused:.0f} of {sent:.0f} refused  {key}"
        for past, ratio, end, soonest, refused, sent, key in found[:count]
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--refusal-s", type=float, default=0.0, help="each 429 read this late")
    parser.add_argument("--save", type=Path, help="write the figures to this JSON file")
    parser.add_argument("--compare", type=Path, help="compare with a file --save wrote")
    parser.add_argument("--rank", type=int, help="print this many cases furthest from their bound")
    parser.add_argument("--load", type=Path, help="rank (or compare) a file --save wrote")
    args = parser.parse_args()
    figures = json.loads(args.load.read_text()) if args.load else sweep(args.refusal_s)
    if args.save:
        args.save.write_text(json.dumps(figures))
    if args.compare:
        print("\n".join(compare(json.loads(args.compare.read_text()), figures)))
    if args.rank:
        print("\n".join(rank(figures, args.rank)))
    if not args.save and not args.compare and not args.rank:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
