"""9. Grounding on real text: false groundings, recall, the right occurrence, time; vs LangExtract.

Documents and values come from ``_grounding_corpus`` (its docstring): text shipped in Debian
and Python packages (licences, Debian changelogs, package descriptions; Chinese and Japanese
manual pages, and the mixed ones), found on this machine (``collect``: up to 20 documents per
language, each cut to 12,000 characters; more manual pages with ``KX_GROUNDING_CORPUS``), and
values of three classes drawn from them in records (objects of 2-5 fields in a shuffled schema
order): verbatim, rewrite (dates, numbers, names, abbreviations, boundaries) and absent near
misses (negations, digit edits, swapped words, two phrases combined). A second sample, the
fuzzy sample (``_grounding_fuzzy``: typos and spelling variants of real phrases in English,
Chinese and Japanese, wrong Chinese and Japanese characters, and near misses one slip away:
another word one letter off, a voicing mark), is aligned apart (one more row per document) so
that fuzzy spans are counted by the hundred; the figures of the first sample do not depend on
it. The seeds differ from the committed test sample's (tests/data/grounding_corpus.json), so
this is a set the aligner's tests did not see. Scores:

- **false grounding**: an absent value given a span of kind exact, normalized or fuzzy (a
  "near" span is not a grounding: it is shown as doubtful); per kind, the share of that kind's
  spans that are wrong (an absent value, or a span over none of the value's occurrences that
  reads neither the value nor the phrase it was drawn from, case and spacing aside);
- **verbatim recall**: a verbatim value grounded over any of its occurrences; **right
  occurrence**: among verbatim values that occur more than once in the document but once in
  their record's region (600 characters; else no aligner can tell), the share grounded over
  the occurrence they were drawn from; **rewrite recall**: grounded over an occurrence of what
  the value stands for (or over the value's own text);
- **time**: CPU seconds (``time.process_time``) of ``align`` for all the values of a document,
  and for 1,000 values on a 100-page document (the documents joined, about 3,000 characters a
  page).
- **calibration**: the share right of fuzzy and near spans per band of raw similarity, and of
  normalized spans per rule, over both samples: what ``kimi_extract.ground.calibrate`` holds.

LangExtract (``langextract.resolver.Resolver().align``, exact then fuzzy, no model call) gets the
same documents and values in two modes, run by ``_langextract_worker.py`` in the interpreter
named by ``KX_LANGEXTRACT_PYTHON`` (``python3 -m venv /work/venv-lx &&
/work/venv-lx/bin/pip install langextract``):

- whole document: all of a document's values aligned to its whole text;
- per chunk, as ``lx.extract`` runs it: the document cut by its own ``ChunkIterator``
  (``max_char_buffer=1000``, its default regex tokenizer) and each value aligned to the chunk
  holding its record (what a model answering that chunk would have seen), with that chunk's
  token and character offsets.

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
from collections import defaultdict
from pathlib import Path
from typing import Any

from _common import Section
from _grounding_corpus import Doc, Value, collect, load_sample, make_values
from _grounding_fuzzy import make_fuzzy_values

HERE = Path(__file__).resolve().parent
LANGEXTRACT_ENV = "KX_LANGEXTRACT_PYTHON"
PAGES_TARGET_S = 0.5
SEED = 2026
#: Records of the fuzzy sample per document (``_grounding_fuzzy``), aligned apart from the others.
FUZZY_RECORDS = 12
GROUNDED = ("exact", "normalized", "fuzzy")

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


def _docs(quick: bool) -> list[Doc]:
    docs = collect(limit_per_lang=6 if quick else 20)
    if len({d.lang for d in docs}) < 4:  # too little on this machine: add the committed sample
        docs += load_sample()[0]
    return docs


def _ours(text: str, values: list[Value]) -> tuple[float, list[Any]]:
    from kimi_extract.ground import align

    started = time.process_time()
    spans = align(text, [(v.path, v.value) for v in values])
    return time.process_time() - started, spans


def _overlaps(span: tuple[int, int] | None, truths: list[list[int]]) -> bool:
    return span is not None and any(span[0] < b and a < span[1] for a, b in truths)


def _region_unique(value: Value) -> bool:
    """Occurs more than once in the document, and once within 400 characters of its own."""
    assert value.truth is not None
    if len(value.truths) < 2:
        return False
    return not any(t != value.truth and abs(t[0] - value.truth[0]) < 400 for t in value.truths)


class Tally:
    """Counts per class, kind and calibration band."""

    def __init__(self) -> None:
        self.counts: dict[str, list[int]] = defaultdict(lambda: [0, 0])

    def add(self, key: str, ok: bool) -> None:
        self.counts[key][0] += int(ok)
        self.counts[key][1] += 1

    def share(self, key: str) -> float:
        hit, total = self.counts.get(key, (0, 0))
        return hit / total if total else float("nan")

    def total(self, key: str) -> int:
        return self.counts.get(key, (0, 0))[1]

    def merged(self, other: Tally) -> Tally:
        """Both tallies' counts added."""
        out = Tally()
        for tally in (self, other):
            for key, (hit, total) in tally.counts.items():
                out.counts[key][0] += hit
                out.counts[key][1] += total
        return out


