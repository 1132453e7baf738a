"""The ``kimi-extract`` command line. The library never imports this module.

    kimi-extract run INPUT --schema FILE.py:Class --text COL --out OUT [--simulate] ...
    kimi-extract run-docs DIR|FILES --schema FILE.py:Class [--explode FIELD] --out OUT ...
    kimi-extract simulate --port 8000
    kimi-extract review OUT.parquet --html review.html [--text COL] [--id COL] [--documents-root D]
                         [--schema FILE.py:Class]
    kimi-extract eval PRED GOLD --schema FILE.py:Class [--on COL] [--html report.html]
    kimi-extract compare CANDIDATES.toml --input IN --gold GOLD --schema FILE.py:Class ...
    kimi-extract --version

Exit codes: 0 every row ok; 1 some rows failed (see ``kx_error``); 2 the run stopped early or
could not start (bad arguments, configuration, an input or schema file that cannot be read, an
output that cannot be written, authentication, quota). A run that could not start prints one
line, ``error: ...``, on stderr and sends nothing.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import logging
import sys
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn

from .cli_io import (
    UsageError,
    add_prefix_args,
    check_output,
    column_prefix,
    load_model,
    one_line,
    printable,
    read_table,
    save_table,
)
from .cli_quality import add_commands, add_simulate_options
from .config import setting_default
from .store_cli import add_store_parser

EXIT_OK, EXIT_ROWS_FAILED, EXIT_STOPPED = 0, 1, 2

#: The simulator's default API key (``kimi_extract.simulator.protocol.DEFAULT_API_KEY``; a test
#: keeps the two equal without importing the simulator here).
DEFAULT_SIMULATOR_KEY = "sk-sim-0123456789abcdef0123456789abcdef"


@contextlib.contextmanager
def _maybe_simulator(enabled: bool) -> Iterator[Any]:
    if not enabled:
        yield None
        return
    from .simulator import Simulator

    with Simulator() as sim:
        yield sim


def _announce(sim: Any) -> None:
    """Say where ``--simulate`` sent the requests (after the run: a run that could not start
    says only why)."""
    if sim is not None:
        print(
            f"--simulate: the requests went to the local Kimi simulator at {sim.base_url} "
            "(offline; answers are synthetic, tokens are simulated)",
            file=sys.stderr,
        )


#: Flags that set an ``ExtractorConfig`` setting of another name (the rest share its name).
_FLAG_SETTINGS = {"effort": "reasoning_effort"}
#: On/off flags: given, they set the setting to True (``--no-progress`` sets progress False).
_SWITCHES = ("stream", "web_search", "fetch_urls", "allow_private_urls", "grounding")


def _default(setting: str) -> Any:
    """The default of an ``ExtractorConfig`` setting (for help texts; never re-listed here)."""
    return setting_default(setting)


def _extractor_options(args: argparse.Namespace, sim: Any) -> dict[str, Any]:
    """Extractor keyword arguments from the flags shared by ``run`` and ``run-docs``: only the
    flags the user gave; every other setting keeps the ``ExtractorConfig`` default."""
    options: dict[str, Any] = {}
    for flag in ("instructions", "model", "effort", "concurrency", "rpm", "tpm", "max_cost"):
        if getattr(args, flag) is not None:
            options[_FLAG_SETTINGS.get(flag, flag)] = getattr(args, flag)
    prefix = column_prefix(args)
    if prefix is not None:  # "" is a prefix too
        options["column_prefix"] = prefix
    for switch in _SWITCHES:
        if getattr(args, switch):
            options[switch] = True
    if args.grounding_quotes:
        options["grounding"] = "quotes"
    if args.no_progress:
        options["progress"] = False
    if args.max_image_pixels is not None:
        options["max_image_pixels"] = args.max_image_pixels or None
    if args.cache is not None:
        warnings.warn(
            "--cache is deprecated: use --store PATH (or --no-store for 'off')",
            DeprecationWarning,
            stacklevel=2,
        )
        print("warning: --cache is deprecated: use --store PATH or --no-store", file=sys.stderr)
        off = args.cache.lower() in ("off", "false", "no", "0")
        options["store"] = False if off else args.cache
    if args.store is not None:
        options["store"] = args.store
    if args.no_store:
        options["store"] = False
    if sim is not None:
        options.update(base_url=sim.base_url, api_key=sim.api_key)
    return options


def summary_table(report: Any) -> str:
    """The final summary of a run as a small two-column table."""
    u = report.usage
    cost = f"${u.cost:,.4f}" if report.priced else "unknown (no price for this model)"
    rows = [
        ("rows", f"{report.rows:,} ({report.ok:,} ok, {report.failed:,} failed)"),
        ("from the result store", f"{report.from_store:,}"),
        ("requests", f"{u.requests:,} ({report.retries:,} retried, {report.throttles:,} 429s)"),
        ("prompt tokens", f"{u.prompt_tokens:,}"),
        ("  cached", f"{u.cached_tokens:,} ({u.cache_hit_share:.0%})"),
        ("  cache write", f"{u.cache_write_tokens:,}"),
        ("completion tokens", f"{u.completion_tokens:,}"),
        ("  reasoning", f"{u.reasoning_tokens:,}"),
        ("cost", cost),
        ("wall time", f"{report.wall_s:,.2f} s"),
        ("bound by", getattr(report, "bound_by", None) or "no limit held sends back"),
    ]
    width = max(len(name) for name, _ in rows)
    return "\n".join(f"{name.ljust(width)}  {value}" for name, value in rows)


def _run_command(args: argparse.Namespace, run: Any, estimate: Any = None) -> int:
    """Shared body of ``run`` and ``run-docs``: build, run (or estimate), write, summarize."""
    import pandas as pd

    from .exceptions import KimiExtractError, RunInterrupted, RunStopped
    from .extractor import Extractor
    from .table import columns

    output = load_model(args.schema)
    dry_run = getattr(args, "dry_run", False)
    with _maybe_simulator(args.simulate and not dry_run) as sim:
        frame: pd.DataFrame | None = None
        try:
            extractor: Extractor[Any] = Extractor(output, **_extractor_options(args, sim))
        except (KimiExtractError, TypeError, ValueError) as exc:
            raise UsageError(str(exc)) from None
        try:
            if dry_run and estimate is not None:
                print(estimate(extractor).summary())
                return EXIT_OK
            frame = run(extractor)
            code = EXIT_OK
        except (RunStopped, RunInterrupted) as stopped:
            _announce(sim)
            print(f"error: {stopped}", file=sys.stderr)
            frame, code = stopped.partial, EXIT_STOPPED
        except (KimiExtractError, TypeError, ValueError) as exc:
            # Raised before the first request (a column, a template): the run could not start.
            raise UsageError(str(exc)) from None
        else:
            _announce(sim)
    if frame is None:
        return code
    if args.out:
        # An unfinished run never replaces --out; rows that cannot go there go beside it.
        written, message = save_table(frame, Path(args.out), finished=code == EXIT_OK)
        print(message, file=sys.stderr)
        if written != Path(args.out):
            code = EXIT_STOPPED
    with pd.option_context(
        "display.max_columns", 20, "display.width", 160, "display.max_colwidth", 40
    ):
        print(printable(str(frame.head(args.show))))
    if extractor.last_run is not None:
        print(summary_table(extractor.last_run))
    if code == EXIT_OK and frame[columns.ERROR].notna().any():
        code = EXIT_ROWS_FAILED
    return code


def cmd_run(args: argparse.Namespace) -> int:
    """``kimi-extract run``: a table of rows -> typed columns."""
    data = read_table(Path(args.input))
    text: str | list[str] | None = None
    if args.text:
        text = args.text[0] if len(args.text) == 1 else list(args.text)
    inputs = {"text": text, "template": args.template, "images": args.images, "videos": args.videos}
    return _run_command(
        args,
        run=lambda ex: ex.run(data, **inputs),
        estimate=lambda ex: ex.estimate(data, **inputs),
    )


def cmd_run_docs(args: argparse.Namespace) -> int:
    """``kimi-extract run-docs``: documents (.txt, .md, .html, .pdf) -> rows."""
    options: dict[str, Any] = {
        "pdf_mode": args.pdf_mode,
        "per_page": args.per_page,
        "pages": args.pages,
        "chunk_pages": args.chunk_pages,
        "chunk_chars": args.chunk_chars,
        "chunk_overlap": args.chunk_overlap,
        "passes": args.passes,
        "explode": args.explode,
        "recursive": args.recursive,
    }
    if args.merge:
        options["merge"] = dict(rule.partition("=")[::2] for rule in args.merge)
    if args.dedupe_on is not None:
        options["dedupe_on"] = [name for name in args.dedupe_on.split(",") if name.strip()]
    return _run_command(args, run=lambda ex: ex.run_documents(args.sources, **options))


def cmd_review(args: argparse.Namespace) -> int:
    """``kimi-extract review``: an output table -> one static HTML page to check it."""
    from .exceptions import KimiExtractError
    from .table.review import review

    frame = read_table(Path(args.table))
    model = load_model(args.schema) if args.schema else None
    text: str | list[str] | None = None
    if args.text:
        text = args.text[0] if len(args.text) == 1 else list(args.text)
    try:
        out = review(
            frame,
            args.html,
            text_column=text,
            template=args.template,
            documents=False if args.no_documents else None,
            documents_root=args.documents_root or Path(args.table).parent,
            id=args.id,
            title=args.title,
            model=model,
            prefix=column_prefix(args) or "",
        )
    except (KimiExtractError, OSError) as exc:
        raise UsageError(str(exc)) from None
    print(f"wrote the review page of {len(frame):,} rows to {out}", file=sys.stderr)
    return EXIT_OK


def cmd_simulate(args: argparse.Namespace) -> int:
    """``kimi-extract simulate``: serve the local Kimi API until interrupted."""
    from .exceptions import ConfigurationError
    from .simulator import serve

    options: dict[str, Any] = {}
    names: tuple[str, ...] = ("rpm", "tpm", "max_concurrency", "ttft_s", "tokens_per_s")
    names += ("schema_level",)
    names += ("rate_shape", "window_s", "spurious_429_rate", "latency")
    names += ("answers", "perturb", "quote_faults", "quality")
    for name in names:
        value = getattr(args, name)
        if value is not None:
            options[name] = value
    if args.api_key:
        options["api_key"] = args.api_key
    try:
        serve(port=args.port, host=args.host, **options)
    except ConfigurationError as exc:  # a flag's value the simulator refuses, before it starts
        raise UsageError(str(exc)) from None
    except OSError as exc:
        print(
            f"error: cannot listen on {args.host}:{args.port} ({exc.strerror or exc}); "
            "is another server using it? Pick another port with --port",
            file=sys.stderr,
        )
        return EXIT_STOPPED
    return EXIT_OK


def _add_run_args(parser: argparse.ArgumentParser) -> None:
    """Flags shared by ``run`` and ``run-docs``."""
    parser.add_argument("--instructions", help="system instructions")
    parser.add_argument("--model", help=f"model name (default {_default('model')})")
    parser.add_argument(
        "--effort",
        help=f"reasoning effort: low, high or max (default {_default('reasoning_effort')})",
    )
    parser.add_argument(
        "--concurrency",
        type=int,
        help=f"requests in flight (default {_default('concurrency')})",
    )
    parser.add_argument("--rpm", type=int, help="client-side requests-per-minute limit")
    parser.add_argument("--tpm", type=int, help="client-side tokens-per-minute limit")
    parser.add_argument(
        "--max-cost",
        type=float,
        help="hard budget in USD: a request is sent only when its worst case still fits",
    )
    store = parser.add_mutually_exclusive_group()
    store.add_argument(
        "--store",
        metavar="PATH|URL",
        help="result store file or a postgresql:// URL: finished rows are kept there and a rerun "
        "resumes from them (default: results.sqlite3 in the user cache directory; none with "
        "--simulate)",
    )
    store.add_argument("--no-store", action="store_true", help="run without a result store")
    store.add_argument("--cache", help=argparse.SUPPRESS)  # deprecated name of --store / 'off'
    parser.add_argument("--stream", action="store_true", help="request SSE streams")
    parser.add_argument("--web-search", action="store_true", help="offer Kimi's web search tool")
    parser.add_argument(
        "--grounding",
        action="store_true",
        help="align every extracted value to the text sent (kx_spans, kx_grounded columns; no "
        "extra tokens); check them with 'kimi-extract review'",
    )
    parser.add_argument(
        "--grounding-quotes",
        action="store_true",
        help="like --grounding, and also ask the model for a supporting quote per field: a "
        "value whose quote is not in the text is unsupported (more completion tokens)",
    )
    parser.add_argument(
        "--max-image-pixels",
        type=int,
        help="downscale images (and rendered pages) above this many pixels; 0 = never "
        f"(default {_default('max_image_pixels')})",
    )
    parser.add_argument(
        "--fetch-urls", action="store_true", help="download http(s) media and send it inline"
    )
    parser.add_argument(
        "--allow-private-urls",
        action="store_true",
        help="let --fetch-urls reach loopback, private and link-local addresses (refused "
        "by default)",
    )
    add_prefix_args(parser, "prefix for output column names")
    parser.add_argument("--out", help="output table: .csv, .jsonl or .parquet")
    parser.add_argument("--show", type=int, default=10, help="rows to print (default 10)")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument(
        "--simulate", action="store_true", help="run against an in-process simulator (offline)"
    )


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``UsageError``), not the usage text and exit."""

    def error(self, message: str) -> NoReturn:
        raise UsageError(f"{self.prog}: {message} (see {self.prog} --help)")


