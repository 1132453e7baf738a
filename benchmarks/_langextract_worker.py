"""LangExtract's own aligner on the grounding benchmark's cases (run by ``bench_grounding``).

    python benchmarks/_langextract_worker.py CASES.json RESULT.json

Runs under any interpreter that has ``langextract`` (it needs nothing of kimi_extract, so it can
live in its own virtual environment: langextract pins dependencies kimi_extract's do not accept).
For each case (text, values, tokenizer) it times ``Resolver().align(...)`` (exact then fuzzy
alignment, no model call) and writes each value's character interval or null.
"""

from __future__ import annotations

import json
import statistics
import sys
import time
import warnings


def _align(text: str, values: list[str], tokenizer: str) -> tuple[float, list[list[int] | None]]:
    from langextract import resolver
    from langextract.core import data
    from langextract.core import tokenizer as tokenizers

    extractions = [data.Extraction("value", value) for value in values]
    inst = tokenizers.UnicodeTokenizer() if tokenizer == "unicode" else None
    started = time.perf_counter()
    aligned = list(
        resolver.Resolver().align(
            extractions, text, token_offset=0, char_offset=0, tokenizer_inst=inst
        )
    )
    elapsed = time.perf_counter() - started
    spans: list[list[int] | None] = []
    for extraction in aligned:
        interval = extraction.char_interval
        if interval is None or interval.start_pos is None or interval.end_pos is None:
            spans.append(None)
        else:
            spans.append([interval.start_pos, interval.end_pos])
    return elapsed, spans


def main() -> int:
    warnings.simplefilter("ignore")
    import logging

    logging.disable(logging.WARNING)
    cases = json.loads(open(sys.argv[1], encoding="utf-8").read())
    import langextract

    out = {"version": getattr(langextract, "__version__", ""), "cases": []}
    try:
        from importlib.metadata import version

        out["version"] = version("langextract")
    except Exception:  # noqa: BLE001 - the version is a label only
        pass
    for case in cases:
        times, spans = [], None
        for _ in range(case["repeats"]):
            elapsed, spans = _align(case["text"], case["values"], case["tokenizer"])
            times.append(elapsed)
        out["cases"].append({"seconds": statistics.median(times), "runs": times, "spans": spans})
    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(out, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
