"""Worker process: run one client (kimi_extract or a peer) over rows and print JSON.

    python benchmarks/_client.py '{"client": "openai", "base_url": ..., "rows": 2000, ...}'

Spec keys: ``client`` ("kimi_extract", "openai", "instructor"), ``base_url``, ``rows``,
``concurrency``, ``warmup`` (rows run first and not measured, default 0), ``repeats`` (default 1),
``instructions`` ("short" or "long"), ``options`` (extra ``Extractor`` keyword arguments; for
the floor, ``session_per_run``),
``details`` (also return each row's cache-write and cached tokens), ``salt`` (a line put before
the instructions, to give a client its own prompt prefix), ``profile`` (kimi_extract only: run the
measured runs under cProfile and return where the time went). Each measured run reports the
process CPU seconds (``time.process_time``: this process only, every thread), wall seconds, rows
ok, errors by type, and usage totals.
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import json
import pstats
import re
import sys
import time
from collections import Counter
from typing import Any

from _common import (
    INSTRUCTIONS,
    MODEL,
    long_instructions,
    review_texts,
    worker_extractor,
)


def _kimi_extract(spec: dict[str, Any], instructions: str) -> list[dict[str, Any]]:
    ex = worker_extractor(spec, instructions)
    if spec.get("warmup"):
        ex.run(review_texts(spec["warmup"], offset=10_000_000))
    profiler = cProfile.Profile() if spec.get("profile") else None
    runs = []
    for repeat in range(spec.get("repeats", 1)):
        texts = review_texts(spec["rows"], offset=repeat * spec["rows"])
        gc.collect()
        if profiler is not None:
            profiler.enable()
        cpu, wall = time.process_time(), time.perf_counter()
        out = ex.run(texts)
        cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
        if profiler is not None:
            profiler.disable()
        report = ex.last_run
        assert report is not None
        errors = out["kx_error"].dropna()
        run: dict[str, Any] = {
            "cpu_s": cpu,
            "wall_s": wall,
            "rows": len(texts),
            "returned": len(out),
            "ok": int(len(out) - len(errors)),
            "errors": dict(Counter(str(e).split(":")[0] for e in errors)),
            "usage": _usage_totals(report.usage),
            "cost": report.usage.cost,
            "retries": report.retries,
            "throttles": report.throttles,
            "from_store": getattr(report, "from_store", 0),
            "bound_by": getattr(report, "bound_by", None),
        }
        if spec.get("details"):
            run["write_tokens"] = [int(v) for v in out["kx_cache_write_tokens"]]
            run["cached_tokens"] = [int(v) for v in out["kx_cached_tokens"]]
        runs.append(run)
    if profiler is not None:
        runs[-1]["profile"] = profile_summary(profiler)
    return runs


def _where(filename: str, function: str) -> str:
    """The group a profiled function belongs to: a kimi_extract module, a package, the standard
    library module, or for C functions the module that defines them ("C sqlite3")."""
    path = filename.replace("\\", "/")
    if filename == "~":  # "<method 'execute' of 'sqlite3.Connection' objects>", "<built-in ...>"
        match = re.search(r"of '([\w.]+)'|built-in method ([\w.]+)", function)
        owner = (match.group(1) or match.group(2)) if match else function
        module = owner.split(".")[0].lstrip("_") if "." in owner else "builtins"
        return "C " + {"posix": "os", "socket": "socket", "asyncio": "asyncio"}.get(module, module)
    if "/kimi_extract/" in path:
        return "kimi_extract." + path.split("/kimi_extract/")[-1].removesuffix(".py").replace(
            "/", "."
        )
    if "-packages/" in path:
        return path.split("-packages/")[-1].split("/")[0].removesuffix(".py")
    parts = path.split("/")
    for marker in ("asyncio", "json", "sqlite3", "concurrent", "email", "http", "logging"):
        if marker in parts:
            return "stdlib " + marker
    return "stdlib " + parts[-1].removesuffix(".py")


def profile_summary(profiler: cProfile.Profile, top: int = 15) -> dict[str, Any]:
    """Self time (cProfile tottime) by group and the ``top`` functions, as shares of the total."""
    stats = pstats.Stats(profiler)
    entries = stats.stats  # type: ignore[attr-defined]
    total = sum(entry[2] for entry in entries.values()) or 1.0
    groups: Counter[str] = Counter()
    functions = []
    for (filename, line, function), (_, calls, tottime, cumtime, _) in entries.items():
        group = _where(filename, function)
        groups[group] += tottime
        name = f"{group}:{function}" if filename != "~" else function.strip("<>")
        functions.append((name, line, calls, tottime / total, cumtime / total))
    functions.sort(key=lambda item: -item[3])
    return {
        "groups": [(g, t / total) for g, t in groups.most_common()],
        "functions": functions[:top],
        "total_s": total,
    }


def _peer(spec: dict[str, Any], instructions: str) -> list[dict[str, Any]]:
    from peers import make_runner

    import kimi_extract as kx

    pricing = kx.MODELS[MODEL].pricing

    async def main() -> list[dict[str, Any]]:
        runner = make_runner(
            spec["client"],
            spec["base_url"],
            spec["api_key"],
            instructions,
            **spec.get("options", {}),
        )
        try:
            if spec.get("warmup"):
                await runner.run(review_texts(spec["warmup"], offset=10_000_000), 64)
            runs = []
            for repeat in range(spec.get("repeats", 1)):
                texts = review_texts(spec["rows"], offset=repeat * spec["rows"])
                gc.collect()
                cpu, wall = time.process_time(), time.perf_counter()
                result = await runner.run(texts, spec["concurrency"])
                cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
                usages = [kx.Usage.from_api(u) if u else None for u in result.usages]
                total = sum((u for u in usages if u is not None), kx.Usage())
                run: dict[str, Any] = {
                    "cpu_s": cpu,
                    "wall_s": wall,
                    "rows": len(texts),
                    "returned": len(texts),
                    "ok": result.ok,
                    "errors": dict(result.errors),
                    "usage": _usage_totals(total),
                    "cost": total.priced(pricing).cost,
                }
                if spec.get("details"):
                    run["write_tokens"] = [u.cache_write_tokens if u else 0 for u in usages]
                    run["cached_tokens"] = [u.cached_tokens if u else 0 for u in usages]
                runs.append(run)
            return runs
        finally:
            await runner.close()

    return asyncio.run(main())


def _usage_totals(usage: Any) -> dict[str, int]:
    return {
        "prompt": usage.prompt_tokens,
        "cached": usage.cached_tokens,
        "cache_write": usage.cache_write_tokens,
        "completion": usage.completion_tokens,
    }


def main() -> None:
    spec = json.loads(sys.argv[1])
    instructions = long_instructions() if spec.get("instructions") == "long" else INSTRUCTIONS
    if spec.get("salt"):
        instructions = f"[{spec['salt']}]\n{instructions}"
    if spec["client"] == "kimi_extract":
        runs = _kimi_extract(spec, instructions)
    else:
        runs = _peer(spec, instructions)
    print(json.dumps({"runs": runs}))


if __name__ == "__main__":
    main()
