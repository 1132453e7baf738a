"""Real text and a generator of values to ground in it (the grounding benchmark, section 9).

Documents are text nobody here wrote, as Debian and Python packages ship it:

- English: licence texts (``/usr/share/common-licenses``), Debian changelogs
  (``/usr/share/doc/*/changelog.Debian.gz``: dates, names, versions, bug numbers), Python
  package descriptions (``*.dist-info/METADATA`` in the running interpreter's site-packages);
- Chinese and Japanese: manual pages (``/usr/share/man/zh_CN``, ``/usr/share/man/ja``, and
  any ``usr/share/man`` tree under ``KX_GROUNDING_CORPUS``, e.g. ``apt-get download
  manpages-zh manpages-ja && dpkg -x`` there), rendered with ``groff -Tutf8 -mandoc``; they mix
  in English option names, paths and numbers (the "mixed" documents are those with the most
  Latin text).

The committed sample (``tests/data/grounding_corpus.json``, with each document's source and
licence) holds excerpts of such documents and the values ``make_values`` drew from them.

``make_values(doc, rng)`` writes values as a model writes them, in records (objects of 2-5
fields drawn from one region of the text, fields in a shuffled "schema" order, records in
document order), each value of one class:

- **verbatim**: a phrase of the text (1-6 words, or 2-10 Chinese / Japanese characters, a
  number or a date as written), whitespace runs written as one space; a third of them are
  drawn among phrases that occur more than once in the document;
- **rewrite** (what it stands for is in the text, written otherwise): ``date`` (a date of the
  text in another form: ISO, ``March 5, 2024``, ``05.03.2024``, ``2024年3月5日``,
  ``令和6年3月5日``), ``number`` (digits <-> words or a scale: ``3`` / ``three``,
  ``1200000`` / ``1.2 million``), ``name`` (``Last, First``), ``abbreviation`` (a long word
  cut to its first letters and a point, or capitalised words to their acronym), ``boundary``
  (an extended or cut boundary: a word cut short, quotes or a point added, an article added;
  Chinese and Japanese: corner brackets or quotes around it, or a full stop after it), ``typo``
  (one slip in a word of six letters or more: a letter dropped, doubled, swapped with the next
  or replaced by its keyboard neighbour; what the fuzzy stage is for);
- **absent** (near misses: similar text is there, but it says something else):
  ``negation`` (a negation added or removed: English not/no/never/n't; Chinese 不/没/无/非/
  未; Japanese ない/ず/ません/非/不/無), ``digit`` (a digit changed, added or dropped),
  ``word`` (a content word swapped for another word of the same text), ``combined`` (the first
  half of one phrase of the text and the second half of another). An absent value whose folded
  form occurs in the text is dropped (it is not absent).

Each value carries every occurrence of what it stands for (``truths``) and the one it was drawn
from (``truth``), so both "any occurrence" and "the right occurrence" can be scored.
"""

from __future__ import annotations

import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import sysconfig
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any

SAMPLE = Path(__file__).resolve().parent.parent / "tests" / "data" / "grounding_corpus.json"
CORPUS_ENV = "KX_GROUNDING_CORPUS"

_CJK = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]")
_CJK_RUN = re.compile(r"[\u3040-\u30ff\u4e00-\u9fff]{2,}")
#: A word as a reader sees one: a run of word characters and inner punctuation (``an2cn``,
#: ``/etc/passwd``, ``#986332``, ``don't``), no punctuation at its ends but a leading ``#``.
_WORD = re.compile(r"#?\w(?:[\w'./@+#-]*\w)?")
_NUMBER = re.compile(r"(?<![\w.#-])\d+(?:\.\d+)?(?![\w.]*\d)(?![A-Za-z])")
_MONTHS = "January February March April May June July August September October November December"
_MONTH_NAMES = _MONTHS.split()
_DATES = re.compile(
    r"\b(\d{1,2}) (Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec)[a-z]* (\d{4})\b"
    r"|\b(\d{4})-(\d{2})-(\d{2})\b|(\d{4})年(\d{1,2})月(\d{1,2})日"
)
_NAME = re.compile(r"(?:by|--|Copyright \(C\) \d{4}) ([A-Z][a-z]+) ([A-Z][a-z]+)\b")
_NUMBER_WORDS = {
    "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "ten": 10,
    "twelve": 12, "twenty": 20, "thirty": 30, "sixty": 60, "hundred": 100,
}  # fmt: skip
_EN_NEGATIONS = (" not ", " no ", " never ", "n't ")
_AUXILIARIES = re.compile(r"\b(is|are|can|may|must|will|does|do|should|was|were|could)\b")
_ZH_NEGATIONS = "不没无非未"
_JA_NEGATIONS = ("ない", "ず", "ません", "非", "不", "無")
_ARTICLES = ("the ", "a ")


