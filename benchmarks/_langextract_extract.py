"""LangExtract's ``lx.extract`` on the long-document benchmark (run by ``bench_long_documents``).

    python benchmarks/_langextract_extract.py SPEC.json RESULT.json

Runs under an interpreter that has ``langextract`` and ``openai`` (its own virtual environment:
``KX_LANGEXTRACT_PYTHON``). ``SPEC.json``: ``{"base_url", "api_key", "model", "effort",
"max_char_buffer", "passes", "documents": [{"id", "text"}]}``. Each document goes through
``lx.extract`` with the OpenAI provider pointed at the simulator (``OpenAILanguageModel``,
``base_url``), JSON output without schema constraints (``response_format`` json_object: Kimi's
schema dialect is not what LangExtract's OpenAI schema writes), one example (a line item and
a total), ``extraction_passes`` and ``max_char_buffer`` as given. ``RESULT.json``: per
document, every extraction with its class, text, character interval and attributes.
"""

from __future__ import annotations

import json
import sys
import warnings

PROMPT = (
    "Extract every line item of the invoice (class line_item: its text as printed, with the "
    "attributes sku, description, quantity and amount) and the total amount due (class total: "
    "its text, with the attribute value). Not subtotals or amounts brought forward."
)


def main() -> int:
    warnings.simplefilter("ignore")
    import logging

    logging.disable(logging.WARNING)
    import langextract as lx
    from langextract import factory

    spec = json.loads(open(sys.argv[1], encoding="utf-8").read())
    example = lx.data.ExampleData(
        text="EX-00001 sample widget part 2 10.00\nTotal due: 10.00 EUR",
        extractions=[
            lx.data.Extraction(
                extraction_class="line_item",
                extraction_text="EX-00001 sample widget part 2 10.00",
                attributes={
                    "sku": "EX-00001",
                    "description": "sample widget part",
                    "quantity": "2",
                    "amount": "10.00",
                },
            ),
            lx.data.Extraction(
                extraction_class="total",
                extraction_text="Total due: 10.00 EUR",
                attributes={"value": "10.00"},
            ),
        ],
    )
    config = factory.ModelConfig(
        model_id=spec["model"],
        provider="OpenAILanguageModel",
        provider_kwargs={
            "api_key": spec["api_key"],
            "base_url": spec["base_url"] + "/v1",
            "reasoning_effort": spec["effort"],
        },
    )
    out = []
    for document in spec["documents"]:
        annotated = lx.extract(
            text_or_documents=document["text"],
            prompt_description=PROMPT,
            examples=[example],
            config=config,
            max_char_buffer=spec["max_char_buffer"],
            extraction_passes=spec["passes"],
            use_schema_constraints=False,
            fence_output=False,
            max_workers=8,
            batch_length=8,
            show_progress=False,
        )
        extractions = []
        for extraction in annotated.extractions or []:
            interval = extraction.char_interval
            extractions.append(
                {
                    "class": extraction.extraction_class,
                    "text": extraction.extraction_text,
                    "start": interval.start_pos if interval is not None else None,
                    "end": interval.end_pos if interval is not None else None,
                    "attributes": extraction.attributes or {},
                }
            )
        out.append({"id": document["id"], "extractions": extractions})
    try:
        from importlib.metadata import version

        langextract_version = version("langextract")
    except Exception:  # noqa: BLE001 - a label only
        langextract_version = ""
    with open(sys.argv[2], "w", encoding="utf-8") as handle:
        json.dump({"version": langextract_version, "documents": out}, handle)
    return 0


if __name__ == "__main__":
    sys.exit(main())
