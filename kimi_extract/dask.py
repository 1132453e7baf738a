"""Extraction over a Dask DataFrame on a ``dask.distributed`` cluster, with cluster-wide limits.

::

    import kimi_extract.dask as kxd

    extractor = kx.Extractor(Review, instructions="...", concurrency=32, rpm=3000, tpm=2_000_000,
                             max_cost=50.0)
    out = kxd.extract(ddf, extractor, text="review", store="postgresql://kx@db/kx")  # lazy
    df = out.compute()                        # or out.to_parquet(...); ddf.kimi.extract(...) too

Needs ``pip install -e '.[dask]'`` and a ``distributed.Client``; ``import kimi_extract``
never imports Dask. Each partition is one ``Extractor.run`` on a worker: the async engine with
its own connections, reasks, retries and per-row isolation. The output ``meta`` (input columns,
one column per output field, the ``kx_`` accounting columns) is built from the output model, so
Dask never calls the function, and never the API, on fake data to infer it.

Limits are global: the cluster as a whole never exceeds the extractor's configured limits.

- **Concurrency**: every HTTP attempt on every worker holds a lease of one
  ``distributed.Semaphore`` (``max_leases = concurrency``, kept on the scheduler), on top of the
  partition's own limiter. The bound is exact and shared dynamically: a lone partition may use
  all of it. Cost: one scheduler round trip to take a lease and one (not waited for) to give it
  back, per attempt. Leases of a worker that dies are freed after
  ``distributed.scheduler.locks.lease-timeout`` (30 s by default); until then the cluster runs
  below the limit, never above. A worker whose event loop is blocked for longer than that
  timeout loses its leases while still using them (distributed logs "Refreshing an unknown
  lease"): the one way the bound can be overshot.
- **RPM / TPM**: one quota for the whole cluster, kept by a rate service on the scheduler
  (``kimi_extract.cluster``): every attempt on every worker takes a send permit from it, so no
  60-second window of the cluster exceeds ``rpm`` / ``tpm``, and quota is not divided: a lone
  partition may use all of it (about 97 % of ``rpm``: permits are paced and counted a little
  longer than the window, for the time a request takes to reach the server). A worker that dies
  holds nothing: its permits count until their window ends, as the server counts its requests.
  Cost: one scheduler round trip per batch of permits (a worker asks for all its waiting
  requests at once). The adaptive backoff on 429s stays per partition. The scheduler needs
  ``kimi_extract`` installed.
- **Budgets**: ``max_cost`` / ``max_total_tokens`` are one budget for the whole run, kept by the
  same service on the scheduler (``kimi_extract.cluster_budget``): every attempt on every worker
  reserves its worst case there and settles to the billed usage, so a partition of long documents
  may spend what short ones leave unused. When the next attempt cannot fit and no worker holds a
  reservation, the run stops with ``BudgetExceeded`` (rerun with a higher budget: finished rows
  come from the store). A dead worker's reservations are released after their lease and counted
  as spent at their worst case: the budget is never overspent.

Resume: every validated row is committed to a result store (``store=`` or the extractor's
``store``) as it finishes, by whichever worker ran it. Dask reruns a partition whose worker died;
the rerun serves committed rows from the store (``kx_from_store`` True, zero tokens billed) and
requests only the rest: at most ``concurrency`` rows per killed worker are sent twice (the rows
it had in flight). Rerunning a whole failed ``compute`` works the same way. On several machines
use a PostgreSQL store (``store="postgresql://user@host/db"``, the ``postgres`` extra): every
worker of every machine commits to it and resumes from it, and the database keeps one row per
key. An SQLite path is opened as given on every worker: one file on a local disk serves every
process of one machine (a ``LocalCluster``), but SQLite's WAL mode does not work over network
filesystems (NFS, SMB), so with SQLite on several machines a partition rerun on another machine
asks again for the rows finished on the first one.

Each partition runs a new ``Extractor`` built on its worker from the output model and a derived
config (``partition_config``: ``dataclasses.replace`` of the extractor's ``ExtractorConfig``,
validated again), never a copy of the caller's extractor. The API key travels inside that config
(as ``transport.Secret``, whose repr is masked); reprs of the shipped task arguments never show
it.
"""

from __future__ import annotations

import dataclasses
import io
import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd
from pydantic import BaseModel

from .exceptions import ConfigurationError, install_hint

try:
    import cloudpickle
    import dask.dataframe as dd
    import distributed
    from dask.dataframe.extensions import register_dataframe_accessor
except ImportError as missing:
    raise ImportError(f"kimi_extract.dask needs Dask: {install_hint('dask')}") from missing

from .accessor import build_extractor
from .cluster import ClusterLimits, cluster_limits
from .cluster_rate import install_rate_service
from .config import ExtractorConfig
from .extractor import COLUMN_OPTIONS, Extractor
from .http.limiter import OUTER_GATE
from .run.budget import SHARED_LEDGER
from .run.inputs import prepare
from .run.store import StoreURL
from .run.store import resolve as resolve_store
from .table.frame import build_frame, check_clashes

__all__ = ["KimiDaskAccessor", "extract", "output_meta"]


