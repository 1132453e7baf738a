"""``compare(candidates, data, gold)``: run several settings on the same rows; score and price them.

A candidate is an ``Extractor``, an ``ExtractorConfig``, or a dict of settings derived from a
base config (``base=``, default ``ExtractorConfig()``): ``{"pro-low": {"model":
"kimi-k3.1-pro", "reasoning_effort": "low"}, "k3": {"model": "kimi-k3"}}``. Keyword settings
given to ``compare`` itself (``base_url=``, ``store=``, ``concurrency=``, ``progress=`` ...)
apply to every candidate, over its own.

Everything is checked before the first request: the settings of every candidate, the gold data
against the output model (``evaluate``'s checks), the rows (every gold row must be a row of
``data``) and the input columns (each candidate's ``estimate``).

The candidates run one after another on the same rows, those of one model back to back:

- **Result store**: a store key covers everything that decides an answer (model, effort,
  messages, schema, endpoint; ``kimi_extract.run.store``), so candidates sharing one store never
  get each other's answers, and running the same comparison again sends nothing.
- **Prompt cache**: candidates of one model send the same prompts (effort is not part of the
  prompt), so after the first has written a row's prompt to Kimi's cache the others read it. That
  makes the comparison cheaper, and the later candidates' bills lower than they would be on their
  own. ``cost`` in the table is the candidate on its own: what was billed (stored rows at what
  they cost when made), plus, for cache reads beyond what its own run would read (the shared
  prefix after the first request, as ``kimi_extract.run.estimate`` models it), the difference
  between writing (K3.1; kimi-k3: regular input) and reading those tokens. ``paid`` is what this
  comparison billed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any, Literal, overload

import numpy as np
import pandas as pd
from pydantic import BaseModel

from ..config import ExtractorConfig
from ..exceptions import ConfigurationError, EvaluationError, KimiExtractError
from ..extractor import Extractor
from ..records import Usage
from ..run.inputs import records_frame
from ..table import columns as kx
from .comparison import TOKEN_BUCKETS, Comparison
from .evaluate import _frame, _keys, evaluate

Candidate = Extractor[Any] | ExtractorConfig | Mapping[str, Any]


@overload
def compare(
    candidates: Mapping[str, Candidate],
    data: Any,
    gold: Any,
    *,
    estimate_only: Literal[True],
    **options: Any,
) -> pd.DataFrame: ...


@overload
def compare(
    candidates: Mapping[str, Candidate],
    data: Any,
    gold: Any,
    *,
    estimate_only: Literal[False] = False,
    **options: Any,
) -> Comparison: ...


def compare(
    candidates: Mapping[str, Candidate],
    data: Any,
    gold: Any,
    *,
    model: type[BaseModel] | None = None,
    base: ExtractorConfig | Mapping[str, Any] | None = None,
    text: str | Sequence[str] | None = None,
    template: str | None = None,
    images: str | None = None,
    videos: str | None = None,
    on: str | Sequence[str] | None = None,
    matchers: Mapping[str, Any] | None = None,
    metric: str = "micro_f1",
    estimate_only: bool = False,
    n_boot: int = 1000,
    seed: int | None = 0,
    confidence: float = 0.95,
    **settings: Any,
) -> Comparison | pd.DataFrame:
    """Run every candidate on the rows of ``data`` that ``gold`` covers; score, price, compare.

    - ``candidates``: name -> ``Extractor``, ``ExtractorConfig`` or dict of settings over
      ``base`` (module docstring). ``settings``: ``ExtractorConfig`` settings every candidate
      gets (a dict candidate may not repeat one).
    - ``model``: the output model (a BaseModel subclass); defaults to the candidate
      extractors' (they must agree).
    - ``data``: a DataFrame, a Series or a list (of texts or dicts), as ``Extractor.run`` takes;
      ``text`` / ``template`` / ``images`` / ``videos`` as for ``run``. ``gold``: as for
      ``evaluate``, rows matched to ``data`` by index (position for a list), or by the ``on=``
      key columns. Rows of ``data`` without gold are not sent.
    - ``metric``: the accuracy of the Pareto front ("micro_f1" or "row_exact" ...);
      ``matchers``, ``n_boot``, ``seed``, ``confidence``: as for ``evaluate``.
    - ``estimate_only=True``: send nothing; return each candidate's ``estimate()`` as a table
      (requests, tokens, cost; each as if run alone).

    Returns a ``Comparison``. Raises ``ConfigurationError`` (an unknown setting, naming the
    candidate) or ``EvaluationError`` (gold that does not fit the model or the rows) before any
    request. A run that stops (``RunStopped``: a budget, the key) stops the comparison.
    """
    if isinstance(model, str):
        raise ConfigurationError(
            f"model={model!r}: compare's model= is the output model (a BaseModel subclass), as "
            "for evaluate; set the Kimi model per candidate, e.g. {'k3': {'model': 'kimi-k3'}}"
        )
    extractors, output = _extractors(candidates, model, base, settings)
    columns: dict[str, Any] = {
        "text": text,
        "template": template,
        "images": images,
        "videos": videos,
    }
    # gold fits the model (types, columns, unique keys): evaluate's own checks, nothing sent
    evaluate(gold, gold, output, on=on, matchers=matchers, n_boot=0)
    rows = _rows(data, gold, output, on)
    estimates = {}
    for name, extractor in extractors.items():
        try:
            estimate = extractor.estimate(rows, **columns)
            estimates[name] = (estimate, _alone(extractor, rows, columns))
        except KimiExtractError as exc:
            exc.add_note(f"while kx.compare estimated the candidate {name!r}")
            raise
    if estimate_only:
        return _estimate_table(extractors, {n: e for n, (e, _) in estimates.items()})
    evaluations, outputs, reports, table_rows = {}, {}, {}, {}
    for name in _run_order(extractors):
        extractor = extractors[name]
        try:
            frame = extractor.run(rows, **columns)
        except BaseException as exc:
            exc.add_note(f"while kx.compare ran the candidate {name!r}")
            raise
        report = extractor.last_run
        assert report is not None
        evaluation = evaluate(
            frame,
            gold,
            output,
            on=on,
            matchers=matchers,
            prefix=extractor.config.column_prefix,
            n_boot=n_boot,
            seed=seed,
            confidence=confidence,
        )
        evaluations[name], outputs[name], reports[name] = evaluation, frame, report
        table_rows[name] = _table_row(extractor, frame, evaluation, report, estimates[name][1])
    names = list(extractors)
    table = pd.DataFrame.from_dict({n: table_rows[n] for n in names}, orient="index")
    table.index.name = "candidate"
    return Comparison(
        table=table,
        evaluations={n: evaluations[n] for n in names},
        outputs={n: outputs[n] for n in names},
        reports={n: reports[n] for n in names},
        metric=metric,
    )


def _extractors(
    candidates: Mapping[str, Candidate],
    model: type[BaseModel] | None,
    base: ExtractorConfig | Mapping[str, Any] | None,
    settings: dict[str, Any],
) -> tuple[dict[str, Extractor[Any]], type[BaseModel]]:
    """Each candidate as an Extractor of the one output model (every setting checked)."""
    if not isinstance(candidates, Mapping) or not candidates:
        raise ConfigurationError(
            "candidates must be a non-empty dict: name -> Extractor, ExtractorConfig or a dict "
            "of settings"
        )
    outputs = {c.output for c in candidates.values() if isinstance(c, Extractor)}
    if model is None:
        if len(outputs) != 1:
            raise ConfigurationError(
                "pass model=OutputModel: the candidates are not extractors of one output model"
                + (f" (they extract {sorted(o.__name__ for o in outputs)})" if outputs else "")
            )
        model = outputs.pop()
    elif not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ConfigurationError(f"model={model!r}: pass the output model (a BaseModel subclass)")
    base_config = _base_config(base, settings)
    built: dict[str, Extractor[Any]] = {}
    for name, candidate in candidates.items():
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"candidate names must be non-empty strings, got {name!r}")
        try:
            built[name] = _extractor(name, candidate, model, base_config, settings)
        except (TypeError, ValueError) as exc:  # an unknown setting names the closest one
            if isinstance(exc, ConfigurationError) and str(exc).startswith("candidate "):
                raise
            raise ConfigurationError(f"candidate {name!r}: {exc}") from None
    return built, model


def _base_config(
    base: ExtractorConfig | Mapping[str, Any] | None, settings: dict[str, Any]
) -> ExtractorConfig:
    try:
        if base is None:
            return ExtractorConfig(**settings)
        if isinstance(base, ExtractorConfig):
            return dataclasses.replace(base, **settings)
        if isinstance(base, Mapping):
            return ExtractorConfig(**{**dict(base), **settings})
    except (TypeError, ValueError) as exc:  # an unknown setting names the closest one
        raise ConfigurationError(f"compare()'s settings (base= and keywords): {exc}") from None
    raise ConfigurationError(
        f"base must be a kx.ExtractorConfig or a dict of settings, got {type(base).__name__}"
    )


def _extractor(
    name: str,
    candidate: Candidate,
    model: type[BaseModel],
    base: ExtractorConfig,
    settings: dict[str, Any],
) -> Extractor[Any]:
    if isinstance(candidate, Extractor):
        if candidate.output is not model:
            raise ConfigurationError(
                f"candidate {name!r} extracts {candidate.output.__name__}, not {model.__name__}"
            )
        if not settings:
            return candidate
        return Extractor(model, config=dataclasses.replace(candidate.config, **settings))
    if isinstance(candidate, ExtractorConfig):
        return Extractor(model, config=dataclasses.replace(candidate, **settings))
    if isinstance(candidate, Mapping):
        options = dict(candidate)
        both = sorted(set(options) & set(settings))
        if both:
            raise ConfigurationError(
                f"candidate {name!r} sets {both}, which compare() also sets for every "
                "candidate: set each either per candidate or for all"
            )
        return Extractor(model, config=dataclasses.replace(base, **options))
    raise ConfigurationError(
        f"candidate {name!r} is a {type(candidate).__name__}: pass an Extractor, an "
        "ExtractorConfig or a dict of settings"
    )


def _rows(data: Any, gold: Any, model: type[BaseModel], on: str | Sequence[str] | None) -> Any:
    """The rows of ``data`` that gold covers (all of them when it covers every row)."""
    if isinstance(data, (str, bytes)):  # noqa: UP038
        raise EvaluationError("data: pass a DataFrame, a Series or a list of rows, not a string")
    if not isinstance(data, pd.DataFrame | pd.Series):
        rows = list(data)
        data = (
            pd.Series(rows, dtype=object)
            if all(isinstance(r, str) or r is None for r in rows)
            else records_frame(rows)
        )
    keys = [on] if isinstance(on, str) else list(on or [])
    gold_keys = _keys(_frame(gold, "gold", model), keys, "gold")
    if keys:
        if not isinstance(data, pd.DataFrame):
            raise EvaluationError(f"on={keys}: data must be a DataFrame holding those columns")
        data_keys = _keys(data, keys, "data")
    else:
        data_keys = data.index
        if data_keys.has_duplicates:
            _keys(data, [], "data")  # raises, naming the label
    missing = gold_keys[~gold_keys.isin(data_keys)]
    if len(missing):
        how = f"key {keys}" if keys else "index"
        raise EvaluationError(
            f"gold row {missing[0]!r} has no row in data (rows are matched by {how}; "
            f"{len(missing):,} gold row(s) without one)"
        )
    wanted = np.asarray(data_keys.isin(gold_keys), dtype=bool)
    return data if wanted.all() else data[wanted]


def _alone(extractor: Extractor[Any], rows: Any, columns: dict[str, Any]) -> int:
    """Cache-read tokens per request the candidate's own run reads (the shared prefix, after
    the first request), from its estimate without a store."""
    alone = Extractor(extractor.output, config=dataclasses.replace(extractor.config, store=False))
    estimate = alone.estimate(rows, **columns)
    return estimate.cached_tokens // max(1, estimate.requests - 1)


def _run_order(extractors: Mapping[str, Extractor[Any]]) -> list[str]:
    """Candidates of one model back to back (first appearance order), so the cache stays warm."""
    models = list(dict.fromkeys(e.model for e in extractors.values()))
    return [n for m in models for n, e in extractors.items() if e.model == m]


def _table_row(
    extractor: Extractor[Any], frame: pd.DataFrame, evaluation: Any, report: Any, own_read: int
) -> dict[str, Any]:
    overall = evaluation.overall
    total: Usage = report.usage + report.saved
    # cache reads a run of its own would not have had (module docstring)
    extra = max(0, total.cached_tokens - own_read * max(0, total.requests - 1))
    pricing = extractor.config.resolved_pricing
    cost = float("nan")
    if pricing is not None:
        write = (
            pricing.cache_write
            if extractor.config.model_info.separate_cache_writes
            else pricing.input
        )
        cost = total.cost + extra * (write - pricing.cached_input) / 1e6
    sent = frame[~frame[kx.FROM_STORE].astype(bool)] if kx.FROM_STORE in frame else frame
    latency = (
        pd.to_numeric(sent[kx.LATENCY_S], errors="coerce").dropna()
        if kx.LATENCY_S in sent
        else pd.Series(dtype=float)
    )
    right_rows = float(evaluation.row_exact.sum())
    row: dict[str, Any] = {
        "model": extractor.model,
        "effort": extractor.config.effort,
        "rows": len(frame),
    }
    row["errors"] = int(frame[kx.ERROR].notna().sum()) if kx.ERROR in frame else 0
    for name in ("micro_f1", "row_exact"):
        for suffix in ("", "_low", "_high"):
            row[name + suffix] = float(overall[name + suffix])
    row["cost"] = cost
    row["paid"] = float(report.usage.cost)
    if np.isnan(cost) or right_rows:
        row["cost_per_correct_row"] = cost / right_rows if right_rows else cost
    else:
        row["cost_per_correct_row"] = float("inf")  # money spent, no row entirely right
    for bucket in TOKEN_BUCKETS:
        row[bucket] = int(getattr(total, bucket))
    row["latency_p50_s"] = float(latency.quantile(0.5)) if len(latency) else float("nan")
    row["latency_p95_s"] = float(latency.quantile(0.95)) if len(latency) else float("nan")
    row["from_store"] = int(report.from_store)
    return row


def _estimate_table(
    extractors: Mapping[str, Extractor[Any]], estimates: Mapping[str, Any]
) -> pd.DataFrame:
    table = pd.DataFrame.from_dict(
        {
            name: {
                "model": extractor.model,
                "effort": extractor.config.effort,
                "rows": estimates[name].rows,
                "stored_rows": estimates[name].stored_rows,
                "requests": estimates[name].requests,
                "prompt_tokens": estimates[name].prompt_tokens,
                "cached_tokens": estimates[name].cached_tokens,
                "cache_write_tokens": estimates[name].cache_write_tokens,
                "completion_tokens": estimates[name].completion_tokens,
                "cost": estimates[name].cost,
            }
            for name, extractor in extractors.items()
        },
        orient="index",
    )
    table.index.name = "candidate"
    return table