@dataclass
class Doc:
    """One document: an id, its language (en, zh, ja, mixed), text, source and licence."""

    id: str
    lang: str
    text: str
    source: str
    licence: str


@dataclass
class Value:
    """A value to ground: its path in the answer, class and subclass, and where it stands."""

    path: str
    value: str
    cls: str
    sub: str
    truth: list[int] | None = None
    truths: list[list[int]] = field(default_factory=list)


# -- documents -----------------------------------------------------------------------------------


def _render(page: Path) -> str:
    raw = gzip.decompress(page.read_bytes()) if page.suffix == ".gz" else page.read_bytes()
    groff = shutil.which("groff")
    if groff is None:
        return ""
    done = subprocess.run(
        [groff, "-k", "-Tutf8", "-mandoc", "-P-cbou"],
        input=raw,
        capture_output=True,
        timeout=60,
        check=False,
    )
    text = done.stdout.decode("utf-8", "replace")
    return re.sub(r"\n{3,}", "\n\n", text).strip()


def _man_roots() -> list[Path]:
    roots = [Path("/usr/share/man")]
    extra = os.environ.get(CORPUS_ENV)
    if extra:
        roots += sorted(Path(extra).glob("**/usr/share/man"))
    return roots


def collect(limit_per_lang: int = 20, max_chars: int = 12_000) -> list[Doc]:
    """Documents found on this machine (module docstring), at most ``limit_per_lang`` per
    language, each cut to ``max_chars`` at a paragraph."""
    docs: list[Doc] = []
    seen: set[int] = set()

    def add(doc_id: str, lang: str, text: str, source: str, licence: str) -> None:
        text = _cut(text, max_chars)
        if len(text) >= 800 and hash(text) not in seen:
            seen.add(hash(text))
            docs.append(Doc(doc_id, lang, text, source, licence))

    licences = Path("/usr/share/common-licenses")
    for name in ("GPL-3", "Apache-2.0", "MPL-2.0", "LGPL-2.1", "Artistic", "GFDL-1.3", "BSD"):
        path = licences / name
        if path.exists():
            add(f"licence-{name}", "en", path.read_text("utf-8", "replace"), str(path), name)
    changelogs = sorted(Path("/usr/share/doc").glob("*/changelog.Debian.gz"))
    for path in changelogs[:: max(1, len(changelogs) // limit_per_lang)][:limit_per_lang]:
        text = gzip.decompress(path.read_bytes()).decode("utf-8", "replace")
        add(
            f"changelog-{path.parent.name}",
            "en",
            text,
            f"{path.parent.name}: {path}",
            f"{path.parent.name}: see /usr/share/doc/{path.parent.name}/copyright",
        )
    site = Path(sysconfig.get_paths()["purelib"])
    for path in sorted(site.glob("*.dist-info/METADATA"))[: limit_per_lang * 3]:
        text = path.read_text("utf-8", "replace")
        body = text.split("\n\n", 1)[1] if "\n\n" in text else ""
        licence = re.search(r"^License(?:-Expression)?: (.+)$", text, re.M)
        lang = "zh" if len(_CJK.findall(body)) > 200 else "en"
        dist = path.parent.name.removesuffix(".dist-info")
        terms = licence.group(1) if licence else "?"
        add(f"pydoc-{dist}", lang, body, f"PyPI {dist}: METADATA", terms)
    for lang, folder in (("zh", "zh_CN"), ("ja", "ja")):
        pages: list[Path] = []
        for root in _man_roots():
            pages += sorted((root / folder).glob("man*/*"))
        licence = {"zh": "manpages-zh: GFDL-1.2+", "ja": "manpages-ja: the original pages' (DFSG)"}
        step = max(1, len(pages) // (limit_per_lang * 3))
        for path in pages[::step][: limit_per_lang * 3]:
            text = _render(path)
            latin = len(re.findall(r"[A-Za-z]", text))
            kind = "mixed" if latin > 1.2 * len(_CJK.findall(text)) else lang
            source = _package_path(path)
            owner = source.split(":", 1)[0]
            terms = licence[lang] if owner.startswith("manpages-") else f"{owner}: its copyright"
            add(f"man-{folder}-{path.name}", kind, text, source, terms)
    by_lang: dict[str, list[Doc]] = {}
    for doc in docs:
        by_lang.setdefault(doc.lang, []).append(doc)
    return [d for group in by_lang.values() for d in group[:limit_per_lang]]


def _package_path(path: Path) -> str:
    """``package: /usr/share/...`` for a file of an installed or extracted Debian package."""
    text = str(path)
    extra = os.environ.get(CORPUS_ENV)
    if extra and text.startswith(extra):
        text = text[len(extra) :]
        if not text.startswith("/"):
            text = "/" + text
        folder = "manpages-zh" if "/zh_" in text else "manpages-ja"
        return f"{folder}: {text}"
    owner = shutil.which("dpkg")
    if owner:
        done = subprocess.run(["dpkg", "-S", text], capture_output=True, text=True, check=False)
        if done.returncode == 0:
            return f"{done.stdout.split(':', 1)[0]}: {text}"
    return f"?: {text}"


def _cut(text: str, size: int) -> str:
    if len(text) <= size:
        return text
    cut = text.rfind("\n\n", 0, size)
    return text[: cut if cut > size // 2 else size]


def load_sample() -> tuple[list[Doc], dict[str, list[Value]]]:
    """The committed test corpus: its documents and the values drawn from each."""
    data = json.loads(SAMPLE.read_text("utf-8"))
    docs = [Doc(**d) for d in data["documents"]]
    values = {k: [Value(**v) for v in vs] for k, vs in data["values"].items()}
    return docs, values


# -- values --------------------------------------------------------------------------------------


def _fold(text: str) -> str:
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from kimi_extract.ground import fold

    return fold(text)


def _occurrences(text: str, phrase: str) -> list[list[int]]:
    """Every occurrence of ``phrase`` in ``text``, whitespace runs matching any whitespace."""
    pattern = r"\s+".join(re.escape(p) for p in phrase.split())
    if not pattern:
        return []
    if re.match(r"[A-Za-z0-9]", phrase):
        pattern = r"(?<![A-Za-z0-9])" + pattern
    if re.search(r"[A-Za-z0-9]$", phrase):
        pattern += r"(?![A-Za-z0-9])"
    return [[m.start(), m.end()] for m in re.finditer(pattern, text)][:200]


def _phrase(rng: random.Random, text: str, region: tuple[int, int]) -> tuple[str, int, int] | None:
    """A phrase of the text inside ``region``: words, or a run of CJK characters."""
    low, high = region
    chunk = text[low:high]
    if _CJK.search(chunk) and rng.random() < 0.7:
        runs = list(_CJK_RUN.finditer(chunk))
        if not runs:
            return None
        run = rng.choice(runs)
        if run.start() == 0 or run.end() == len(chunk):
            return None
        size = rng.randint(2, min(10, len(run.group())))
        start = run.start() + rng.randint(0, len(run.group()) - size)
        return chunk[start : start + size], low + start, low + start + size
    # whole words only: the region's first and last words may be cut by its edges
    words = list(_WORD.finditer(chunk))[1:-1]
    if len(words) < 2:
        return None
    count = rng.randint(1, 6)
    first = rng.randrange(len(words))
    last = min(len(words) - 1, first + count - 1)
    start, end = words[first].start(), words[last].end()
    if "\n\n" in chunk[start:end]:
        return None
    phrase = " ".join(chunk[start:end].split())
    return phrase, low + start, low + end


def _other_date_form(rng: random.Random, when: date, written: str) -> str:
    forms = [
        when.isoformat(),
        f"{_MONTH_NAMES[when.month - 1]} {when.day}, {when.year}",
        f"{when.day} {_MONTH_NAMES[when.month - 1]} {when.year}",
        f"{when.day:02d}.{when.month:02d}.{when.year}",
        f"{when.year}年{when.month}月{when.day}日",
    ]
    if when >= date(2019, 5, 1):
        forms.append(f"令和{when.year - 2018}年{when.month}月{when.day}日")
    elif when >= date(1989, 1, 8):
        forms.append(f"平成{when.year - 1988}年{when.month}月{when.day}日")
    return rng.choice([f for f in forms if f != written])


def _rewrites(rng: random.Random, text: str, region: tuple[int, int]) -> Value | None:
    low, high = region
    chunk = text[low:high]
    kind = rng.choice(("date", "number", "name", "abbreviation", "boundary", "typo"))
    if kind == "date":
        matches = list(_DATES.finditer(chunk))
        if not matches:
            return None
        m = rng.choice(matches)
        g = m.groups()
        try:
            if g[0]:
                month = [n[:3] for n in _MONTH_NAMES].index(g[1]) + 1
                when = date(int(g[2]), month, int(g[0]))
            elif g[3]:
                when = date(int(g[3]), int(g[4]), int(g[5]))
            else:
                when = date(int(g[6]), int(g[7]), int(g[8]))
        except ValueError:
            return None
        value = _other_date_form(rng, when, m.group())
        return Value("", value, "rewrite", "date", [low + m.start(), low + m.end()])
    if kind == "number":
        words = [m for m in re.finditer(r"\b[a-z]+\b", chunk) if m.group() in _NUMBER_WORDS]
        digits = [m for m in _NUMBER.finditer(chunk) if 1_000 <= float(m.group()) < 10**9]
        if words and (not digits or rng.random() < 0.5):
            m = rng.choice(words)
            value = str(_NUMBER_WORDS[m.group()])
        elif digits:
            m = rng.choice(digits)
            number = float(m.group())
            value = f"{number / 1000:g} thousand" if number < 10**6 else f"{number / 1e6:g} million"
            if float(value.split()[0]) * (1000 if "thousand" in value else 1e6) != number:
                return None
        else:
            return None
        return Value("", value, "rewrite", "number", [low + m.start(), low + m.end()])
    if kind == "name":
        names = list(_NAME.finditer(chunk))
        if not names:
            return None
        m = rng.choice(names)
        first, last = m.group(1), m.group(2)
        return Value("", f"{last}, {first}", "rewrite", "name", [low + m.start(1), low + m.end(2)])
    picked = _phrase(rng, text, region)
    if picked is None or _CJK.search(picked[0]) and kind == "abbreviation":
        return None
    phrase, start, end = picked
    if kind == "abbreviation":
        caps = re.search(r"\b([A-Z][a-z]{2,}) ([A-Z][a-z]{2,}) ([A-Z][a-z]{2,})\b", chunk)
        if caps and rng.random() < 0.4:
            acronym = "".join(w[0] for w in caps.groups())
            return Value(
                "", acronym, "rewrite", "abbreviation", [low + caps.start(), low + caps.end()]
            )
        words = phrase.split()
        longs = [i for i, w in enumerate(words) if len(w) >= 7 and w.isalpha()]
        if not longs:
            return None
        i = rng.choice(longs)
        words[i] = words[i][: rng.randint(3, 4)] + "."
        return Value("", " ".join(words), "rewrite", "abbreviation", [start, end])
    if kind == "typo":
        # one slip of the keys in a word of 6+ letters: a letter dropped, doubled, swapped
        # with the next, or replaced by its neighbour on the keyboard row
        words = phrase.split()
        longs = [i for i, w in enumerate(words) if len(w) >= 6 and w.isalpha() and w.isascii()]
        if not longs or len(phrase) < 10:
            return None
        i = rng.choice(longs)
        w = words[i]
        k = rng.randint(1, len(w) - 2)
        how = rng.randrange(4)
        if how == 0:
            w = w[:k] + w[k + 1 :]
        elif how == 1:
            w = w[:k] + w[k] + w[k:]
        elif how == 2:
            w = w[:k] + w[k + 1] + w[k] + w[k + 2 :]
        else:
            row = "qwertyuiopasdfghjklzxcvbnm"
            at = row.find(w[k].lower())
            w = w[:k] + (row[at + 1] if 0 <= at < len(row) - 1 else "e") + w[k + 1 :]
        words[i] = w
        return Value("", " ".join(words), "rewrite", "typo", [start, end])
    # boundary
    if _CJK.search(phrase):
        opening, closing = rng.choice((("「", "」"), ("“", "”"), ("『", "』"), ("", "。")))
        return Value("", opening + phrase + closing, "rewrite", "boundary", [start, end])
    how = rng.randrange(4)
    if how == 0 and len(phrase) > 8 and phrase[-1].isalpha():
        value = phrase[: -rng.randint(1, 3)]
    elif how == 1:
        value = f'"{phrase}"'
    elif how == 2:
        value = phrase + "."
    else:
        value = rng.choice(_ARTICLES) + phrase
    return Value("", value, "rewrite", "boundary", [start, end])


def _absent(rng: random.Random, text: str, region: tuple[int, int]) -> Value | None:
    kind = rng.choice(("negation", "digit", "word", "combined"))
    low, high = region
    chunk = text[low:high]
    if kind == "digit":
        numbers = [m for m in re.finditer(r"\d+(?:\.\d+)*", chunk)]
        if not numbers:
            return None
        m = rng.choice(numbers)
        start = max(0, m.start() - rng.randint(0, 20))
        start = chunk.rfind(" ", 0, m.start()) + 1 if rng.random() < 0.5 else m.start()
        end = m.end() + rng.randint(0, 12)
        phrase = " ".join(chunk[start:end].split())
        digits = [i for i, c in enumerate(phrase) if c.isdigit()]
        i = rng.choice(digits)
        how = rng.randrange(3)
        if how == 0:
            new = str((int(phrase[i]) + rng.randint(1, 9)) % 10)
            value = phrase[:i] + new + phrase[i + 1 :]
        elif how == 1:
            value = phrase[:i] + str(rng.randint(1, 9)) + phrase[i:]
        else:
            if len(digits) < 2:
                return None
            value = phrase[:i] + phrase[i + 1 :]
        return Value("", value, "absent", "digit")
    picked = _phrase(rng, text, region)
    if picked is None:
        return None
    phrase = picked[0]
    cjk = bool(_CJK.search(phrase))
    if kind == "negation":
        if cjk:
            if any(n in phrase for n in (*_ZH_NEGATIONS, *_JA_NEGATIONS)):
                for n in (*_JA_NEGATIONS, *_ZH_NEGATIONS):
                    if n in phrase:
                        value = phrase.replace(n, "", 1)
                        break
            else:
                i = rng.randint(1, max(1, len(phrase) - 1))
                marker = rng.choice(("不", "没", "无", "非", "未", "ない", "ず", "ません"))
                value = phrase[:i] + marker + phrase[i:]
        else:
            padded = f" {phrase} "
            found = [n for n in _EN_NEGATIONS if n in padded]
            if found:
                value = padded.replace(found[0], " ", 1).strip()
            else:
                aux = _AUXILIARIES.search(phrase)
                if aux is None:
                    words = phrase.split()
                    if len(words) < 2:
                        return None
                    i = rng.randint(1, len(words) - 1)
                    value = " ".join(words[:i] + [rng.choice(("not", "never", "no"))] + words[i:])
                else:
                    value = phrase[: aux.end()] + " not" + phrase[aux.end() :]
        return Value("", value, "absent", "negation")
    if kind == "word":
        if cjk:
            runs = _CJK_RUN.findall(text)
            other = rng.choice(runs)
            if len(phrase) < 3 or len(other) < 2:
                return None
            i = rng.randint(0, len(phrase) - 2)
            j = rng.randint(0, len(other) - 2)
            if phrase[i : i + 2] == other[j : j + 2]:
                return None
            value = phrase[:i] + other[j : j + 2] + phrase[i + 2 :]
        else:
            words = phrase.split()
            longs = [i for i, w in enumerate(words) if len(w) >= 4 and w.isalpha()]
            pool = sorted(set(re.findall(r"\b[a-z]{4,}\b", text)))
            if not longs or not pool:
                return None
            i = rng.choice(longs)
            word = rng.choice(pool)
            # another word, not a form of the same one (``symbol`` / ``symbols``)
            if word[:4] == words[i].lower()[:4] or word in phrase.lower():
                return None
            words[i] = word
            value = " ".join(words)
        return Value("", value, "absent", "word")
    # combined: halves of two phrases far apart
    second = None
    for _ in range(8):
        second = _phrase(rng, text, (0, len(text)))
        if second is not None and len(second[0]) >= (6 if cjk else 20):
            break
    if second is None or abs(second[1] - picked[1]) < 200:
        return None
    # each half a phrase itself: 3+ Chinese / Japanese characters, or 2+ words
    a, b = phrase, second[0]
    if cjk and _CJK.search(b):
        if len(a) < 6 or len(b) < 6:
            return None
        value = a[: len(a) // 2] + b[len(b) // 2 :]
    else:
        wa, wb = a.split(), b.split()
        if len(wa) < 4 or len(wb) < 4:
            return None
        value = " ".join(wa[: len(wa) // 2] + wb[len(wb) // 2 :])
    return Value("", value, "absent", "combined")


def _core(value: str) -> str:
    """A value without what a boundary may add (an article, quotes, a final point)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from kimi_extract.ground.forms import _EDGES

    return _EDGES.sub("", value) or value


def make_values(doc: Doc, rng: random.Random, records: int = 12) -> list[Value]:
    """Values for one document, in records (module docstring)."""
    text = doc.text
    folded = _fold(text)
    out: list[Value] = []
    # records in distinct regions of 600 characters (objects sit in different places)
    slots = max(1, len(text) // 600)
    starts = sorted(600 * s for s in rng.sample(range(slots), min(records, slots)))
    for r, low in enumerate(starts):
        region = (low, min(len(text), low + 600))
        fields: list[Value] = []
        tries = 0
        while len(fields) < rng.randint(2, 5) and tries < 40:
            tries += 1
            roll = rng.random()
            value: Value | None
            if roll < 0.5:
                # a third of the verbatim values are phrases that occur elsewhere too (the
                # right-occurrence measure needs them; they are a small share otherwise)
                picked = _phrase(rng, text, region)
                if rng.random() < 1 / 3:
                    for _ in range(10):
                        if picked is not None and len(_occurrences(text, picked[0])) > 1:
                            break
                        picked = _phrase(rng, text, region)
                value = None
                if picked is not None:
                    value = Value("", picked[0], "verbatim", "phrase", [picked[1], picked[2]])
            elif roll < 0.75:
                value = _rewrites(rng, text, region)
            else:
                value = _absent(rng, text, region)
                if value is not None and (not value.value.strip() or _fold(value.value) in folded):
                    value = None
            if value is None or not value.value.strip():
                continue
            if value.truth is not None:
                source = text[value.truth[0] : value.truth[1]]
                value.truths = _occurrences(text, source) or [value.truth]
            fields.append(value)
        # document order of the drawn spans, then the fields shuffled: a "schema" order
        rng.shuffle(fields)
        for f, value in enumerate(fields):
            value.path = f"records[{r}].f{f}"
            out.append(value)
    return out


def write_sample(docs: list[Doc], seed: int = 21) -> None:
    """Write the committed test corpus (documents and their values)."""
    rng = random.Random(seed)
    values = {doc.id: [asdict(v) for v in make_values(doc, rng, records=16)] for doc in docs}
    data = {
        "about": (
            "Excerpts of text shipped in Debian and Python packages (each document names its "
            "file and licence), and values drawn from them by benchmarks/_grounding_corpus.py "
            f"(seed {seed}). Regenerate: python benchmarks/_grounding_corpus.py --write-sample"
        ),
        "documents": [asdict(d) for d in docs],
        "values": values,
    }
    SAMPLE.parent.mkdir(parents=True, exist_ok=True)
    SAMPLE.write_text(json.dumps(data, ensure_ascii=False, indent=0) + "\n", "utf-8")


def sample_documents() -> list[Doc]:
    """The documents of the committed sample: per language a few, cut to 5,000 characters."""
    picked: list[Doc] = []
    docs = collect(limit_per_lang=12, max_chars=5_000)
    wanted = {"licence": 5, "changelog": 6, "zh": 8, "ja": 8, "mixed": 5}
    for kind, count in wanted.items():
        group = [d for d in docs if d.lang == kind or d.id.startswith(kind)]
        step = max(1, len(group) // count)
        picked += group[::step][:count]
    return picked


def main(argv: list[str]) -> int:
    if "--write-sample" in argv:
        write_sample(sample_documents())
        from _grounding_fuzzy import write_sample as write_fuzzy_sample  # (it imports this)

        write_fuzzy_sample()
        docs, values = load_sample()
        print(len(docs), "documents,", sum(len(v) for v in values.values()), "values")
        return 0
    for doc in collect():
        print(doc.lang, doc.id, len(doc.text))
    return 0


def summary(values: dict[str, list[Value]]) -> dict[str, Any]:
    """Counts of values per class and subclass."""
    counts: dict[str, int] = {}
    for group in values.values():
        for v in group:
            counts[f"{v.cls}/{v.sub}"] = counts.get(f"{v.cls}/{v.sub}", 0) + 1
    return counts


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
