"""6. Import time: ``import kimi_extract`` vs instructor and openai, and the dependency floor.

Each statement runs in a fresh interpreter (one discarded warm-up, then ``repeats`` timed runs;
median), timed inside the process around the statement only. Bytecode caching is allowed for these
processes (``PYTHONDONTWRITEBYTECODE`` unset) so the repository's own modules load from .pyc like
an installed package's. ``python -X importtime`` then shows what ``import kimi_extract`` spends
its time on.
"""

from __future__ import annotations

import os
import subprocess
import sys

from _common import Section, median, peer_available

TARGET_S = 0.7
#: The dependency floor the issue measured when it set TARGET_S.
ISSUE_FLOOR_S = 0.57
#: Modules outside the core dependencies that ``import kimi_extract`` should not load (jsonschema
#: is a dev dependency, used by the simulator's request validation).
OPTIONAL = ("pyarrow", "jsonschema", "openai", "matplotlib", "instructor")

FLOOR = "floor: pandas + pydantic + httpx"
STATEMENTS = (
    ("kimi_extract", "import kimi_extract", None),
    ("openai", "import openai", "openai"),
    ("instructor (lazy module)", "import instructor", "instructor"),
    ("instructor (from_openai, Mode)", "from instructor import from_openai, Mode", "instructor"),
    ("floor: pandas + pydantic + httpx", "import pandas, pydantic, httpx", None),
    ("floor + aiohttp", "import pandas, pydantic, httpx, aiohttp", None),
)


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _time_once(statement: str) -> tuple[float, float, list[str]]:
    """Wall and CPU seconds of ``statement`` in a fresh interpreter, and the ``OPTIONAL`` modules
    in ``sys.modules`` after it."""
    code = (
        "import sys, time; w, c = time.perf_counter(), time.process_time(); "
        f"{statement}; print(time.perf_counter() - w, time.process_time() - c); "
        f"print(' '.join(m for m in {OPTIONAL!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=_env()
    )
    timing, loaded = out.stdout.split("\n")[-3:-1]  # the last two lines (the second may be "")
    wall, cpu = (float(v) for v in timing.split())
    return wall, cpu, loaded.split()


def _import_profile(top: int = 8) -> tuple[list[tuple[str, float]], float]:
    """Under ``import kimi_extract`` (-X importtime, one run): the slowest top-level packages by
    cumulative seconds (they nest: numpy is inside pandas), and kimi_extract's own modules' self
    time."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import kimi_extract"],
        capture_output=True,
        text=True,
        check=True,
        env=_env(),
    )
    packages: dict[str, float] = {}
    own = 0.0
    for line in out.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        head, cumulative, name = line.split("|")
        self_us, name = head.split(":")[1], name.strip()
        if name == "kimi_extract" or name.startswith("kimi_extract."):
            own += int(self_us) / 1e6
        elif "." not in name and not name.startswith("_"):
            packages[name] = int(cumulative) / 1e6
    ranked = sorted(packages.items(), key=lambda item: -item[1])[:top]
    return ranked, own


def measure(quick: bool) -> Section:
    repeats = 1 if quick else 5
    table = []
    times: dict[str, float] = {}
    cpu_times: dict[str, float] = {}
    loaded: dict[str, list[str]] = {}
    for label, statement, requires in STATEMENTS:
        if requires and not peer_available(requires):
            skipped = "skipped (not installed or --peers)"
            table.append([label, f"`{statement}`", skipped, "", "", ""])
            continue
        if quick and label not in ("kimi_extract", FLOOR):
            continue
        if not quick:
            _time_once(statement)  # warm-up: writes bytecode, fills the page cache
        samples = [_time_once(statement) for _ in range(repeats)]
        times[label] = median([wall for wall, _, _ in samples])
        cpu_times[label] = median([cpu for _, cpu, _ in samples])
        loaded[label] = samples[-1][2]
        table.append(
            [
                label,
                f"`{statement}`",
                f"{times[label]:.3f}",
                f"{cpu_times[label]:.3f}",
                " ".join(f"{wall:.2f}" for wall, _, _ in samples),
            ]
        )
    ours, ours_cpu = times["kimi_extract"], cpu_times["kimi_extract"]
    floor_cpu = cpu_times[FLOOR]
    for row in table:
        if row[0] in times:
            row.append(f"{cpu_times[row[0]] / floor_cpu:.2f}x")
    extra = [m for m in loaded["kimi_extract"] if m not in loaded[FLOOR]]
    profile, own = _import_profile()
    notes = [
        f"{repeats} timed run(s) per statement after a warm-up; median (--quick: kimi_extract "
        "and the floor only, no warm-up). Imports are CPU-bound once the files are in the page "
        "cache, so on this shared machine the CPU seconds (`time.process_time`) are the stable "
        "figure and the target is judged on them; wall seconds grow with the machine's load. "
        "'CPU vs floor' divides by the pandas + pydantic + httpx floor's CPU seconds.",
        f"The issue's budget was 0.7 s against a 0.57 s floor measured then (1.23x the floor); "
        f"the floor here is {floor_cpu:.2f} s CPU, so the same budget scaled to this machine is "
        f"{floor_cpu * TARGET_S / ISSUE_FLOOR_S:.2f} s; kimi_extract is "
        f"{ours_cpu / floor_cpu:.2f}x the floor.",
        f"Optional dependencies checked: {', '.join(OPTIONAL)}. Loaded by `import kimi_extract`: "
        + (", ".join(loaded["kimi_extract"]) or "none")
        + "; by the floor alone: "
        + (", ".join(loaded[FLOOR]) or "none")
        + " (pandas 3 imports pyarrow itself when it is installed).",
        "Where `import kimi_extract` spends its time (-X importtime, one run, cumulative s; "
        "packages nest): "
        + ", ".join(f"{name} {seconds:.3f}" for name, seconds in profile)
        + f"; kimi_extract's own modules (self time): {own:.3f}.",
    ]
    return Section(
        key="6",
        title="Import time",
        command="python benchmarks/run.py --only 6",
        headers=["what", "statement", "median wall s", "median CPU s", "wall runs", "CPU vs floor"],
        rows=table,
        targets=[
            (
                f"`import kimi_extract` <= {TARGET_S} s (CPU)",
                f"{ours_cpu:.3f} s CPU ({ours:.3f} s wall)",
                ours_cpu <= TARGET_S,
            ),
            (
                f"same budget relative to the floor (<= {TARGET_S / ISSUE_FLOOR_S:.2f}x its CPU)",
                f"{ours_cpu / floor_cpu:.2f}x",
                ours_cpu / floor_cpu <= TARGET_S / ISSUE_FLOOR_S,
            ),
            (
                "optional dependencies imported lazily (none loaded beyond the floor's)",
                ", ".join(extra) + " loaded" if extra else "none loaded",
                not extra,
            ),
        ],
        notes=notes,
        data={"times": times, "cpu_times": cpu_times, "profile": profile, "own_s": own},
    )