def extract(
    ddf: dd.DataFrame,
    extractor: Extractor[Any] | type[BaseModel],
    *,
    text: str | Sequence[str] | None = None,
    template: str | None = None,
    store: str | os.PathLike[str] | StoreURL | None = None,
    client: distributed.Client | None = None,
    **options: Any,
) -> dd.DataFrame:
    """Extract every row of ``ddf`` on the cluster; returns a lazy Dask DataFrame.

    ``extractor``: an ``Extractor``, or an output model with ``Extractor`` options in
    ``options`` (as ``df.kimi.extract``). ``text`` / ``template`` / ``images``: as in
    ``Extractor.run``. ``store``: the result store every worker commits to and resumes from: a
    PostgreSQL URL (several machines) or a path (default: the extractor's ``store``; required).
    ``client``: default ``distributed.get_client()``; compute with that client (its scheduler
    keeps the run's RPM/TPM quota and budget). Columns and options are checked now; nothing is
    sent until the result is computed.
    """
    extractor, run_options = build_extractor(extractor, options)
    run_options = {"text": text, "template": template, **run_options}
    client = client or _current_client()
    path = store if store is not None else extractor.store_path
    if path is None or path is False or path is True:
        raise ConfigurationError(
            "a Dask run commits every row to a result store so a failed partition resumes: pass "
            "store='postgresql://user@host/db' (several machines) or "
            "store='/path/results.sqlite3' (or Extractor(store=...))"
        )
    meta = output_meta(ddf, extractor, run_options)
    limits = cluster_limits(extractor)
    if limits.limited or limits.budgeted:
        install_rate_service(client)
    shipped = ShippedExtractor(
        extractor.output, partition_config(extractor.config, path, ddf.npartitions), limits.token
    )
    return ddf.map_partitions(
        _run_partition,
        shipped,
        run_options,
        limits,
        meta,
        meta=meta,
        align_dataframes=False,
    )


def partition_config(
    config: ExtractorConfig, store: str | os.PathLike[str] | StoreURL, partitions: int
) -> ExtractorConfig:
    """The settings of each partition's run: ``config`` with the shared store (a PostgreSQL URL,
    or an absolute path opened as given on every worker) and no progress bar. The budget stays
    whole: the partitions draw from it through the scheduler (``cluster_budget``), never alone.
    ``partitions`` is kept for callers of the earlier even split."""
    location = resolve_store(store)
    if isinstance(location, Path):
        location = location.absolute()
    return dataclasses.replace(config, store=location, progress=False)


def output_meta(
    ddf: dd.DataFrame, extractor: Extractor[Any], run_options: dict[str, Any]
) -> pd.DataFrame:
    """The empty output frame (columns and dtypes) of a run over ``ddf``; no API call.

    Raises ``InputError`` now when a column option names a column ``ddf`` lacks, or an output
    column would overwrite an input column.
    """
    columns = {k: v for k, v in run_options.items() if k in COLUMN_OPTIONS and v is not None}
    prepared = prepare(ddf._meta, **columns)
    config = extractor.config
    grounding = bool(config.grounding_options.grounding)
    check_clashes(prepared.columns, extractor.output, config.column_prefix, grounding=grounding)
    assert prepared.index is not None
    return build_frame(
        model=extractor.output,
        results=[],
        index=prepared.index,
        input_frame=prepared.frame,
        prefix=config.column_prefix,
        web_search=config.web_search,
        grounding=grounding,
    )


@register_dataframe_accessor("kimi")
class KimiDaskAccessor:
    """``ddf.kimi.extract(Review, text=..., store=..., **options)``: ``kimi_extract.dask.extract``.

    Registered when ``kimi_extract.dask`` is imported.
    """

    def __init__(self, ddf: dd.DataFrame) -> None:
        self._ddf = ddf

    def extract(self, output: Extractor[Any] | type[BaseModel], **options: Any) -> dd.DataFrame:
        """See ``kimi_extract.dask.extract``."""
        return extract(self._ddf, output, **options)


class ShippedExtractor:
    """An extractor on its way to the workers: its output model and config, pickled once (the
    model by value where needed); each partition builds a fresh ``Extractor`` from them.

    Any lock inside (per-process state) is pickled as a fresh lock. Its repr names the model
    and the config (whose repr never shows the key) and never the bytes.
    """

    def __init__(self, output: type[BaseModel], config: ExtractorConfig, token: str) -> None:
        self.description = f"{output.__name__}, model={config.model!r}"
        self.token = token
        buffer = io.BytesIO()
        _LockFreePickler(buffer).dump((output, config))
        self.payload = buffer.getvalue()

    def __repr__(self) -> str:
        return f"ShippedExtractor({self.description})"

    def __dask_tokenize__(self) -> str:
        return self.token

    def load(self) -> Extractor[Any]:
        """A fresh extractor (one per partition: runs record their report on it)."""
        output, config = cloudpickle.loads(self.payload)
        return Extractor(output, config=config)


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


class _LockFreePickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _LOCK_TYPES):
            return (threading.RLock if "RLock" in type(obj).__name__ else threading.Lock, ())
        return super().reducer_override(obj)


def _run_partition(
    partition: pd.DataFrame,
    shipped: ShippedExtractor,
    run_options: dict[str, Any],
    limits: ClusterLimits,
    meta: pd.DataFrame,
) -> pd.DataFrame:
    """One partition on a worker: ``Extractor.run`` with the cluster gate set."""
    if not len(partition):
        return meta
    extractor = shipped.load()
    gate = limits.gate()
    token = OUTER_GATE.set(gate)
    ledger = SHARED_LEDGER.set(limits.ledger())
    try:
        return extractor.run(partition, **run_options)
    finally:
        SHARED_LEDGER.reset(ledger)
        OUTER_GATE.reset(token)


def _current_client() -> distributed.Client:
    try:
        return distributed.get_client()
    except ValueError:
        raise ConfigurationError(
            "kimi_extract.dask needs a dask.distributed Client for its cluster-wide limits: "
            "client = distributed.Client(...) first (Extractor.run covers one machine without "
            "Dask)"
        ) from None
