"""LangExtract's own aligner on the grounding benchmark's cases (run by ``bench_grounding``).

    python benchmarks/_langextract_worker.py CASES.json RESULT.json

Runs under any interpreter that has ``langextract`` (it needs nothing of kimi_extract, so it can
live in its own virtual environment: langextract pins dependencies kimi_extract's do not accept).
For each case (text, values, tokenizer, mode) it times ``Resolver().align(...)`` (exact then
fuzzy alignment, no model call) and writes each value's character interval or null. Mode
"whole": every value against the whole text. Mode "chunks", as ``lx.extract`` runs it: the text
cut by LangExtract's own ``ChunkIterator`` (``max_char_buffer=1000``, its default regex
tokenizer), each value aligned to the chunk holding its ``anchors`` position, with that chunk's
token and character offsets.
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
    started = time.process_time()
    aligned = list(
        resolver.Resolver().align(
            extractions, text, token_offset=0, char_offset=0, tokenizer_inst=inst
        )
    )
    elapsed = time.process_time() - started
    spans: list[list[int] | None] = []
    for extraction in aligned:
        interval = extraction.char_interval
        if interval is None or interval.start_pos is None or interval.end_pos is None:
            spans.append(None)
        else:
            spans.append([interval.start_pos, interval.end_pos])
    return elapsed, spans


def _chunked(
    text: str, values: list[str], anchors: list[int], tokenizer: str
) -> tuple[float, list[list[int] | None]]:
    from langextract import chunking, resolver
    from langextract.core import data
    from langextract.core import tokenizer as tokenizers

    started = time.process_time()
    regex = tokenizers.RegexTokenizer()
    chunks = list(
        chunking.ChunkIterator(
            text=regex.tokenize(text), max_char_buffer=1000, tokenizer_impl=regex
        )
    )
    inst = tokenizers.UnicodeTokenizer() if tokenizer == "unicode" else None
    spans: list[list[int] | None] = [None] * len(values)
    by_chunk: dict[int, list[int]] = {}
    for i, anchor in enumerate(anchors):
        for c, chunk in enumerate(chunks):
            interval = chunk.char_interval
            if interval.start_pos <= anchor < interval.end_pos or c == len(chunks) - 1:
                by_chunk.setdefault(c, []).append(i)
                break
    for c, members in by_chunk.items():
        chunk = chunks[c]
        extractions = [data.Extraction("value", values[i]) for i in members]
        aligned = resolver.Resolver().align(
            extractions,
            chunk.chunk_text,
            token_offset=chunk.token_interval.start_index,
            char_offset=chunk.char_interval.start_pos,
            tokenizer_inst=inst,
        )
        for i, extraction in zip(members, aligned, strict=True):
            interval = extraction.char_interval
            if interval is not None and interval.start_pos is not None:
                spans[i] = [interval.start_pos, interval.end_pos]
    return time.process_time() - started, spans


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
            if case.get("mode") == "chunks":
                elapsed, spans = _chunked(
                    case["text"], case["values"], case["anchors"], case["tokenizer"]
                )
            else:
                elapsed, spans = _align(case["text"], case["values"], case["tokenizer"])
            times.append(elapsed)
        out["cases"].append({"seconds": statistics.median(times), "runs": times, "spans": spans})
    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump(out, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
