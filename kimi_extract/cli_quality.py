"""The quality commands of ``kimi-extract``: ``eval`` and ``compare`` (registered by ``cli``).

    kimi-extract eval PRED GOLD --schema FILE.py:Model [--on COL] [--html report.html]
    kimi-extract compare CANDIDATES.toml|.json --input IN --gold GOLD --schema FILE.py:Model ...

Exit codes as for the other commands: 0 done (rows that failed are scored as misses, not an
exit code), 2 could not start (bad arguments, a file that cannot be read, gold that does not fit
the model, an unknown setting: one line, ``error: ...``, nothing sent) or a run that stopped.

A candidates file holds a ``candidates`` table (name -> settings, the fields of
``kx.ExtractorConfig``) and, optionally, a ``base`` table of settings every candidate starts
from::

    [base]
    instructions = "Extract the invoice."

    [candidates.pro-low]
    model = "kimi-k3.1-pro"
    reasoning_effort = "low"

    [candidates.k3]
    model = "kimi-k3"

(JSON: ``{"base": {...}, "candidates": {"pro-low": {...}, ...}}``.)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .cli_io import (
    UsageError,
    add_prefix_args,
    column_prefix,
    load_model,
    printable,
    read_table,
    save_table,
)

EXIT_OK, EXIT_STOPPED = 0, 2


def cmd_eval(args: argparse.Namespace) -> int:
    """``kimi-extract eval``: score a run's output against gold, field by field."""
    from .exceptions import KimiExtractError
    from .quality import evaluate
    from .quality.html import evaluation_html

    model = load_model(args.schema)
    pred = read_table(Path(args.pred))
    gold = read_table(Path(args.gold))
    html_path = Path(args.html) if args.html else None
    if html_path is not None and not html_path.parent.is_dir():
        raise UsageError(f"--html: the directory {html_path.parent} does not exist")
    try:
        evaluation = evaluate(
            pred,
            gold,
            model,
            on=args.on,
            prefix=column_prefix(args) or "",
            n_boot=args.n_boot,
            seed=args.seed,
        )
        summary = evaluation.summary()
        worst = evaluation.worst(args.worst)
    except (KimiExtractError, TypeError, ValueError) as exc:
        raise UsageError(str(exc)) from None
    print(printable(summary))
    worst = worst[worst["wrong"] > 0]
    if len(worst):
        print(f"\nrows to look at first ({len(worst):,}):")
        print(printable(worst[["score", "wrong", "fields", "error"]].to_string()))
    if html_path is not None:
        title = f"{Path(args.pred).name} against {Path(args.gold).name}"
        page = evaluation_html(evaluation, title=title)
        try:
            html_path.write_text(page, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--html: cannot write {html_path}: {exc}") from None
        print(f"wrote the report to {html_path}", file=sys.stderr)
    return EXIT_OK


def read_candidates(path: Path) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    """(base settings, candidates) from a TOML or JSON candidates file (module docstring)."""
    if not path.is_file():
        raise UsageError(f"candidates file not found: {path}")
    suffix = path.suffix.lower()
    try:
        if suffix == ".toml":
            with path.open("rb") as handle:
                content: Any = tomllib.load(handle)
        elif suffix == ".json":
            content = json.loads(path.read_text(encoding="utf-8"))
        else:
            raise UsageError(f"candidates file {path}: use a .toml or .json file")
    except (tomllib.TOMLDecodeError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the candidates file {path}: {exc}") from None
    if not isinstance(content, dict):
        raise UsageError(f"candidates file {path}: expected a table with 'candidates'")
    unknown = sorted(set(content) - {"base", "candidates"})
    if unknown:
        raise UsageError(
            f"candidates file {path}: unknown top-level key(s) {unknown}; it holds 'candidates' "
            "(name -> settings) and optionally 'base' (settings every candidate starts from)"
        )
    base = content.get("base", {})
    candidates = content.get("candidates")
    if not isinstance(base, dict):
        raise UsageError(f"candidates file {path}: 'base' must be a table of settings")
    if not isinstance(candidates, dict) or not candidates:
        raise UsageError(f"candidates file {path}: 'candidates' must be a non-empty table")
    for name, settings in candidates.items():
        if not isinstance(settings, dict):
            raise UsageError(
                f"candidates file {path}: candidate {name!r} must be a table of settings"
            )
    return base, candidates


@contextlib.contextmanager
def _simulator(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from .simulator import Simulator

    with Simulator() as sim:
        yield sim


def cmd_compare(args: argparse.Namespace) -> int:
    """``kimi-extract compare``: run candidates on the same rows; accuracy, cost, the front."""
    from .exceptions import KimiExtractError, RunInterrupted, RunStopped
    from .quality.compare import compare

    base, candidates = read_candidates(Path(args.candidates))
    model = load_model(args.schema)
    data = read_table(Path(args.input))
    gold = read_table(Path(args.gold))
    text: str | list[str] | None = None
    if args.text:
        text = args.text[0] if len(args.text) == 1 else list(args.text)
    settings: dict[str, Any] = {}
    if args.store is not None:
        settings["store"] = args.store
    if args.no_store:
        settings["store"] = False
    if args.no_progress:
        settings["progress"] = False
    with _simulator(args.simulate) as sim:
        if sim is not None:
            settings.update(base_url=sim.base_url, api_key=sim.api_key)
        try:
            result = compare(
                candidates,
                data,
                gold,
                model=model,
                base=base,
                text=text,
                template=args.template,
                images=args.images,
                on=args.on,
                metric=args.metric,
                estimate_only=args.estimate_only,
                seed=args.seed,
                **settings,
            )
        except (RunStopped, RunInterrupted) as stopped:
            print(f"error: {' '.join(str(stopped).split())}", file=sys.stderr)
            return EXIT_STOPPED
        except (KimiExtractError, TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
    table = result if args.estimate_only else result.table
    if args.estimate_only:
        print("estimate (each candidate as if run alone; nothing sent):")
        print(printable(table.to_string()))
    else:
        print(printable(result.summary()))
    if args.out:
        written, message = save_table(table, Path(args.out), finished=True)
        print(message, file=sys.stderr)
        if written != Path(args.out):
            return EXIT_STOPPED
    return EXIT_OK


def add_commands(sub: Any) -> None:
    """Register ``eval`` and ``compare`` on the ``kimi-extract`` subcommands."""
    ev = sub.add_parser(
        "eval",
        help="score an output table against gold, field by field",
        description="Score predictions against gold (kx.evaluate): per field precision, recall, "
        "F1 and exact match with bootstrap intervals, the rows to look at first, the money.",
    )
    ev.add_argument("pred", help="the predictions: an output table (.csv, .jsonl, .parquet)")
    ev.add_argument("gold", help="the right answers: a table with the model's fields")
    ev.add_argument("--schema", required=True, help="output model as FILE.py:Class")
    ev.add_argument(
        "--on", action="append", metavar="COL", help="match rows by this key column (repeat)"
    )
    add_prefix_args(ev, "the --column-prefix the run used for its output columns")
    ev.add_argument("--html", metavar="FILE", help="also write a static HTML report")
    ev.add_argument("--worst", type=int, default=10, help="rows to list (default 10)")
    ev.add_argument("--n-boot", dest="n_boot", type=int, default=1000)
    ev.add_argument("--seed", type=int, default=0)
    ev.set_defaults(func=cmd_eval)

    cmp = sub.add_parser(
        "compare",
        help="run candidate settings on the same rows: accuracy, cost, the Pareto front",
        description="Run every candidate of a TOML or JSON file ('candidates': name -> "
        "settings; optional 'base') on the rows of --input that --gold covers; print "
        "accuracy with intervals, cost, tokens, latency, errors and the Pareto front.",
    )
    cmp.add_argument("candidates", help="candidates file: .toml or .json")
    cmp.add_argument("--input", required=True, help="input table: .csv, .jsonl or .parquet")
    cmp.add_argument("--gold", required=True, help="gold table with the model's fields")
    cmp.add_argument("--schema", required=True, help="output model as FILE.py:Class")
    cmp.add_argument("--text", action="append", help="text column (repeat for several)")
    cmp.add_argument("--template", help="str.format template over columns")
    cmp.add_argument("--images", help="column of image paths / URLs")
    cmp.add_argument("--on", action="append", metavar="COL", help="match rows by key column")
    cmp.add_argument(
        "--metric",
        default="micro_f1",
        choices=("micro_f1", "row_exact", "micro_precision", "micro_recall"),
        help="the accuracy of the Pareto front (default micro_f1)",
    )
    store = cmp.add_mutually_exclusive_group()
    store.add_argument("--store", metavar="PATH", help="result store every candidate shares")
    store.add_argument("--no-store", action="store_true", help="run without a result store")
    cmp.add_argument(
        "--estimate-only", action="store_true", help="print each candidate's estimate; send nothing"
    )
    cmp.add_argument("--seed", type=int, default=0, help="bootstrap seed (default 0)")
    cmp.add_argument("--out", help="also write the comparison table (.csv, .jsonl, .parquet)")
    cmp.add_argument("--no-progress", action="store_true", help="hide the progress bars")
    cmp.add_argument(
        "--simulate",
        action="store_true",
        help="run against an in-process simulator (offline; rows carrying an answer key are "
        "answered from it with illustrative mistakes)",
    )
    cmp.set_defaults(func=cmd_compare)


def add_simulate_options(simulate: argparse.ArgumentParser) -> None:
    """``kimi-extract simulate --quality``."""
    simulate.add_argument(
        "--quality",
        choices=("illustrative", "exact", "off"),
        help="answers to rows carrying an answer key: with illustrative mistakes per model and "
        "effort (default), exactly, or ignored",
    )
