"""Worker process for the limiter matrix: one client over rows against a rate-limited server.

    python benchmarks/_gateway_client.py '{"client": "kimi_extract", "base_url": ..., ...}'

``client``: ``"kimi_extract"`` (an ``Extractor`` told only ``concurrency``, plus ``options``) or
``"openai+tenacity"``: the openai SDK's ``chat.completions.parse`` per row behind an
``asyncio.Semaphore(concurrency)``, wrapped in tenacity as the OpenAI cookbook's "How to handle
rate limits" does (``wait_random_exponential(min=1, max=60)``, ``stop_after_attempt(6)``, on any
error), over the SDK's own retries (2, honouring ``Retry-After``). A row whose call still fails is
lost. Prints one JSON line: rows ok, wall seconds, errors by type, and (kimi_extract) the run's
``bound_by``.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from typing import Any

from _common import (
    INSTRUCTIONS,
    MAX_COMPLETION_TOKENS,
    MODEL,
    REASONING_EFFORT,
    Review,
    review_texts,
    worker_extractor,
)

PEER = "openai+tenacity"


def _kimi_extract(spec: dict[str, Any]) -> dict[str, Any]:
    ex = worker_extractor(spec)
    texts = review_texts(spec["rows"])
    wall = time.perf_counter()
    out = ex.run(texts)
    wall = time.perf_counter() - wall
    errors = out["kx_error"].dropna()
    report = ex.last_run
    return {
        "ok": int(len(out) - len(errors)),
        "wall_s": wall,
        "errors": dict(Counter(str(e).split(":")[0] for e in errors)),
        "bound_by": report.bound_by if report is not None else None,
    }


def _peer(spec: dict[str, Any]) -> dict[str, Any]:
    import openai
    from tenacity import AsyncRetrying, stop_after_attempt, wait_random_exponential

    client = openai.AsyncOpenAI(base_url=spec["base_url"] + "/v1", api_key=spec["api_key"])
    semaphore = asyncio.Semaphore(spec["concurrency"])
    errors: Counter[str] = Counter()

    async def completion_with_backoff(text: str) -> Any:
        # The cookbook's decorator, written as a loop so it runs inside the semaphore.
        async for attempt in AsyncRetrying(
            wait=wait_random_exponential(min=1, max=60), stop=stop_after_attempt(6), reraise=True
        ):
            with attempt:
                return await client.chat.completions.parse(
                    model=MODEL,
                    messages=[
                        {"role": "system", "content": INSTRUCTIONS},
                        {"role": "user", "content": text},
                    ],
                    response_format=Review,
                    reasoning_effort=REASONING_EFFORT,  # type: ignore[arg-type]
                    max_completion_tokens=MAX_COMPLETION_TOKENS,
                )
        raise AssertionError("unreachable")

    async def row(text: str) -> bool:
        async with semaphore:
            try:
                completion = await completion_with_backoff(text)
            except Exception as exc:  # noqa: BLE001 - a lost row, counted by type
                errors[type(exc).__name__] += 1
                return False
        return completion.choices[0].message.parsed is not None

    async def main() -> int:
        try:
            results = await asyncio.gather(*(row(t) for t in review_texts(spec["rows"])))
        finally:
            await client.close()
        return sum(results)

    wall = time.perf_counter()
    ok = asyncio.run(main())
    wall = time.perf_counter() - wall
    return {"ok": ok, "wall_s": wall, "errors": dict(errors), "bound_by": None}


def main() -> None:
    spec = json.loads(sys.argv[1])
    result = _kimi_extract(spec) if spec["client"] == "kimi_extract" else _peer(spec)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
