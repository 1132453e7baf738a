"""12. Long documents: every item found once; recall, duplicates and cost; vs LangExtract.

    python benchmarks/run.py --only 12     # also writes the RESULTS.md section
    KX_LANGEXTRACT_PYTHON=/work/venv-lx/bin/python python benchmarks/run.py --only 12

Documents (``_long_documents``): a 100-page PDF, a 200,000-character Markdown report and a
200,000-character HTML report, each an invoice of 600 line items in tables that run across pages
or sections (every fifth item with a second line, which on the PDF may fall on the next page),
a "brought forward" / "carried forward" subtotal on every page or section (a look-alike of the
total) and the total on the last page. Each is answered by the simulator's quality model from
its located answer key (``kimi_extract.simulator.recall``) at the illustrative rates of
``kimi-k3.1-pro`` at low effort: a first answer finds 90 % of the items its text shows and stops
after 40 items of a list, a follow-up answer finds 75 % of the rest, a look-alike is taken for a
total the text lacks one time in three, and value mistakes (typos, wrong numbers, dropped and
invented items) at ``QualityModel.illustrative()``'s rates. Made-up rates: what the table shows
is how the methods compare under them, not Kimi's recall.

Runs, each against a fresh simulator, on the same documents and chunk size:

- kimi_extract **naive** (the merge before this release): ``chunk_overlap=0, dedupe_on=[]``
  (lists concatenated, the first non-null scalar);
- **overlap, lists concatenated**: the default overlap without merging (``dedupe_on=[]``): the
  repeats the merge removes;
- **overlap + merge** without grounding (fields decide), and **overlap + span merge**
  (``grounding=True``), with the default overlap;
- **2 and 3 passes** (``passes=``) on top of the span merge, ``merge={"total": "last"}``;
- **LangExtract** ``lx.extract`` (its own interpreter, ``KX_LANGEXTRACT_PYTHON``) on the text the
  library reads from each document, through the simulator's OpenAI-compatible endpoint, with
  ``max_char_buffer`` = the chunk size and ``extraction_passes`` 1 and 3. Its requests are
  answered by the same reader, rates and seeding (a responder: ``langextract_responder``) in
  LangExtract's output format; identical requests (its later passes resend each chunk as is)
  draw anew, as a model sampling at temperature 1 would.

Measures: **recall** (gold items whose SKU was extracted), **precision** (extracted items that
are a gold item's first occurrence), **duplicates** (extracted items repeating a SKU already
extracted), **exact** (first occurrences with every field right), the **total** right, tokens
(prompt, of which cached, and completion, over every request the server answered) and cost at
the model's list price.
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

LANGEXTRACT_ENV = "KX_LANGEXTRACT_PYTHON"
MODEL = "kimi-k3.1-pro"
EFFORT = "low"
#: Characters per chunk (and LangExtract's max_char_buffer), by document kind.
CHUNK_CHARS = {"pdf": 4000, "md": 8000, "html": 8000}


def _langextract_python() -> str | None:
    named = os.environ.get(LANGEXTRACT_ENV)
    if not named:
        return None
    probe = subprocess.run(
        [named, "-c", "import langextract, openai"], capture_output=True, check=False
    )
    return named if probe.returncode == 0 else None


#: Documents of each kind (their seeds): figures are means over them. ``KX_LONG_DOCUMENTS=1``
#: makes one of each (a shorter run; the section says how many it measured).
SEEDS = (1, 2, 3)[: int(os.environ.get("KX_LONG_DOCUMENTS", "3"))]


def documents(folder: Path, quick: bool) -> list[tuple[str, Any]]:
    """The benchmark's documents, (kind, document) (smaller and fewer with ``quick``)."""
    from _long_documents import make_html, make_markdown, make_pdf

    if quick:
        return [
            ("pdf", make_pdf(folder, pages=12, per_page=6)),
            ("md", make_markdown(folder, chars=30_000)),
        ]
    out = []
    for seed in SEEDS:
        out += [
            ("pdf", make_pdf(folder, seed=seed)),
            ("md", make_markdown(folder, seed=10 + seed)),
            ("html", make_html(folder, seed=20 + seed)),
        ]
    return out