def score(text: str, values: list[Value], spans: list[Any], tally: Tally, lang: str) -> None:
    """Add one document's outcome to ``tally`` (kimi_extract's spans: kinds and bands)."""
    from kimi_extract.ground import fold

    for value, span in zip(values, spans, strict=True):
        where = (span.start, span.end) if span.start is not None else None
        grounded = span.kind in GROUNDED and where is not None
        right = False
        if value.cls != "absent" and where is not None:
            found = fold(text[where[0] : where[1]])
            # the value itself, or the phrase it was drawn from, elsewhere (case and spacing
            # aside: the truths are its occurrences as written)
            own = found == fold(value.value) or (
                value.truth is not None and found == fold(text[value.truth[0] : value.truth[1]])
            )
            right = _overlaps(where, value.truths) or own
        if value.cls == "absent":
            tally.add("absent false", grounded)
            tally.add(f"absent false {lang}", grounded)
            tally.add(f"absent {value.sub} false", grounded)
            tally.add(f"absent {value.sub} false {lang}", grounded)
            tally.add("absent near", span.kind == "near")
        elif value.cls == "verbatim":
            tally.add("verbatim recall", grounded and right)
            tally.add(f"verbatim recall {lang}", grounded and right)
            if _region_unique(value):
                tally.add("right occurrence", grounded and _overlaps(where, [value.truth or []]))
        else:
            tally.add("rewrite recall", grounded and right)
            tally.add(f"rewrite {value.sub} recall", grounded and right)
            tally.add(f"rewrite {value.sub} recall {lang}", grounded and right)
        if where is not None and span.kind in (*GROUNDED, "near"):
            tally.add(f"kind {span.kind} right", right)
            if span.kind in ("fuzzy", "near"):
                band = _band(span.kind, value, text[where[0] : where[1]])
                tally.add(f"band {span.kind} {band}", right)
            if span.kind == "normalized":
                tally.add(f"rule {_rule(value, text, span)}", right)


