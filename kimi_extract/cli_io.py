"""What the command line reads and writes: the schema module, input tables, the output table.

Everything here that cannot start a command raises ``UsageError`` (one line, exit 2): a schema
that does not import, an input table that is missing, of another format, empty, truncated,
binary or malformed, an output place that cannot take a file.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any


class UsageError(Exception):
    """The command cannot start (arguments, files, configuration): one line, exit 2."""


def one_line(text: object) -> str:
    """``text`` on one line (a message from a parser or a library may span several), with lone
    surrogates escaped so any terminal can print it."""
    flat = " ".join(str(text).split())
    return flat.encode("utf-8", "backslashreplace").decode("utf-8")


def _reason(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def load_model(spec: str) -> type:
    """Load ``path/to/file.py:Class`` or ``package.module:Class``."""
    if ":" not in spec:
        raise UsageError(f"--schema must look like FILE.py:Class or module:Class, got {spec!r}")
    location, _, name = spec.rpartition(":")
    try:
        if location.endswith(".py") or Path(location).exists():
            path = Path(location)
            if not path.is_file():
                raise UsageError(f"--schema file not found: {path}")
            module_spec = importlib.util.spec_from_file_location(f"_kx_schema_{path.stem}", path)
            if module_spec is None or module_spec.loader is None:
                raise UsageError(f"--schema: cannot import {path}")
            module = importlib.util.module_from_spec(module_spec)
            sys.modules[module_spec.name] = module
            module_spec.loader.exec_module(module)
        else:
            module = importlib.import_module(location)
    except UsageError:
        raise
    except Exception as exc:  # the user's module does not import: say why, in one line
        raise UsageError(f"--schema: cannot import {location}: {_reason(exc)}") from None
    model = getattr(module, name, None)
    if not isinstance(model, type):
        raise UsageError(f"--schema: {location} has no class {name!r}")
    return model


#: Input formats by suffix.
INPUT_SUFFIXES = (".csv", ".jsonl", ".ndjson", ".json", ".parquet")


def read_table(path: Path) -> Any:
    """Read .csv, .jsonl/.ndjson, .json or .parquet into a DataFrame; a file that is missing,
    of another format, or cannot be parsed (truncated, binary, empty) is a ``UsageError``."""
    import pandas as pd

    suffix = path.suffix.lower()
    if not path.exists():
        raise UsageError(f"input file not found: {path}")
    if suffix not in INPUT_SUFFIXES:
        raise UsageError(
            f"unsupported input format {suffix or path.name!r} for {path}; "
            "use .csv, .jsonl or .parquet"
        )
    try:
        if suffix == ".csv":
            return pd.read_csv(path)
        if suffix in (".jsonl", ".ndjson", ".json"):
            try:
                return pd.read_json(path, lines=suffix != ".json")
            except UnicodeEncodeError:  # a lone surrogate (a "\udc80" escape) in a string
                return _read_json_records(path, lines=suffix != ".json")
        return pd.read_parquet(path)
    except UsageError:
        raise
    except pd.errors.EmptyDataError:
        raise UsageError(f"cannot read {path}: the file is empty (no header, no rows)") from None
    except ImportError as exc:  # .parquet without pyarrow
        raise UsageError(f"cannot read {path}: {exc}") from None
    except Exception as exc:  # a truncated, binary or malformed file
        raise UsageError(f"cannot read {path} as {suffix[1:]}: {_reason(exc)}") from None


def _read_json_records(path: Path, *, lines: bool) -> Any:
    """JSON records whose text pandas' str dtype cannot hold (lone surrogates): such columns
    stay object columns, so the run makes each such cell its row's error."""
    from .run.inputs import records_frame

    text = path.read_text(encoding="utf-8")
    if lines:
        records = [json.loads(line) for line in text.split("\n") if line.strip()]
    else:
        records = json.loads(text)
    if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
        raise UsageError(f"cannot read {path}: expected one JSON object per row")
    return records_frame(records)


def check_output(path: Path) -> None:
    """Refuse an output file we could not write, before the first request: an unknown format,
    .parquet without pyarrow, a directory that is missing or takes no new files, a directory
    as the file (``UsageError``, exit 2)."""
    from .exceptions import ConfigurationError
    from .table.export import check_path

    try:
        check_path(path)
    except ConfigurationError as exc:
        raise UsageError(f"--out: {exc}") from None


def save_table(frame: Any, out: Path, *, finished: bool) -> tuple[Path | None, str]:
    """Write the run's rows: to ``out`` when the run finished, else (or when ``out`` cannot be
    written) to ``STEM.partial.SUFFIX`` beside it, else in the temp directory. Returns the file
    written (None: none could be) and the line to print."""
    from .exceptions import ConfigurationError
    from .table.export import partial_path, write_table

    rows = f"{len(frame):,} rows"
    failure = ""
    if finished:
        try:
            write_table(frame, out)
            return out, f"wrote {rows} to {out}"
        except (OSError, ConfigurationError) as exc:
            failure = f"error: cannot write {out} ({one_line(_reason(exc))}); "
    else:
        failure = f"the run did not finish: {out} was not changed; "
    kept = partial_path(out)
    for place in (kept, Path(tempfile.gettempdir()) / kept.name):
        try:
            write_table(frame, place)
            return place, f"{failure}wrote the {rows} so far to {place}"
        except (OSError, ConfigurationError):
            continue
    return None, (
        f"{failure}the {rows} could not be written beside it nor in {tempfile.gettempdir()} "
        "(rerun: finished rows come from the result store)"
    )


def printable(text: str) -> str:
    """``text`` (lines kept) with lone surrogates escaped, so stdout can always print it."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def add_prefix_args(parser: argparse.ArgumentParser, help: str) -> None:
    """``--column-prefix``, and its deprecated old name ``--prefix`` (read by ``column_prefix``)."""
    parser.add_argument("--column-prefix", metavar="PREFIX", help=help)
    parser.add_argument("--prefix", dest="old_prefix", help=argparse.SUPPRESS)


def column_prefix(args: argparse.Namespace) -> str | None:
    """``--column-prefix``, or its deprecated old name ``--prefix`` (with a warning)."""
    if args.old_prefix is None:
        return args.column_prefix
    warnings.warn("--prefix is deprecated: use --column-prefix", DeprecationWarning, stacklevel=2)
    print("warning: --prefix is deprecated: use --column-prefix", file=sys.stderr)
    if args.column_prefix is not None:
        raise UsageError("pass --column-prefix only (--prefix is its deprecated old name)")
    return args.old_prefix
