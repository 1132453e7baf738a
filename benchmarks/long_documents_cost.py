"""What the long-document options cost in tokens, on section 12's documents (no request sent).

    python benchmarks/long_documents_cost.py

For the first document of each kind (a 100-page PDF, 200,000-character Markdown and HTML) at
section 12's chunk sizes: the preamble's tokens per chunk (``run.documents.preamble``: the last
line of the chunk before, and a continued table's header), the prompt tokens the default
``chunk_overlap`` adds, and ``estimate_documents`` at ``passes`` 1, 2 and 3 (an upper bound:
every chunk priced at every pass) at the list price of the benchmark's model.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))


def main() -> None:
    from _long_documents import INSTRUCTIONS, Invoice, make_html, make_markdown, make_pdf
    from bench_long_documents import CHUNK_CHARS, EFFORT, MODEL

    import kimi_extract as kx
    from kimi_extract.media.chunks import chunk_contexts, plan_chunks
    from kimi_extract.media.documents import load_pages
    from kimi_extract.run.documents import DEFAULT_OVERLAP_SHARE, MAX_DEFAULT_OVERLAP, preamble
    from kimi_extract.tokens import count_text_tokens

    ex = kx.Extractor(
        Invoice,
        instructions=INSTRUCTIONS,
        base_url="http://127.0.0.1:9",  # estimates send nothing
        api_key="sk-estimate-only",
        model=MODEL,
        reasoning_effort=EFFORT,
        progress=False,
        store=False,
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        made = [
            ("pdf", make_pdf(folder)),
            ("md", make_markdown(folder)),
            ("html", make_html(folder)),
        ]
        for kind, document in made:
            size = CHUNK_CHARS[kind]
            _, pages = load_pages(document.path)
            overlap = min(int(size * DEFAULT_OVERLAP_SHARE), MAX_DEFAULT_OVERLAP)
            chunks = plan_chunks(pages, None, size, overlap)
            contexts = chunk_contexts(pages, chunks)
            told = [
                count_text_tokens("\n".join(preamble(c, n + 1))) for n, c in enumerate(contexts)
            ]
            headers = sum(1 for c in contexts if c.header)
            bare = ex.estimate_documents(document.path, chunk_chars=size, chunk_overlap=0)
            by_passes = {
                n: ex.estimate_documents(document.path, chunk_chars=size, passes=n)
                for n in (1, 2, 3)
            }
            one = by_passes[1]
            print(
                f"{kind}: {len(chunks)} chunks of {size:,} characters; preamble "
                f"{sum(told[1:]) / max(1, len(told) - 1):.1f} tokens per chunk after the first "
                f"(at most {max(told)}), {headers} with a table header; prompt tokens without "
                f"overlap {bare.prompt_tokens:,}, with the default ({overlap} characters) "
                f"{one.prompt_tokens:,} (+{one.prompt_tokens / bare.prompt_tokens - 1:.1%}), "
                f"cost ${bare.cost:.4f} -> ${one.cost:.4f}"
            )
            for n, estimate in by_passes.items():
                print(
                    f"  passes={n}: {estimate.requests} requests, prompt "
                    f"{estimate.prompt_tokens:,} (cached {estimate.cached_tokens:,}), completion "
                    f"{estimate.completion_tokens:,}, ${estimate.cost:.4f} "
                    f"({estimate.cost / one.cost:.2f}x one pass)"
                )


if __name__ == "__main__":
    main()