def no_early_stop() -> Any:
    """The illustrative quality model without its early stop (``max_items``): the sensitivity
    check (misses independent of where an item is)."""
    from dataclasses import replace

    from kimi_extract.simulator.quality import QualityModel

    model = QualityModel.illustrative()
    return replace(
        model,
        recall={k: replace(r, max_items=None) for k, r in model.recall.items()},
        default_recall=replace(model.default_recall, max_items=None),
    )


def _usage(sim: Any) -> dict[str, float]:
    """Tokens and cost of every answered request of a simulator."""
    from kimi_extract.kimi import MODELS
    from kimi_extract.records import Usage

    total = Usage()
    for exchange in sim.history:
        if exchange.status == 200 and exchange.usage:
            total = total + Usage.from_api(exchange.usage)
    info = MODELS[MODEL]
    priced = total.priced(info.pricing, separate_cache_writes=info.separate_cache_writes)
    return {
        "requests": total.requests,
        "prompt": total.prompt_tokens,
        "cached": total.cached_tokens,
        "completion": total.completion_tokens,
        "tokens": total.total_tokens,
        "cost": priced.cost,
    }


def score(items: list[dict[str, Any]], total: Any, document: Any) -> dict[str, float]:
    """Recall, precision, duplicates, exact items and the total, against the document's key."""
    gold = {item["sku"]: item for item in document.items}
    seen: set[str] = set()
    first = duplicates = exact = 0
    for item in items:
        sku = str(item.get("sku") or "").strip()
        if sku in seen:
            duplicates += 1  # a gold item extracted again
            continue
        if sku in gold:
            seen.add(sku)
            first += 1
            right = gold[sku]
            exact += all(
                _same(item.get(name), right[name]) for name in ("description", "quantity", "amount")
            )
    return {
        "items": len(items),
        "recall": len(seen) / len(gold),
        "precision": first / len(items) if items else 0.0,
        "duplicates": duplicates,
        "exact": exact / len(gold),
        "total": float(_same(total, document.total)),
    }


def _same(value: Any, right: Any) -> bool:
    if isinstance(right, float):
        try:
            return abs(float(str(value).replace(",", "")) - right) < 0.005
        except (TypeError, ValueError):
            return False
    if isinstance(right, int):
        try:
            return int(str(value)) == right
        except (TypeError, ValueError):
            return False
    return " ".join(str(value).split()).casefold() == " ".join(str(right).split()).casefold()


