"""One Kimi profile: every Kimi rule sits in ``kimi_extract/kimi.py``, each citing its source.

``kimi.py`` holds the rules (model table, hosts, cache TTLs, error types, 429 wording, walle's
limits ...); the stages that apply them import them. These tests keep it that way: each public
rule in ``kimi.py`` carries a comment citing a document vendored under ``docs/reference/`` (by its
path) or walle, and no other library module spells a Kimi rule as a literal. The simulator, a
model of Kimi's server that writes the server's own messages, is outside this check (it imports
the shared rules from ``kimi.py``). Code cites only documents a reader can open: the files under
``docs/reference/`` or public ones, never "the seed" or "the notes" of an earlier checkout.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "kimi_extract"
KIMI = ROOT / "kimi.py"
REFERENCE = ROOT.parent / "docs" / "reference"
#: A citation: a document vendored under docs/reference/ (by its path), or Moonshot's validator.
SOURCES = re.compile(r"docs/reference/[\w.-]+\.(?:md|yaml|txt)\b|\bwalle\b")

#: Literals that are Kimi rules: a module other than kimi.py that spells one holds a rule.
KIMI_LITERALS = {
    "evolink.ai": "hosts (kimi.DEFAULT_BASE_URL / MULTIMODAL_BASE_URL)",
    "$web_search": "kimi.WEB_SEARCH_FUNCTION",
    "builtin_function": "kimi.BUILTIN_FUNCTION",
    "try again after": "kimi.RETRY_AFTER_MESSAGE",
    "organization": "kimi.LIMIT_MESSAGES",
    "invalid_request_error": "kimi.STATUS_OF_ERROR_TYPE",
    "rate_limit_reached_error": "kimi.STATUS_OF_ERROR_TYPE",
    "engine_overloaded_error": "kimi.STATUS_OF_ERROR_TYPE",
    "exceeded_current_quota_error": "kimi.QUOTA_ERROR_TYPE",
    "5m": "kimi.CACHE_TTLS",
    "1h": "kimi.CACHE_TTLS",
}
KIMI_NUMBERS = {
    1_048_576: "kimi.CONTEXT_WINDOW / MAX_COMPLETION_TOKENS",
    131_072: "kimi.SERVER_DEFAULT_MAX_COMPLETION_TOKENS",
}
#: (module, literal) -> why it stays there.
ALLOWED = {
    ("records.py", "1h"): "Pricing.cost prices 1h cache writes; kimi imports records, not back",
    ("records.py", "5m"): "Pricing.cost's default TTL; kimi imports records, not back",
}


def _docstrings(tree: ast.AST) -> set[int]:
    """Strings that are documentation, not values: module, class and function docstrings, and
    the attribute docstrings under dataclass fields (any string standing alone as a statement)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                found.add(id(node.value))
    return found


def _stray_rules() -> list[str]:
    stray = []
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        if path == KIMI or module.startswith("simulator/"):
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = _docstrings(tree)
        for node in ast.walk(tree):
            if not isinstance(node, ast.Constant) or id(node) in docstrings:
                continue
            if isinstance(node.value, str):
                for literal, home in KIMI_LITERALS.items():
                    exact = literal in ("5m", "1h")
                    hit = node.value == literal if exact else literal in node.value
                    if hit and (module, literal) not in ALLOWED:
                        stray.append(f"kimi_extract/{module}:{node.lineno}: {literal!r} -> {home}")
            elif type(node.value) is int and node.value in KIMI_NUMBERS:
                home = KIMI_NUMBERS[node.value]
                stray.append(f"kimi_extract/{module}:{node.lineno}: {node.value} -> {home}")
    return stray


def test_no_module_but_kimi_spells_a_kimi_rule():
    stray = _stray_rules()
    assert not stray, "Kimi rules outside kimi.py (import them from there):\n" + "\n".join(stray)


def _public_rules() -> list[tuple[str, int, str]]:
    """(name, line, the comments of its block) for each public rule in kimi.py.

    A block is the run of non-blank lines a rule ends, so grouped constants share one citation.
    """
    lines = KIMI.read_text(encoding="utf-8").splitlines()
    tree = ast.parse("\n".join(lines))
    rules = []
    for node in tree.body:
        if isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names = [t.id for t in targets if isinstance(t, ast.Name)]
        elif isinstance(node, ast.ClassDef):
            names = [node.name]
        else:
            continue
        for name in names:
            if name.startswith("_"):
                continue
            start = node.lineno - 1
            above = []
            while start > 0 and lines[start - 1].strip():  # the block it belongs to
                start -= 1
                if lines[start].lstrip().startswith("#"):
                    above.append(lines[start])
            text = "\n".join(above)
            if isinstance(node, ast.ClassDef):  # its docstring and field comments
                text += "\n" + "\n".join(lines[node.lineno - 1 : node.end_lineno])
            rules.append((name, node.lineno, text))
    return rules


