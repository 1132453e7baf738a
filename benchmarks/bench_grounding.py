"""9. Grounding: alignment time and recall, kimi_extract's aligner vs LangExtract's resolver.

Documents are generated (English and Chinese prose of about 1k, 5k and 50k tokens, by
``kimi_extract.tokens``), and the values to align are what the simulator's extractive answers
produce (``simulator.extractive.Source.draw``: 1-3 words, or 2-8 characters of Chinese, copied
from the text), sorted in document order as a model writes them. 70 % are copied unchanged and
30 % perturbed (case, spacing, a typo, full-width, 7.5 % each); 10 % more are absent (spans of
another document of the same language that are farther than a typo from anything this text says:
folded, they do not occur and RapidFuzz's ``partial_ratio`` against the folded text is below 75),
so a false grounding shows. Both aligners get the same
text and values:

- kimi_extract: ``kimi_extract.ground.align(text, leaves)`` (exact, normalised, fuzzy);
- LangExtract: ``langextract.resolver.Resolver().align(extractions, text, 0, 0)`` (its exact
  and fuzzy alignment, no model call), run by ``_langextract_worker.py`` in the interpreter named
  by ``KX_LANGEXTRACT_PYTHON`` (default: this one, when it can import langextract). LangExtract
  pins dependencies of its own, so install it in a separate venv:
  ``python -m venv venv-lx && venv-lx/bin/pip install langextract``, then
  ``KX_LANGEXTRACT_PYTHON=venv-lx/bin/python python benchmarks/run.py --only 9``. Without it
  the LangExtract columns say "not run". For Chinese it runs with its ``UnicodeTokenizer`` (the
  default regex tokenizer, also shown, treats a run of Chinese as one word).

Recall: a present value counts when its span overlaps the span it was copied from (the right
occurrence, not just an equal text). False groundings: absent values given a span. Times: the
align call only (median of the repeats), in each interpreter.

What ``grounding="quotes"`` costs (``quote_tokens``): the same rows (English and Chinese
documents of about 600 tokens, a contract model with six scalar fields, a list of line items and
a list of tags) run through ``Extractor.run`` twice against the in-process simulator's extractive
answers (``Simulator(answers="extractive")``, its token rules; no latency), with
``grounding=True`` and with ``grounding="quotes"``; tokens per row from ``kx_prompt_tokens`` and
``kx_completion_tokens`` (the answer's tokens without reasoning: the simulator draws reasoning
per request, so it differs at random between the modes) and the share of leaves grounded.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import Section

HERE = Path(__file__).resolve().parent
LANGEXTRACT_ENV = "KX_LANGEXTRACT_PYTHON"
SPEEDUP_TARGET = 20.0
PAGES_TARGET_S = 1.0

_EN_WORDS = (
    "the of and to in a is that for it as was with be by on not he this are or his from at which "
    "but have an they you were her she there been one all we their has would when if so no will "
    "more out up said about what its into than them can only other time new some could these two "
    "may first then do any like my now over such our man me even most made after also did many "
    "before must through back years where much your way well down should because each just those "
    "people how too little state good very make world still own see men work long get here "
    "between both life being under never day same another know while last might us great old year "
    "off come since against go came right used take three agreement party payment invoice "
    "contract delivery goods services price total amount due date buyer seller supplier customer "
    "warranty period notice termination clause section schedule annex shipment quantity unit "
    "order account bank transfer tax rate fee penalty interest liability insurance property "
    "office address company limited corporation holdings group trading logistics"
).split()
_EN_NAMES = (
    "Acme Globex Initech Umbrella Stark Wayne Wonka Hooli Vandelay Soylent Cyberdyne Tyrell "
    "Oceanic Gringotts Monarch Pendant Dunder Mifflin Sterling Cooper Prestige Worldwide Lyon "
    "Paris Berlin Madrid Shanghai Beijing Osaka Toronto Chicago Boston Seattle Denver Austin "
    "Alice Bob Carol David Erin Frank Grace Heidi Ivan Judy Mallory Oscar Peggy Trent Victor Walter"
).split()
_ZH_CHARS = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子"
    "说产种面而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机"
    "当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心"
    "反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程"
    "展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期"
    "根论运农指几九区强放决西被干做必战先回则任取据处府研质信合同买方卖方货款交付日期金额公司有限责"
    "任甲乙双签署条款违约赔偿仓库运输保险税费发票银行账户支付地址北京上海深圳广州杭州"
)


@dataclass
class Case:
    """One document with the values to align and where each was copied from."""

    language: str
    label: str
    text: str
    values: list[str]
    #: (start, end) of the copied span, or None for an absent value
    truth: list[tuple[int, int] | None]
    kinds: list[str]
    tokens: int


def _english(rng: random.Random, target_tokens: int) -> str:
    from kimi_extract.tokens import count_text_tokens

    parts: list[str] = []
    size = 0
    while size < target_tokens:
        sentence = []
        for _ in range(rng.randint(8, 22)):
            word = rng.choice(_EN_NAMES) if rng.random() < 0.12 else rng.choice(_EN_WORDS)
            sentence.append(word)
        if rng.random() < 0.3:
            sentence.insert(
                rng.randrange(len(sentence)), f"{rng.randint(1, 99_999):,}.{rng.randint(0, 99):02d}"
            )
        text = " ".join(sentence)
        text = text[0].upper() + text[1:] + rng.choice((". ", ". ", ", ", ".\n"))
        parts.append(text)
        size += count_text_tokens(text)
    return "".join(parts)


def _chinese(rng: random.Random, target_tokens: int) -> str:
    from kimi_extract.tokens import count_text_tokens

    parts: list[str] = []
    size = 0
    while size < target_tokens:
        clause = "".join(rng.choice(_ZH_CHARS) for _ in range(rng.randint(6, 20)))
        if rng.random() < 0.2:
            clause += f"{rng.randint(1, 9999)}元"
        clause += rng.choice("，，。；\n")
        parts.append(clause)
        size += count_text_tokens(clause)
    return "".join(parts)


def _absent(value: str, folded_text: str) -> bool:
    """Whether ``value`` is farther than a typo from anything the text says: its folded form
    does not occur and its best RapidFuzz ``partial_ratio`` against the folded text is < 75."""
    from rapidfuzz import fuzz

    from kimi_extract.ground import fold

    needle = fold(value)
    return needle not in folded_text and fuzz.partial_ratio(needle, folded_text) < 75


def make_case(language: str, label: str, target_tokens: int, values: int, seed: int) -> Case:
    """A document and its values (see the module docstring for the mix)."""
    from kimi_extract.ground import fold
    from kimi_extract.simulator.extractive import PERTURBATIONS, Source, perturb
    from kimi_extract.tokens import count_text_tokens

    rng = random.Random(seed)
    write = _english if language == "en" else _chinese
    text = write(rng, target_tokens)
    other = write(random.Random(seed + 1), max(1000, target_tokens // 10))
    source, elsewhere = Source(text, []), Source(other, [])
    folded = fold(text)
    drawn: list[tuple[int, str, tuple[int, int] | None, str]] = []
    absent = 0
    while len(drawn) - absent < values:
        draw = source.draw(rng)
        assert draw is not None
        roll = rng.random()
        kind, value = "copied", draw.value
        if roll < 0.3:
            kind = PERTURBATIONS[int(roll / 0.075)]
            changed = perturb(rng, value, kind)
            if changed is None:
                continue  # this span cannot take this perturbation: draw another
            value = changed
        drawn.append((draw.start, value, (draw.start, draw.end), kind))
        if rng.random() < 0.1:
            far = elsewhere.draw(rng)
            assert far is not None
            if _absent(far.value, folded):
                drawn.append((draw.start, far.value, None, "absent"))
                absent += 1
    drawn.sort(key=lambda item: item[0])  # document order, as a model writes them
    return Case(
        language,
        label,
        text,
        [d[1] for d in drawn],
        [d[2] for d in drawn],
        [d[3] for d in drawn],
        count_text_tokens(text),
    )


def _score(case: Case, spans: list[tuple[int, int] | None]) -> dict[str, Any]:
    """Recall (overlapping the copied span), per kind, and false groundings."""
    hits: dict[str, list[int]] = {}
    false = 0
    for truth, kind, span in zip(case.truth, case.kinds, spans, strict=True):
        if truth is None:
            false += span is not None
            continue
        ok = span is not None and span[0] < truth[1] and truth[0] < span[1]
        hits.setdefault(kind, []).append(int(ok))
        hits.setdefault("all", []).append(int(ok))
    return {
        "recall": {k: sum(v) / len(v) for k, v in hits.items()},
        "counts": {k: len(v) for k, v in hits.items()},
        "false": false,
        "absent": sum(t is None for t in case.truth),
    }


def _ours(case: Case, repeats: int) -> tuple[float, list[tuple[int, int] | None]]:
    from kimi_extract.ground import align

    leaves = [(f"v[{i}]", v) for i, v in enumerate(case.values)]
    times = []
    spans: list[Any] = []
    for _ in range(repeats):
        started = time.perf_counter()
        spans = align(case.text, leaves)
        times.append(time.perf_counter() - started)
    found = [(s.start, s.end) if s.start is not None and s.end is not None else None for s in spans]
    return statistics.median(times), found


def _langextract_python() -> str | None:
    named = os.environ.get(LANGEXTRACT_ENV)
    candidates = [named] if named else [sys.executable]
    for python in candidates:
        probe = subprocess.run(
            [python, "-c", "import langextract"], capture_output=True, text=True, check=False
        )
        if probe.returncode == 0:
            return python
    return None


def _theirs(
    python: str, cases: list[tuple[Case, str, int]]
) -> tuple[str, list[tuple[float, list[tuple[int, int] | None]]]]:
    with tempfile.TemporaryDirectory(prefix="kx-bench-lx-") as folder:
        spec = Path(folder) / "cases.json"
        result = Path(folder) / "result.json"
        spec.write_text(
            json.dumps(
                [
                    {"text": c.text, "values": c.values, "tokenizer": tok, "repeats": repeats}
                    for c, tok, repeats in cases
                ]
            ),
            encoding="utf-8",
        )
        subprocess.run(
            [python, str(HERE / "_langextract_worker.py"), str(spec), str(result)],
            check=True,
            timeout=3600,
        )
        data = json.loads(result.read_text(encoding="utf-8"))
    out: list[tuple[float, list[tuple[int, int] | None]]] = [
        (c["seconds"], [(s[0], s[1]) if s is not None else None for s in c["spans"]])
        for c in data["cases"]
    ]
    return data["version"], out


def quote_tokens(quick: bool) -> dict[str, Any]:
    """Tokens per row with ``grounding=True`` vs ``"quotes"`` (module docstring)."""
    import pandas as pd
    from pydantic import BaseModel

    import kimi_extract as kx
    from kimi_extract.simulator import Simulator

    class Line(BaseModel):
        item: str
        quantity: str
        price: str

    class Contract(BaseModel):
        seller: str
        buyer: str
        signed_on: str
        place: str
        total: str
        payment_terms: str
        lines: list[Line]
        tags: list[str]

    rng = random.Random(15)
    per_language = 3 if quick else 10
    texts = [_english(rng, 600) for _ in range(per_language)]
    texts += [_chinese(rng, 600) for _ in range(per_language)]
    frame = pd.DataFrame({"text": texts})
    out: dict[str, Any] = {"rows": len(texts)}
    for mode in (True, "quotes"):
        with Simulator(answers="extractive") as sim:
            ex = kx.Extractor(
                Contract,
                base_url=sim.base_url,
                api_key=sim.api_key,
                grounding=mode,
                store=False,
                progress=False,
                cache_ttl=None,
            )
            result = ex.run(frame, text="text")
        answer = result["kx_completion_tokens"] - result["kx_reasoning_tokens"]
        out[str(mode)] = {
            "prompt": float(result["kx_prompt_tokens"].mean()),
            "cached": float(result["kx_cached_tokens"].mean()),
            "answer": float(answer.mean()),
            "reasoning": float(result["kx_reasoning_tokens"].mean()),
            "grounded": float(result["kx_grounded"].mean()),
            "errors": int(result["kx_error"].notna().sum()),
        }
    return out


def _pct(value: float) -> str:
    return f"{100 * value:.1f} %"


def _kinds(recall: dict[str, float]) -> str:
    return ", ".join(f"{k} {_pct(v)}" for k, v in sorted(recall.items()) if k != "all")


def measure(quick: bool) -> Section:
    sizes = [("1k", 1_000, 20), ("5k", 5_000, 100)] + ([] if quick else [("50k", 50_000, 500)])
    cases = [
        make_case(language, label, tokens, values, seed=1000 * i + len(language))
        for i, (label, tokens, values) in enumerate(sizes)
        for language in ("en", "zh")
    ]
    # 1,000 values on a 100-page document (about 3,000 characters a page)
    cases.append(make_case("en", "100 pages", 75_000, 1_000, seed=77))
    repeats = 1 if quick else 3
    ours = [_ours(case, repeats) for case in cases]
    python = _langextract_python()
    theirs: dict[tuple[int, str], tuple[float, list[Any]]] = {}
    version = ""
    if python is not None:
        jobs: list[tuple[Case, str, int]] = []
        keys: list[tuple[int, str]] = []
        for i, case in enumerate(cases):
            if quick and case.label == "100 pages":
                continue
            for tok in ["regex"] if case.language == "en" else ["unicode", "regex"]:
                jobs.append((case, tok, 1 if (quick or case.tokens > 20_000) else 3))
                keys.append((i, tok))
        version, results = _theirs(python, jobs)
        theirs = dict(zip(keys, results, strict=True))
    rows = []
    speedups: dict[str, float] = {}
    margins: dict[str, float] = {}
    false_total = 0
    per_kind = []
    for i, (case, (seconds, spans)) in enumerate(zip(cases, ours, strict=True)):
        score = _score(case, spans)
        false_total += score["false"]
        name = f"{case.language} {case.label}"
        row = [
            name,
            f"{case.tokens:,}",
            f"{len(case.text):,}",
            f"{score['counts']['all']} + {score['absent']}",
            f"{1000 * seconds:.1f}",
            _pct(score["recall"]["all"]),
            str(score["false"]),
        ]
        kinds = f"{name}: {_kinds(score['recall'])}"
        tok = "regex" if case.language == "en" else "unicode"
        if (i, tok) in theirs:
            their_s, their_spans = theirs[(i, tok)]
            their_score = _score(case, their_spans)
            speedup = their_s / seconds if seconds else float("inf")
            speedups[name] = speedup
            margins[name] = score["recall"]["all"] - their_score["recall"]["all"]
            recall = _pct(their_score["recall"]["all"])
            if (i, "regex") in theirs and tok != "regex":
                regex_score = _score(case, theirs[(i, "regex")][1])
                recall += f" (regex tokenizer: {_pct(regex_score['recall']['all'])})"
            row += [f"{1000 * their_s:.1f}", recall, str(their_score["false"]), f"{speedup:.0f}x"]
            kinds += f" (LangExtract: {_kinds(their_score['recall'])})"
        else:
            row += ["not run", "", "", ""]
        rows.append(row)
        per_kind.append(kinds)
    pages_s = ours[-1][0]
    tokens = quote_tokens(quick)
    plain, quoted = tokens["True"], tokens["quotes"]
    more = {k: quoted[k] / plain[k] - 1 for k in ("prompt", "answer")}
    both = (quoted["prompt"] + quoted["answer"]) / (plain["prompt"] + plain["answer"]) - 1
    tokens["more"] = {**more, "prompt + answer": both}
    five = {k: v for k, v in speedups.items() if k.endswith(" 5k")}
    notes = [
        "Recall by kind of value: " + "; ".join(per_kind) + ".",
        "Recall counts a value when its span overlaps the span it was copied from (a word that "
        "occurs many times may be matched at another occurrence: a miss here); 'values' is "
        "present + absent; 'false' counts absent values given a span (kimi_extract's fuzzy "
        "threshold: Levenshtein similarity 85, strings of 6+ characters).",
    ]
    if python is None:
        notes.append(
            "LangExtract not run: no interpreter with `langextract` (set "
            f"{LANGEXTRACT_ENV} to a venv's python that has it; see the module docstring)."
        )
    else:
        notes.append(
            f"LangExtract {version}: `Resolver().align` with its defaults (exact 'dp', fuzzy "
            "'lcs', threshold 0.75), in its own interpreter; Chinese with its UnicodeTokenizer "
            "(the default regex tokenizer's recall in brackets). Median of "
            f"{1 if quick else 3} runs (1 for documents over 20k tokens)."
        )
    notes.append(
        f'What grounding="quotes" costs ({tokens["rows"]} rows, English and Chinese, ~600 tokens '
        "each, a contract model: 6 scalar fields, line items, tags; simulator token rules; "
        "tokens per row): prompt "
        f"{plain['prompt']:,.0f} -> {quoted['prompt']:,.0f} (+{_pct(more['prompt'])}: the "
        "kx_quotes schema and one sentence of instructions, a static prefix the prompt cache "
        f"serves: cached {plain['cached']:,.0f} -> {quoted['cached']:,.0f}), answer "
        f"{plain['answer']:,.0f} -> "
        f"{quoted['answer']:,.0f} (+{_pct(more['answer'])}: a quote per field), prompt + answer "
        f"+{_pct(both)}; leaves grounded {_pct(plain['grounded'])} -> {_pct(quoted['grounded'])} "
        f"(quotes copied from the text; errors {plain['errors']} / {quoted['errors']})."
    )
    targets: list[tuple[str, str, bool | None]] = []
    if theirs:
        closest = min(margins, key=lambda k: margins[k])
        targets.append(
            (
                "recall >= LangExtract's (every document)",
                f"smallest margin {100 * margins[closest]:+.1f} points ({closest})",
                min(margins.values()) >= 0,
            )
        )
        targets.append(
            (
                f">= {SPEEDUP_TARGET:.0f}x faster than LangExtract at 5k tokens",
                ", ".join(f"{k}: {v:.0f}x" for k, v in five.items()),
                bool(five) and min(five.values()) >= SPEEDUP_TARGET,
            )
        )
    else:
        targets.append(("vs LangExtract (recall, 20x at 5k)", "not run", None))
    targets += [
        (
            f"1,000 values on a 100-page document in < {PAGES_TARGET_S:.0f} s",
            f"{pages_s:.3f} s",
            pages_s < PAGES_TARGET_S,
        ),
        ("no absent value grounded", str(false_total), false_total == 0),
    ]
    return Section(
        key="9",
        title="Grounding: alignment time and recall vs LangExtract",
        command=f"{LANGEXTRACT_ENV}=venv-lx/bin/python python benchmarks/run.py --only 9",
        headers=[
            "document",
            "tokens",
            "chars",
            "values",
            "kimi_extract ms",
            "recall",
            "false",
            "LangExtract ms",
            "recall",
            "false",
            "speed-up",
        ],
        rows=rows,
        targets=targets,
        notes=notes,
        data={"speedups": speedups, "pages_s": pages_s, "quote_tokens": tokens},
    )


if __name__ == "__main__":
    from report import console_table

    print(console_table(measure("--quick" in sys.argv)))