def run_ours(
    document: Any, kind: str, name: str, options: dict[str, Any], quality: Any = "illustrative"
) -> dict[str, Any]:
    """One kimi_extract configuration against a fresh simulator."""
    from _long_documents import INSTRUCTIONS, Invoice

    import kimi_extract as kx
    from kimi_extract.simulator import Simulator

    with Simulator(answer_keys=[document.key], quality=quality) as sim:
        grounding = options.pop("grounding", False)
        ex = kx.Extractor(
            Invoice,
            instructions=INSTRUCTIONS,
            base_url=sim.base_url,
            api_key=sim.api_key,
            model=MODEL,
            reasoning_effort=EFFORT,
            progress=False,
            store=False,
            grounding=grounding,
            concurrency=8,
        )
        started = time.perf_counter()
        out = ex.run_documents(document.path, chunk_chars=CHUNK_CHARS[kind], **options)
        print(f"12: {kind} {name}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
        row = out.iloc[0]
        result = score(list(row["items"] or []), row["total"], document)
        result.update(_usage(sim))
    return {"kind": kind, "method": name, **result}


def langextract_responder(document: Any, quality: Any = None) -> Any:
    """A simulator responder answering LangExtract's requests from the document's key, with the
    quality model's reader, rates and seeding (module docstring)."""
    from _long_documents import Invoice

    from kimi_extract.simulator.answers import request_seed, words_of
    from kimi_extract.simulator.quality import QualityModel, corrupt
    from kimi_extract.simulator.recall import UNSEEN, KeyIndex, _Text, read

    quality = quality or QualityModel.illustrative()
    keys = KeyIndex([document.key])
    schema = Invoice.model_json_schema()
    item_schema = schema["$defs"]["LineItem"]
    item_schema["properties"]["text"] = {"type": "string"}
    samples: dict[int, int] = {}
    lock = threading.Lock()

    def respond(request: Any) -> Any:
        text = request.user_text
        if "\nQ: " not in text and not text.startswith("Q: "):
            return None
        chunk = text.rsplit("Q: ", 1)[-1].rsplit("\nA:", 1)[0]
        key = keys.match(chunk)
        if key is None:
            return {"extractions": []}
        seed = request_seed(request.body)
        with lock:
            sample = samples.get(seed, 0)
            samples[seed] = sample + 1
        model, effort = request.model, request.body.get("reasoning_effort") or "max"
        draws = random.Random(seed ^ 0x2E_CA_11 ^ (sample * 0x9E37_79B9_7F4A_7C15))
        plain = read(key, chunk, quality.recall_for(model, effort), draws, [])
        seen = _Text(chunk)
        visible = [
            seen.visible_part(item["@at"])
            for item in key["items"]
            if seen.visible_part(item["@at"]) is not None
        ]
        # the reader lists visible items in order: give each its text
        texts = iter(visible)
        items = []
        for item in plain["items"]:
            for candidate in texts:
                if item["sku"] is UNSEEN or item["sku"] in candidate:
                    items.append({**item, "text": candidate})
                    break
        rng = random.Random(seed ^ 0x51_A1_17_E5)
        value, _ = corrupt(
            {"items": items, "total": plain["total"]},
            schema,
            quality.rates_for(model, effort),
            rng,
            words_of(chunk),
        )
        extractions = [
            {
                "line_item": item.get("text") or item.get("sku") or "",
                "line_item_attributes": {
                    "sku": item.get("sku"),
                    "description": item.get("description"),
                    "quantity": None if item.get("quantity") is None else str(item["quantity"]),
                    "amount": None if item.get("amount") is None else f"{item['amount']:.2f}",
                },
            }
            for item in value["items"]
        ]
        total = value.get("total")
        if total is not None:
            extractions.append(
                {"total": _total_text(key, total), "total_attributes": {"value": f"{total:.2f}"}}
            )
        return {"extractions": extractions}

    return respond


def _total_text(key: dict[str, Any], value: float) -> str:
    for decoy, text in key["@decoys"]["total"]:
        if abs(decoy - value) < 0.005:
            return text
    return key["@at"]["total"]


def run_langextract(
    document: Any, kind: str, passes: int, python: str, text: str, quality: Any = None
) -> dict[str, Any]:
    """LangExtract on the document's text through a fresh simulator."""
    from kimi_extract.simulator import Simulator

    with Simulator(answer_keys=[document.key]) as sim, tempfile.TemporaryDirectory() as tmp:
        sim.responder = langextract_responder(document, quality)
        spec = {
            "base_url": sim.base_url,
            "api_key": sim.api_key,
            "model": MODEL,
            "effort": EFFORT,
            "max_char_buffer": CHUNK_CHARS[kind],
            "passes": passes,
            "documents": [{"id": kind, "text": text}],
        }
        spec_path, result_path = Path(tmp, "spec.json"), Path(tmp, "result.json")
        spec_path.write_text(json.dumps(spec), encoding="utf-8")
        started = time.perf_counter()
        proc = subprocess.run(
            [python, str(HERE / "_langextract_extract.py"), str(spec_path), str(result_path)],
            capture_output=True,
            text=True,
            check=False,
            timeout=3600,
        )
        if proc.returncode != 0:
            raise RuntimeError(f"LangExtract worker failed:\n{proc.stderr[-3000:]}")
        took = time.perf_counter() - started
        print(f"12: {kind} LangExtract {passes} pass(es): {took:.0f} s", file=sys.stderr)
        found = json.loads(result_path.read_text(encoding="utf-8"))
        usage = _usage(sim)
    extractions = found["documents"][0]["extractions"]
    items = [e["attributes"] for e in extractions if e["class"] == "line_item"]
    totals = [e["attributes"].get("value") for e in extractions if e["class"] == "total"]
    # its last total, as merge={"total": "last"} takes ours
    result = score(items, totals[-1] if totals else None, document)
    result.update(usage)
    result["version"] = found.get("version", "")
    return {"kind": kind, "method": f"LangExtract, {passes} pass(es)", **result}


OURS = [
    ("naive (before)", {"chunk_overlap": 0, "dedupe_on": []}),
    ("overlap, lists concatenated", {"dedupe_on": []}),
    ("overlap + merge on sku", {"dedupe_on": ["sku"]}),
    ("overlap + span merge", {"grounding": True}),
    ("span merge, 2 passes", {"grounding": True, "passes": 2, "merge": {"total": "last"}}),
    ("span merge, 3 passes", {"grounding": True, "passes": 3, "merge": {"total": "last"}}),
]
#: The overlap sweep that chose the default (span merge, one pass): share of a chunk.
SWEEP = (0.0, 0.05, 0.2)
#: Prefixes the sensitivity runs' method names.
NO_STOP = "no early stop: "
_NUMBERS = ("recall", "precision", "exact", "total", "requests", "tokens", "cached", "cost")


def measure(quick: bool) -> Any:
    """Run every configuration; a ``Section`` for run.py."""
    from _common import Section

    from kimi_extract.media.documents import load_pages

    runs: list[dict[str, Any]] = []
    python = _langextract_python()
    two = {"grounding": True, "passes": 2, "merge": {"total": "last"}}
    with tempfile.TemporaryDirectory() as tmp:
        for kind, document in documents(Path(tmp), quick):
            _, pages = load_pages(document.path)
            text = "\n\n".join(p.text for p in pages)  # what LangExtract is given
            for name, options in OURS:
                runs.append(run_ours(document, kind, name, dict(options)))
            for share in () if quick else SWEEP:
                options = {"grounding": True, "chunk_overlap": int(CHUNK_CHARS[kind] * share)}
                runs.append(run_ours(document, kind, f"span merge, overlap {share:.0%}", options))
            if python is not None:
                for passes in (1, 3):
                    runs.append(run_langextract(document, kind, passes, python, text))
            if quick:
                continue
            # the sensitivity check: misses wherever an item is, no early stop
            flat = no_early_stop()
            runs.append(run_ours(document, kind, NO_STOP + "2 passes", dict(two), flat))
            if python is not None:
                found = run_langextract(document, kind, 3, python, text, flat)
                runs.append({**found, "method": NO_STOP + "LangExtract, 3 pass(es)"})
    rows_data = _means(runs)
    headers = [
        "document",
        "method",
        "recall",
        "precision",
        "duplicates",
        "exact",
        "total right",
        "requests",
        "tokens (cached)",
        "cost",
    ]
    rows = [
        [
            r["kind"],
            r["method"],
            f"{r['recall']:.1%}",
            f"{r['precision']:.1%}",
            r["duplicates"],
            f"{r['exact']:.1%}",
            f"{r['total'] * r['documents']:.0f} of {r['documents']}",
            f"{r['requests']:.0f}",
            f"{r['tokens']:,.0f} ({r['cached']:,.0f})",
            f"${r['cost']:.4f}",
        ]
        for r in rows_data
    ]
    targets, notes = _targets(rows_data, python is not None)
    return Section(
        key="12",
        title="Long documents: every item found once; recall, duplicates, cost; vs LangExtract",
        command=f"{LANGEXTRACT_ENV}=/work/venv-lx/bin/python python benchmarks/run.py --only 12",
        headers=headers,
        rows=rows,
        targets=targets,
        notes=notes,
        data={"runs": runs, "chunk_chars": CHUNK_CHARS},
    )


def _means(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per (kind, method): the mean over its documents (duplicates summed)."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for run in runs:
        groups.setdefault((run["kind"], run["method"]), []).append(run)
    out = []
    for (kind, method), members in groups.items():
        row: dict[str, Any] = {"kind": kind, "method": method, "documents": len(members)}
        for name in _NUMBERS:
            row[name] = sum(m[name] for m in members) / len(members)
        row["duplicates"] = sum(m["duplicates"] for m in members)
        row["version"] = next((m["version"] for m in members if m.get("version")), "")
        out.append(row)
    return out


def _targets(runs: list[dict[str, Any]], langextract: bool) -> tuple[list[Any], list[str]]:
    def pick(method: str) -> list[dict[str, Any]]:
        return [r for r in runs if r["method"] == method]

    def mean(rows: list[dict[str, Any]], key: str) -> float:
        return sum(r[key] for r in rows) / len(rows) if rows else float("nan")

    overlapping = [
        r
        for r in runs
        if "merge" in r["method"]
        and "overlap 0%" not in r["method"]
        and not r["method"].startswith("naive")
    ]
    dup = sum(r["duplicates"] for r in overlapping)
    targets: list[tuple[str, str, bool | None]] = [
        ("0 duplicates with overlap on", f"{dup} duplicates", dup == 0)
    ]
    notes = [
        "Figures are means over "
        f"{max((r['documents'] for r in runs), default=0)} generated documents of each kind "
        "(duplicates: summed; 'total right': documents whose total was right). Chunk size (and "
        f"LangExtract's max_char_buffer): {CHUNK_CHARS} characters; default overlap (10 % of a "
        "chunk, at most 1,000 characters) unless the method names another. 'naive (before)' "
        "is the earlier merge (no overlap, lists concatenated, the first total), its chunks "
        "given this release's preamble and table header too; 'overlap, lists concatenated': "
        "the default overlap without merging (what the merge removes); 'overlap + merge on "
        "sku': no "
        "grounding, items merged by their SKU (dedupe_on); 'span merge': grounding=True; the "
        "passes keep the last total (merge), LangExtract's score takes its last total too.",
    ]
    if langextract:
        for prefix in ("", NO_STOP):
            two, three_lx = (
                pick(prefix + "span merge, 2 passes"),
                pick(prefix + "LangExtract, 3 pass(es)"),
            )
            if prefix:
                two = pick(prefix + "2 passes")
            if not two or not three_lx:
                continue
            label = " (no early stop)" if prefix else ""
            targets.append(
                (
                    "recall at 2 passes >= LangExtract's at 3" + label,
                    f"{mean(two, 'recall'):.1%} vs {mean(three_lx, 'recall'):.1%}",
                    mean(two, "recall") >= mean(three_lx, "recall"),
                )
            )
            targets.append(
                (
                    "... at fewer tokens" + label,
                    f"{mean(two, 'tokens'):,.0f} vs {mean(three_lx, 'tokens'):,.0f} per document",
                    mean(two, "tokens") < mean(three_lx, "tokens"),
                )
            )
        version = next((r["version"] for r in runs if r.get("version")), "")
        notes.append(f"LangExtract {version} with openai, in its own interpreter.")
    else:
        notes.append(
            f"LangExtract not run: no interpreter with langextract (set {LANGEXTRACT_ENV})."
        )
    return targets, notes


if __name__ == "__main__":
    from report import console_table

    print(console_table(measure("--quick" in sys.argv)))