def version() -> str:
    """The installed version of kimi-extract."""
    try:
        return importlib.metadata.version("kimi-extract")
    except importlib.metadata.PackageNotFoundError:  # a checkout on sys.path, not installed
        return "unknown (not installed)"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (exposed for tests and docs)."""
    parser = _Parser(prog="kimi-extract", description="Structured extraction with Kimi models.")
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="log at INFO level")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser("run", help="extract a table of rows into typed columns")
    run.add_argument("input", help="input table: .csv, .jsonl or .parquet")
    run.add_argument(
        "--schema", required=True, help="output model as FILE.py:Class or module:Class"
    )
    run.add_argument("--text", action="append", help="text column (repeat for several)")
    run.add_argument("--template", help="str.format template over columns, e.g. 'Title: {title}'")
    run.add_argument("--images", help="column of image paths / URLs")
    run.add_argument("--videos", help="column of video paths / URLs")
    run.add_argument(
        "--dry-run",
        action="store_true",
        help="print the estimate (requests, tokens, cost); send nothing",
    )
    _add_run_args(run)
    run.set_defaults(func=cmd_run)

    docs = sub.add_parser("run-docs", help="extract from documents (.txt, .md, .html, .pdf)")
    docs.add_argument("sources", nargs="+", help="documents, or folders of them")
    docs.add_argument(
        "--schema", required=True, help="output model as FILE.py:Class or module:Class"
    )
    docs.add_argument("--explode", metavar="FIELD", help="one output row per item of this list")
    docs.add_argument("--pdf-mode", choices=("auto", "text", "images"), default="auto")
    docs.add_argument("--per-page", action="store_true", help="one row per page")
    docs.add_argument("--pages", help="page numbers, e.g. '1-3,5' or '2-'")
    docs.add_argument("--chunk-pages", type=int, help="send at most N pages per request")
    docs.add_argument("--chunk-chars", type=int, help="send about N characters per request")
    docs.add_argument(
        "--chunk-overlap", type=int, help="characters (or pages) consecutive chunks share"
    )
    docs.add_argument(
        "--passes", type=int, default=1, help="ask each chunk up to N times for missed items"
    )
    docs.add_argument(
        "--merge",
        action="append",
        metavar="PATH=RULE",
        help="a scalar's rule across chunks: first, last, most_grounded or all (repeatable)",
    )
    docs.add_argument(
        "--dedupe-on", metavar="FIELDS", help="comma-separated key fields of list items"
    )
    docs.add_argument("--recursive", action="store_true", help="also read subfolders")
    _add_run_args(docs)
    docs.set_defaults(func=cmd_run_docs)

    rev = sub.add_parser(
        "review",
        help="write an HTML page to check an output table against its sources",
        description="One self-contained HTML page (no network): each row's source text with "
        "its grounded values highlighted (kx_spans), unsupported values, errors, tokens and "
        "cost; PDF pages of run-docs outputs with boxes over the evidence.",
    )
    rev.add_argument("table", help="an output table: .parquet, .jsonl or .csv")
    rev.add_argument(
        "--html", default="review.html", help="the page to write (default review.html)"
    )
    rev.add_argument("--text", action="append", help="the text column(s) given to run")
    rev.add_argument("--template", help="the template given to run")
    rev.add_argument(
        "--no-documents",
        action="store_true",
        help="do not read the kx_source documents again (no page texts or images)",
    )
    rev.add_argument(
        "--documents-root",
        metavar="DIR",
        help="read kx_source documents only under DIR (default: the table's directory; "
        "'/' allows any file)",
    )
    rev.add_argument("--id", metavar="COL", help="label each card by this column's value")
    rev.add_argument("--title", help="the page title (default: the file name)")
    rev.add_argument(
        "--schema",
        metavar="FILE.py:Class",
        help="the output model: corrections typed in the page are checked against its types",
    )
    add_prefix_args(rev, "the --column-prefix of the run (with --schema)")
    rev.set_defaults(func=cmd_review)

    sim = sub.add_parser(
        "simulate",
        help="serve the local Kimi API simulator",
        description="Serve the local Kimi API simulator (offline) until Ctrl-C. Clients send "
        f"Authorization: Bearer {DEFAULT_SIMULATOR_KEY} unless --api-key says otherwise.",
    )
    sim.add_argument("--port", type=int, default=8000)
    sim.add_argument("--host", default="127.0.0.1")
    sim.add_argument(
        "--api-key",
        default=None,
        help=f"key clients must send (default: {DEFAULT_SIMULATOR_KEY})",
    )
    sim.add_argument("--rpm", type=int)
    sim.add_argument("--tpm", type=int)
    sim.add_argument("--max-concurrency", dest="max_concurrency", type=int)
    sim.add_argument("--ttft-s", dest="ttft_s", type=float)
    sim.add_argument("--tokens-per-s", dest="tokens_per_s", type=float)
    sim.add_argument(
        "--schema-level",
        dest="schema_level",
        choices=("strict", "ultra"),
        help="how response_format schemas and tool parameters are checked (MoonshotAI/walle "
        "levels; default strict, as Moonshot's server)",
    )
    sim.add_argument(
        "--rate-shape",
        dest="rate_shape",
        choices=("sliding", "fixed", "bucket"),
        help="how --rpm/--tpm are enforced: a sliding 60 s window (default), fixed 60 s "
        "windows from the first request, or a token bucket (smooth rate, small burst)",
    )
    sim.add_argument(
        "--window-s",
        dest="window_s",
        type=float,
        help="window of the sliding/fixed shapes in seconds (default 60; limits stay per minute)",
    )
    sim.add_argument(
        "--spurious-429-rate",
        dest="spurious_429_rate",
        type=float,
        help="share of requests refused with Kimi's rate-limit message whatever the load",
    )
    sim.add_argument(
        "--latency",
        choices=("fixed", "lognormal"),
        help="answer delay: fixed (--ttft-s) or lognormal (median 1 s, p99 10 s, seeded)",
    )
    sim.add_argument(
        "--answers",
        choices=("generated", "extractive"),
        help="string fields: words of the user text (generated, default) or spans copied from "
        "it (extractive, to test grounding offline)",
    )
    sim.add_argument(
        "--perturb",
        type=float,
        help="with --answers extractive: share of strings perturbed (case, spacing, a typo, "
        "full-width), 0..1",
    )
    sim.add_argument(
        "--quote-faults",
        type=float,
        help="with --answers extractive: share of the supporting quotes of grounding='quotes' "
        "made up or garbled, 0..1",
    )
    sim.set_defaults(func=cmd_simulate)
    add_store_parser(sub)
    add_simulate_options(sim)
    add_commands(sub)  # eval, compare
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``kimi-extract`` and ``python -m kimi_extract``: returns the exit code.

    A command that cannot start prints one line, ``error: ...``, and returns 2 (``--help`` and
    ``--version`` exit 0 through ``SystemExit``, as argparse does)."""
    try:
        args = build_parser().parse_args(argv)
        logging.basicConfig(
            level=logging.INFO if args.verbose else logging.WARNING,
            format="%(levelname)s %(name)s: %(message)s",
        )
        if getattr(args, "out", None):
            check_output(Path(args.out))  # before reading inputs or sending anything
        return int(args.func(args))
    except UsageError as exc:
        print(f"error: {one_line(exc)}", file=sys.stderr)
        return EXIT_STOPPED
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return EXIT_STOPPED


if __name__ == "__main__":  # pragma: no cover
    raise SystemExit(main())
