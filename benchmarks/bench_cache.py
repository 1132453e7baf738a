"""4. Prompt cache: 1,000 rows sharing a ~3,000-token prefix, cache-warm vs naive fan-out.

Each run gets a fresh simulator process (empty cache), 200 ms per request, concurrency 100. The
simulator's cache writes every uncached full block of a prompt, so every request writes its own
short tail; a request "writes the prefix" when its ``cache_write_tokens`` cover at least half of
the shared prefix. Cost uses the package's kimi-k3.1-pro prices for every client.
"""

from __future__ import annotations

import contextlib
from typing import Any

from _common import Section, long_instructions, peer_available, run_worker
from _server import one_server, served

LATENCY_S = 0.2


def _prefix_tokens() -> int:
    from kimi_extract.tokens import count_text_tokens

    return count_text_tokens(long_instructions())


def measure(quick: bool) -> Section:
    rows, concurrency = (40, 10) if quick else (1000, 100)
    prefix = _prefix_tokens()
    configs: list[tuple[str, str, dict[str, Any]]] = [
        ("kimi_extract (cache-warm, default)", "kimi_extract", {}),
        ("kimi_extract (cache_warm=False)", "kimi_extract", {"cache_warm": False}),
    ]
    if peer_available("openai") and not quick:  # --quick: peers run in sections 1 and 3
        configs.append(("openai SDK .parse (naive)", "openai", {}))
    table = []
    figures: dict[str, dict[str, float]] = {}
    runs: list[dict[str, Any]] = []
    with contextlib.ExitStack() as stack:
        # A fresh server (empty cache) per client; --quick shares one and gives every client its
        # own prefix instead (a salt line first), which keeps their cache entries apart.
        fresh = stack.enter_context(one_server(ttft_s=LATENCY_S)) if quick else None
        for number, (_, client, options) in enumerate(configs):
            with fresh() if fresh else served(ttft_s=LATENCY_S) as base_url:
                spec = {
                    "client": client,
                    "base_url": base_url,
                    "rows": rows,
                    "concurrency": concurrency,
                    "instructions": "long",
                    "salt": f"client {number}" if quick else "",
                    "options": options,
                    "details": True,
                }
                runs.append(run_worker("_client", spec)["runs"][0])
    for (label, _, _), run in zip(configs, runs, strict=True):
        usage = run["usage"]
        prefix_writes = sum(1 for w in run["write_tokens"] if w >= prefix / 2)
        share = usage["cached"] / usage["prompt"] if usage["prompt"] else 0.0
        figures[label] = {
            "prefix_writes": prefix_writes,
            "write_tokens": usage["cache_write"],
            "cached_share": share,
            "cost": run["cost"],
        }
        table.append(
            [
                label,
                run["ok"],
                prefix_writes,
                f"{usage['cache_write']:,}",
                f"{usage['prompt']:,}",
                f"{share:.1%}",
                f"{run['cost']:.4f}",
                f"{run['wall_s']:.1f}",
            ]
        )
    base_cost = figures[configs[0][0]]["cost"]
    for row, (label, _, _) in zip(table, configs, strict=True):
        row.append(f"{figures[label]['cost'] / base_cost:.2f}x")
    warm = figures[configs[0][0]]
    return Section(
        key="4",
        title="Prompt cache: cache-warm vs naive fan-out",
        command="python benchmarks/run.py --only 4",
        headers=[
            "client",
            "rows ok",
            "prefix writes",
            "write tokens",
            "prompt tokens",
            "cached share",
            "cost USD",
            "wall s",
            "cost vs warm",
        ],
        rows=table,
        targets=[
            (
                "exactly 1 write of the shared prefix (cache-warm)",
                str(int(warm["prefix_writes"])),
                warm["prefix_writes"] == 1,
            ),
        ],
        notes=[
            f"{rows:,} rows, concurrency {concurrency}, shared prefix ~{prefix:,} tokens of "
            f"instructions (+ the schema), simulator ttft_s={LATENCY_S}, 64-token cache blocks.",
            "'write tokens' includes every row's own uncached tail blocks, which any client "
            "writes; 'prefix writes' counts the requests that wrote the shared prefix.",
        ],
        data={"figures": figures},
    )