#: Names in kimi.py that are ours, not Kimi's (so they cite no source) or that group cited rules.
OURS = {"DEFAULT_MAX_COMPLETION_TOKENS", "DEFAULT_MODEL", "MODELS", "DEFAULT_LIMITS"}


def test_every_rule_in_kimi_cites_its_source():
    uncited = [
        f"kimi.py:{line} {name}"
        for name, line, text in _public_rules()
        if name not in OURS and not SOURCES.search(text)
    ]
    assert not uncited, "rules without a citation (docs/reference/<file> or walle):\n" + "\n".join(
        uncited
    )


def test_kimi_imports_only_exceptions_and_records():
    tree = ast.parse(KIMI.read_text(encoding="utf-8"))
    inner = {
        node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.level
    }
    assert inner <= {"exceptions", "records"}, inner


@pytest.mark.parametrize(
    ("message", "seconds"),
    [
        ("request reached max organization concurrency: 1, please try again after 1 seconds", 1),
        ("organization max RPM: 3, please try again after 2.5 seconds", 2.5),
        ("please try again after 250 ms", 0.25),
    ],
)
def test_the_429_wording_rule_reads_the_wait(message, seconds):
    from kimi_extract.kimi import RETRY_AFTER_MESSAGE

    match = RETRY_AFTER_MESSAGE.search(message)
    assert match is not None
    number, unit = float(match.group(1)), match.group(2)
    assert number / (1000 if unit in ("ms", "milliseconds") else 1) == seconds


# -- citations point into the repository --------------------------------------------------------

#: How code cited the API documents before they were vendored: "the seed" (the reference), "the
#: notes" (KIMI-NOTES.md), without a path a reader could open.
OLD_CITATION = re.compile(
    r"\bthe seed\b|\bseed's\b|\bseed reference\b|\bseed component\b|\bnew seed\b"
    r"|(?<![\w.])\(seed\b|; seed\)|^#:? seed\b|\bseed ``|\bseeds/|\bshared/kimi-"
    r"|(?<!docs/reference/)KIMI-NOTES|\bnotes\b(?=[:;)]| \(| \")",
    re.I,
)
#: Files other work is editing now, whose citations are rewritten when it lands (prefixes of
#: paths under kimi_extract/). A file whose citations are gone must leave this list.
PENDING: tuple[str, ...] = ()


def documentation(source: str) -> list[tuple[int, str]]:
    """(line, text) of every comment and every docstring line of a module's source."""
    found = [
        (token.start[0], token.string)
        for token in tokenize.generate_tokens(io.StringIO(source).readline)
        if token.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            if isinstance(node.value.value, str):
                lines = node.value.value.splitlines()
                found += [(node.lineno + n, line.strip()) for n, line in enumerate(lines)]
    return found


def old_citations(source: str) -> list[str]:
    return [f"{line}: {text}" for line, text in documentation(source) if OLD_CITATION.search(text)]


def test_an_old_citation_is_found_and_a_random_seed_is_not():
    source = (
        '"""Rules (seed, ``ChatUsage``) and KIMI-NOTES (Media); the seed\'s example."""\n'
        "# notes: real 429s carry no header\n"
        'x = 1  # docs/reference/KIMI-NOTES.md, "Caching"\n'
        "def f(seed=0):  # random.Random(seed) draws\n"
        '    """The same seed, the same draws; ``seed`` defaults to 0; seeded faults;\n'
        '    notes from a reviewer."""\n'
    )
    assert [hit.split(":")[0] for hit in old_citations(source)] == ["2", "1"]


def test_code_cites_documents_in_the_repository():
    found, still = [], set()
    for path in sorted(ROOT.rglob("*.py")):
        module = path.relative_to(ROOT).as_posix()
        hits = old_citations(path.read_text(encoding="utf-8"))
        pending = [prefix for prefix in PENDING if module.startswith(prefix)]
        if pending:
            still.update(pending if hits else [])
            continue
        found += [f"kimi_extract/{module}:{hit}" for hit in hits]
    assert found == [], "cite docs/reference/<file> (and the part of it) instead"
    assert sorted(set(PENDING) - still) == [], "these files cite no old form any more: unlist them"


def test_every_cited_reference_file_is_vendored_and_described():
    cited = set()
    for path in [*ROOT.rglob("*.py"), *(ROOT.parent / "tests").rglob("*.py")]:
        cited |= set(re.findall(r"docs/reference/([\w.-]+\.(?:md|yaml|txt))\b", path.read_text()))
    assert cited and sorted(name for name in cited if not (REFERENCE / name).is_file()) == []
    vendored = {path.name for path in REFERENCE.iterdir()} - {"README.md"}
    described = (REFERENCE / "README.md").read_text(encoding="utf-8")
    assert all(f"[`{name}`]({name})" in described for name in vendored), vendored
