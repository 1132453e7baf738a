"""Run the benchmark suite: kimi_extract vs its peers against the local Kimi simulator.

    python benchmarks/run.py                  # all; writes benchmarks/RESULTS.md + results.png
    python benchmarks/run.py --only 1,3       # some measurements
    python benchmarks/run.py --quick --out /tmp/bench   # a reduced smoke run
    python benchmarks/run.py --peers openai    # only this peer ("none": no peers)
    python benchmarks/run.py --render          # rewrite RESULTS.md + PNG from results.json

Every run keeps its sections in ``<out>/results.json``; a run with ``--only`` replaces those
sections and renders RESULTS.md from all of them, so one section can be remade (say, the CPU
section on a quiet machine) without running the rest. Each section records its own command,
time, and the machine's load average before and after it.

Measurements (see each ``bench_*.py``): 1 CPU per row at zero latency, 2 latency-bound
throughput, 3 rate-limited server, 4 prompt-cache warm-up, 5 memory of ``run_to``, 6 import
time, 7 the limiter matrix (every limiter shape, limits untold and told), 8 one RPM quota
shared by a Dask cluster (4 worker processes), 9 grounding: alignment time and recall vs
LangExtract's resolver (its interpreter named by ``KX_LANGEXTRACT_PYTHON``), 10 ``evaluate``
on 100,000 rows against gold (no server), 11 the result store's backends (SQLite vs
PostgreSQL; needs ``initdb``/``pg_ctl``) and 4 Dask workers on one PostgreSQL store, 12 long
documents: recall, duplicates and cost of overlap, merging and passes vs LangExtract. Peers
(openai SDK, instructor) that are not installed are skipped and said so; install them with
``pip install -e '.[bench]'``.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_cache  # noqa: E402
import bench_cpu  # noqa: E402
import bench_dask_limits  # noqa: E402
import bench_evaluate  # noqa: E402
import bench_grounding  # noqa: E402
import bench_import  # noqa: E402
import bench_latency  # noqa: E402
import bench_limiters  # noqa: E402
import bench_long_documents  # noqa: E402
import bench_memory  # noqa: E402
import bench_rate_limit  # noqa: E402
import bench_store_backends  # noqa: E402
import report  # noqa: E402
from _common import PEERS_ENV, Section  # noqa: E402

MEASUREMENTS = {
    "1": bench_cpu.measure,
    "2": bench_latency.measure,
    "3": bench_rate_limit.measure,
    "4": bench_cache.measure,
    "5": bench_memory.measure,
    "6": bench_import.measure,
    "7": bench_limiters.measure,
    "8": bench_dask_limits.measure,
    "9": bench_grounding.measure,
    "10": bench_evaluate.measure,
    "11": bench_store_backends.measure,
    "12": bench_long_documents.measure,
}


def _load() -> float:
    return os.getloadavg()[0]


def _previous(path: Path, quick: bool) -> dict[str, Section]:
    """Sections kept by an earlier run into the same directory (same --quick setting)."""
    if not path.exists():
        return {}
    try:
        stored = [Section.from_json(item) for item in json.loads(path.read_text())]
    except (ValueError, TypeError, KeyError):
        return {}
    return {s.key: s for s in stored if s.quick == quick}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    parser.add_argument("--only", default="", help="comma-separated measurement numbers, e.g. 1,3")
    parser.add_argument("--out", type=Path, default=HERE, help="where RESULTS.md and the PNG go")
    parser.add_argument(
        "--peers",
        default=None,
        help="comma-separated peers to run, or 'none' (default: every installed one)",
    )
    parser.add_argument(
        "--render", action="store_true", help="only rewrite the report from results.json"
    )
    args = parser.parse_args(argv)
    if args.peers is not None:
        os.environ[PEERS_ENV] = args.peers
    keys = [k.strip() for k in args.only.split(",") if k.strip()] or list(MEASUREMENTS)
    unknown = [k for k in keys if k not in MEASUREMENTS]
    if unknown:
        parser.error(f"unknown measurement(s) {unknown}; choose from {list(MEASUREMENTS)}")
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/run.py " + shlex.join(sys.argv[1:] if argv is None else argv)
    stored = args.out / "results.json"
    sections = _previous(stored, args.quick)
    for key in [] if args.render else keys:
        measured, load_before, started = report.commit(), _load(), time.perf_counter()
        section = MEASUREMENTS[key](args.quick)
        section.elapsed_s = time.perf_counter() - started
        section.load = (load_before, _load())
        section.finished = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
        section.run_command = command.strip()
        section.quick = args.quick
        if measured != report.commit():
            measured += " (kimi_extract/ changed during the section)"
        section.commit = measured
        sections[key] = section
        print(report.console_table(section))
        print(
            f"({section.elapsed_s:.0f} s; load average {section.load[0]:.2f} -> "
            f"{section.load[1]:.2f} on {os.cpu_count()} CPUs)\n",
            flush=True,
        )
    ordered = [sections[k] for k in MEASUREMENTS if k in sections]
    stored.write_text(json.dumps([s.to_json() for s in ordered], indent=1) + "\n")
    png = args.out / "results.png"
    plotted = report.plot(png, ordered)
    if not plotted:
        print("matplotlib not installed or nothing to plot: no PNG written")
    results = args.out / "RESULTS.md"
    report.write_markdown(results, ordered, plot=png.name if plotted else None, quick=args.quick)
    print(f"wrote {results}, {stored.name}" + (f" and {png.name}" if plotted else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