def _band(kind: str, value: Value, found: str) -> int:
    """The raw similarity band (5 points wide) of a fuzzy or near span."""
    import unicodedata

    from rapidfuzz.distance import OSA

    from kimi_extract.ground import fold

    a = unicodedata.normalize("NFC", fold(value.value.strip()))
    b = unicodedata.normalize("NFC", fold(found))
    raw = 100.0 * OSA.normalized_similarity(a, b)
    return int(raw // 5 * 5)


def _rule(value: Value, text: str, span: Any) -> str:
    """Which normalized rule a span came from, as far as the benchmark can tell."""
    from kimi_extract.ground import fold

    if fold(text[span.start : span.end]) == fold(value.value.strip()):
        return "folded"
    return value.sub if value.cls == "rewrite" else "other"


def _theirs(
    python: str, jobs: list[dict[str, Any]]
) -> tuple[str, list[tuple[float, list[tuple[int, int] | None]]]]:
    with tempfile.TemporaryDirectory(prefix="kx-bench-lx-") as folder:
        spec = Path(folder) / "cases.json"
        result = Path(folder) / "result.json"
        spec.write_text(json.dumps(jobs), encoding="utf-8")
        subprocess.run(
            [python, str(HERE / "_langextract_worker.py"), str(spec), str(result)],
            check=True,
            timeout=3600,
        )
        data = json.loads(result.read_text(encoding="utf-8"))
    out = [
        (c["seconds"], [(s[0], s[1]) if s is not None else None for s in c["spans"]])
        for c in data["cases"]
    ]
    return data["version"], out


def _score_theirs(values: list[Value], spans: list[Any], tally: Tally, text: str) -> None:
    from kimi_extract.ground import fold

    for value, where in zip(values, spans, strict=True):
        if value.cls == "absent":
            tally.add("absent false", where is not None)
            continue
        own = where is not None and fold(text[where[0] : where[1]]) == fold(value.value)
        right = where is not None and (_overlaps(where, value.truths) or own)
        tally.add(f"{value.cls} recall", right)
        if value.cls == "verbatim" and _region_unique(value):
            tally.add(
                "right occurrence", where is not None and _overlaps(where, [value.truth or []])
            )


def _anchor(value: Value, records: dict[str, int]) -> int:
    """Where a value's record sits: its truth, or (absent values) its record's first truth."""
    return value.truth[0] if value.truth else records.get(value.path.rsplit(".", 1)[0], 0)


def _pages(docs: list[Doc], rng: random.Random) -> tuple[str, list[Value]]:
    """A 100-page document (the documents joined; about 3,000 characters a page) and 1,000
    values drawn from it."""
    parts: list[str] = []
    size = 0
    while size < 300_000:
        for doc in docs:
            parts.append(doc.text)
            size += len(doc.text) + 2
    text = "\n\n".join(parts)[:300_000]
    big = Doc("100 pages", "mixed", text, "", "")
    values: list[Value] = []
    while len(values) < 1_000:
        values += make_values(big, rng, records=80)
    for i, value in enumerate(values[:1_000]):
        value.path = f"records[{i // 4}].f{i % 4}"
    return text, values[:1_000]


def _pct(value: float) -> str:
    return "n/a" if value != value else f"{100 * value:.1f} %"


def _loads() -> float:
    """CPU seconds of what grounding reads once per process, on first use: dateparser's and
    japanera's data, cn2an and text2num, and pyspellchecker's English word list."""
    from kimi_extract.ground import align

    started = time.process_time()
    align(
        "Signed on 5 March 2024, three copies, 一百二十万, 令和6年3月5日; the Foundation",
        [("a", "2024-03-05"), ("b", "three"), ("c", "1200000"), ("d", "the Foundatoin")]
        + [("e", "March 5, 2024")],
    )
    return time.process_time() - started


def measure(quick: bool) -> Section:
    rng = random.Random(SEED)
    docs = _docs(quick)
    tally = Tally()
    per_doc: list[tuple[Doc, list[Value], float]] = []
    loads = _loads()
    seconds = 0.0
    for doc in docs:
        values = make_values(doc, rng, records=20)
        took, spans = _ours(doc.text, values)
        seconds += took
        score(doc.text, values, spans, tally, doc.lang)
        per_doc.append((doc, values, took))
    fuzzy = Tally()
    fuzzy_rng = random.Random(SEED + 2)
    for doc in docs:
        values = make_fuzzy_values(doc, fuzzy_rng, records=FUZZY_RECORDS)
        score(doc.text, values, _ours(doc.text, values)[1], fuzzy, doc.lang)
    text, values = _pages(docs, random.Random(SEED + 1))
    page_runs = [_ours(text, values)[0] for _ in range(1 if quick else 3)]
    pages_s = statistics.median(page_runs)
    python = _langextract_python()
    version = ""
    theirs: dict[str, Tally] = {}
    their_s: dict[str, float] = {}
    if python is not None:
        jobs: list[dict[str, Any]] = []
        for doc, values, _ in per_doc:
            records = {}
            for v in values:
                if v.truth:
                    records.setdefault(v.path.rsplit(".", 1)[0], v.truth[0])
            anchors = [_anchor(v, records) for v in values]
            for mode in ("whole", "chunks"):
                jobs.append(
                    {
                        "text": doc.text,
                        "values": [v.value for v in values],
                        "anchors": anchors,
                        "tokenizer": "unicode" if doc.lang != "en" else "regex",
                        "mode": mode,
                        "repeats": 1,
                    }
                )
        version, results = _theirs(python, jobs)
        for i, (seconds_lx, spans) in enumerate(results):
            doc, values, _ = per_doc[i // 2]
            mode = jobs[i]["mode"]
            _score_theirs(values, spans, theirs.setdefault(mode, Tally()), doc.text)
            their_s[mode] = their_s.get(mode, 0.0) + seconds_lx
    return _section(quick, docs, tally, fuzzy, seconds, loads, pages_s, theirs, their_s, version)


def _section(
    quick: bool,
    docs: list[Doc],
    tally: Tally,
    fuzzy: Tally,
    seconds: float,
    loads: float,
    pages_s: float,
    theirs: dict[str, Tally],
    their_s: dict[str, float],
    version: str,
) -> Section:
    rows = []
    keys = [
        ("absent values given a span (exact/normalized/fuzzy)", "absent false"),
        ("  ... of which shown as near", "absent near"),
        ("verbatim recall (any occurrence)", "verbatim recall"),
        ("right occurrence (repeated values, schema order)", "right occurrence"),
        ("rewrite recall", "rewrite recall"),
    ]
    for label, key in keys:
        row = [label, f"{tally.total(key):,}", _pct(tally.share(key))]
        for mode in ("whole", "chunks"):
            other = theirs.get(mode)
            mapped = key if key != "rewrite recall" else "rewrite recall"
            row.append(_pct(other.share(mapped)) if other and key != "absent near" else "")
        rows.append(row)
    for label, key in (
        ("fuzzy sample: near misses given a span (one slip)", "absent false"),
        ("  ... of which shown as near", "absent near"),
        ("fuzzy sample: typos grounded", "rewrite typo recall"),
        ("fuzzy sample: spelling variants grounded", "rewrite variant recall"),
    ):
        rows.append([label, f"{fuzzy.total(key):,}", _pct(fuzzy.share(key)), "", ""])
    rows.append(
        [
            "CPU seconds, all documents",
            f"{len(docs)} docs",
            f"{seconds:.3f}",
            f"{their_s.get('whole', float('nan')):.3f}" if theirs else "not run",
            f"{their_s.get('chunks', float('nan')):.3f}" if theirs else "not run",
        ]
    )
    by_lang = ", ".join(
        f"{lang}: verbatim {_pct(tally.share(f'verbatim recall {lang}'))}, absent false "
        f"{_pct(tally.share(f'absent false {lang}'))}"
        for lang in ("en", "zh", "ja", "mixed")
    )
    subs = ", ".join(
        f"{sub} {_pct(tally.share(k := f'rewrite {sub} recall'))} ({tally.total(k)})"
        for sub in ("date", "number", "name", "abbreviation", "boundary", "typo")
    )
    misses = ", ".join(
        f"{sub} {_pct(tally.share(k := f'absent {sub} false'))} ({tally.total(k)})"
        for sub in ("negation", "digit", "word", "combined")
    )
    both = tally.merged(fuzzy)
    kinds = ", ".join(
        f"{kind} {_pct(1 - both.share(k := f'kind {kind} right'))} of {both.total(k)}"
        for kind in (*GROUNDED, "near")
    )
    bands = "; ".join(
        f"{key.removeprefix('band ')}: {_pct(both.share(key))} right of {both.total(key)}"
        for key in sorted(k for k in both.counts if k.startswith("band "))
    )
    rules = "; ".join(
        f"{key.removeprefix('rule ')}: {_pct(both.share(key))} right of {both.total(key)}"
        for key in sorted(k for k in both.counts if k.startswith("rule "))
    )
    fuzzy_by_lang = "; ".join(
        f"{lang}: "
        + ", ".join(
            f"{sub} {_pct(fuzzy.share(k := f'rewrite {sub} recall {lang}'))} of {fuzzy.total(k)}"
            for sub in ("typo", "variant", "cjk-typo")
            if fuzzy.total(f"rewrite {sub} recall {lang}")
        )
        + f", slips grounded {_pct(fuzzy.share(k := f'absent slip false {lang}'))} of "
        f"{fuzzy.total(k)}"
        for lang in ("en", "zh", "ja", "mixed")
    )
    notes = [
        f"By language: {by_lang}.",
        f"Rewrite recall by kind: {subs}. Near misses grounded (false), by kind: {misses}.",
        f"Wrong spans per kind, both samples (absent value grounded, or a span over none of "
        f"the value's occurrences that reads neither the value nor what it was drawn from): "
        f"{kinds}.",
        f"Fuzzy sample ({FUZZY_RECORDS} records a document, aligned apart; values one slip "
        f"from a phrase, `_grounding_fuzzy.py`), found (typos, variants, wrong CJK characters) "
        f"and slips grounded (false), by language: {fuzzy_by_lang}.",
        f"Calibration (both samples), fuzzy and near by raw similarity band: {bands}. "
        f"Normalized by rule: {rules}.",
        f"1,000 values on a 100-page document (300,000 characters): {pages_s:.3f} s CPU "
        f"(median of {1 if quick else 3}).",
        f"CPU seconds of the documents: `align` per document, summed; before them, what "
        f"grounding reads once per process on first use (dateparser's and japanera's data, "
        f"cn2an, text2num, pyspellchecker's English word list) took {loads:.3f} s, not counted.",
    ]
    if theirs:
        ratio = their_s["chunks"] / seconds if seconds else float("nan")
        notes.append(
            f"LangExtract {version}: `Resolver().align` (exact 'dp', fuzzy 'lcs', threshold "
            "0.75) in its own interpreter; 'whole': each document's values against its whole "
            "text; 'chunks': as lx.extract runs it, each value against the 1,000-character chunk "
            "(its ChunkIterator) holding its record. CPU seconds summed over the documents: "
            f"per-chunk mode {their_s['chunks']:.3f} s, whole-document {their_s['whole']:.3f} s; "
            f"kimi_extract {seconds:.3f} s ({ratio:.1f}x less than per-chunk)."
        )
    else:
        notes.append(
            f"LangExtract not run: no interpreter with `langextract` (set {LANGEXTRACT_ENV})."
        )
    targets: list[tuple[str, str, bool | None]] = [
        (
            "absent values with an exact/normalized/fuzzy span <= 1 %",
            _pct(tally.share("absent false")),
            tally.share("absent false") <= 0.01,
        ),
        (
            "fuzzy sample: near misses (one slip) with an exact/normalized/fuzzy span <= 1 %",
            _pct(fuzzy.share("absent false")),
            fuzzy.share("absent false") <= 0.01,
        ),
        (
            "verbatim recall >= 99.5 %",
            _pct(tally.share("verbatim recall")),
            tally.share("verbatim recall") >= 0.995,
        ),
        (
            "right occurrence >= 85 %",
            _pct(tally.share("right occurrence")),
            tally.share("right occurrence") >= 0.85,
        ),
        (
            "rewrite recall >= 80 %",
            _pct(tally.share("rewrite recall")),
            tally.share("rewrite recall") >= 0.8,
        ),
        (
            f"1,000 values on a 100-page document < {PAGES_TARGET_S} s CPU",
            f"{pages_s:.3f} s",
            pages_s < PAGES_TARGET_S,
        ),
    ]
    tokens = quote_tokens(quick)
    plain, quoted = tokens["True"], tokens["quotes"]
    more = {k: quoted[k] / plain[k] - 1 for k in ("prompt", "answer")}
    notes.append(
        f'What grounding="quotes" costs ({tokens["rows"]} rows of generated English and Chinese '
        "prose, ~600 tokens each, a contract model; simulator token rules; per row): prompt "
        f"{plain['prompt']:,.0f} -> {quoted['prompt']:,.0f} (+{_pct(more['prompt'])}), answer "
        f"{plain['answer']:,.0f} -> {quoted['answer']:,.0f} (+{_pct(more['answer'])})."
    )
    return Section(
        key="9",
        title="Grounding on real text: false groundings, recall, occurrence, time; vs LangExtract",
        command=f"{LANGEXTRACT_ENV}=/work/venv-lx/bin/python python benchmarks/run.py --only 9",
        headers=["measure", "values", "kimi_extract", "LangExtract whole", "LangExtract chunks"],
        rows=rows,
        targets=targets,
        notes=notes,
        data={
            "pages_s": pages_s,
            "loads_s": loads,
            "shares": {k: tally.share(k) for k in tally.counts},
            "totals": {k: tally.total(k) for k in tally.counts},
            "fuzzy_shares": {k: fuzzy.share(k) for k in fuzzy.counts},
            "fuzzy_totals": {k: fuzzy.total(k) for k in fuzzy.counts},
            "langextract": {m: {k: t.share(k) for k in t.counts} for m, t in theirs.items()},
            "langextract_s": their_s,
            "quote_tokens": tokens,
        },
    )


if __name__ == "__main__":
    from report import console_table

    print(console_table(measure("--quick" in sys.argv)))
