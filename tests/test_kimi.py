"""One Kimi profile: every Kimi rule sits in ``kimi_extract/kimi.py``, each citing its source.

``kimi.py`` holds the rules (model table, hosts, cache TTLs, error types, 429 wording, walle's
limits ...); the stages that apply them import them. These tests keep it that way: each public
rule in ``kimi.py`` carries a comment naming the seed, the notes or walle, and no other library
module spells a Kimi rule as a literal. The simulator, a model of Kimi's server that writes the
server's own messages, is outside this check (it imports the shared rules from ``kimi.py``).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent / "kimi_extract"
KIMI = ROOT / "kimi.py"
#: A citation: the seed reference, the notes, or Moonshot's validator.
SOURCES = re.compile(r"\b(seed|notes|walle)\b", re.I)

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
    assert not uncited, "rules without a citation (seed / notes / walle):\n" + "\n".join(uncited)


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
