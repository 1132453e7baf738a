"""5. Memory: 100,000 rows from a generator through ``run_to`` into .jsonl; peak RSS.

The client runs in its own process (this file, given a JSON spec) and reports its peak resident
set size (``resource.getrusage(RUSAGE_SELF).ru_maxrss``) after importing and after the run. The
parent then checks the output: every row present, in input order, without errors.
"""

from __future__ import annotations

import json
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import Section, run_worker
from _server import served

TARGET_MB = 500
CONCURRENCY = 64


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def worker(spec: dict[str, Any]) -> dict[str, Any]:
    """Run in the child: extract ``rows`` generated rows into ``path``."""
    from _common import INSTRUCTIONS, Review, review_text

    import kimi_extract as kx

    ex = kx.Extractor(
        Review,
        instructions=INSTRUCTIONS,
        base_url=spec["base_url"],
        api_key=spec["api_key"],
        concurrency=spec["concurrency"],
        progress=False,
    )
    after_import = _peak_mb()
    rows = ({"id": i, "text": review_text(i)} for i in range(spec["rows"]))
    cpu, wall = time.process_time(), time.perf_counter()
    report = ex.run_to(spec["path"], rows, text="text")
    return {
        "after_import_mb": after_import,
        "peak_mb": _peak_mb(),
        "wall_s": time.perf_counter() - wall,
        "cpu_s": time.process_time() - cpu,
        "ok": report.ok,
        "failed": report.failed,
    }


def _check_output(path: Path, rows: int) -> tuple[int, bool, int]:
    """Lines written, whether ids are 0..rows-1 in order, and rows with an error."""
    count, ordered, errors = 0, True, 0
    with path.open() as handle:
        for expected, line in enumerate(handle):
            record = json.loads(line)
            ordered = ordered and record.get("id") == expected
            errors += record.get("kx_error") is not None
            count += 1
    return count, ordered and count == rows, errors


def measure(quick: bool) -> Section:
    rows = 500 if quick else 100_000
    with tempfile.TemporaryDirectory() as tmp, served() as base_url:
        path = Path(tmp) / "out.jsonl"
        spec = {"base_url": base_url, "rows": rows, "concurrency": CONCURRENCY, "path": str(path)}
        result = run_worker("bench_memory", spec)
        written, ordered, errors = _check_output(path, rows)
        size_mb = path.stat().st_size / 1e6
    peak = result["peak_mb"]
    complete = written == rows and ordered and errors == 0
    return Section(
        key="5",
        title="Memory: run_to over a generator",
        command="python benchmarks/run.py --only 5",
        headers=[
            "rows",
            "peak RSS MB",
            "RSS after import MB",
            "run adds MB",
            "wall s",
            "rows/s",
            "rows written",
            "in order",
            "row errors",
            "output MB",
        ],
        rows=[
            [
                f"{rows:,}",
                f"{peak:.0f}",
                f"{result['after_import_mb']:.0f}",
                f"{peak - result['after_import_mb']:.0f}",
                f"{result['wall_s']:.1f}",
                f"{rows / result['wall_s']:.0f}",
                f"{written:,}",
                "yes" if ordered else "NO",
                errors,
                f"{size_mb:.1f}",
            ]
        ],
        targets=[
            (f"peak RSS <= {TARGET_MB} MB", f"{peak:.0f} MB", peak <= TARGET_MB),
            ("output complete and ordered", "yes" if complete else "no", complete),
        ],
        notes=[
            f"Generator of {{id, text}} dicts, concurrency {CONCURRENCY}, zero-latency "
            "simulator; peak RSS of the client process (ru_maxrss), imports included.",
        ],
        data={"peak_mb": peak, "after_import_mb": result["after_import_mb"]},
    )


if __name__ == "__main__":
    print(json.dumps(worker(json.loads(sys.argv[1]))))
