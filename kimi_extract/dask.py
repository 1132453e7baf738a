"""Extraction over a Dask DataFrame on a ``dask.distributed`` cluster, with cluster-wide limits.

::

    import kimi_extract.dask as kxd

    extractor = kx.Extractor(Review, instructions="...", concurrency=32, rpm=3000, tpm=2_000_000)
    out = kxd.extract(ddf, extractor, text="review", store="/shared/kx.sqlite3")  # lazy
    df = out.compute()                        # or out.to_parquet(...); ddf.kimi.extract(...) too

Needs ``pip install 'kimi-extract[dask]'`` and a ``distributed.Client``; ``import kimi_extract``
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
- **RPM / TPM**: divided evenly among the cluster's task slots (the sum of the workers'
  threads when ``extract`` is called, or ``slots=``): each slot keeps one sliding 60-second
  window at ``rpm // slots`` requests and ``tpm // slots`` tokens for the whole run, shared by
  the partitions it runs one after another. As at most ``slots`` partitions run at once, no
  60-second window of the cluster exceeds ``rpm`` / ``tpm``. Limits of this design: shares are
  static, so a run's tail (fewer partitions than slots) goes slower than the limits allow; a
  cluster that grows beyond ``slots`` threads during the run can exceed the limits (pass the
  largest size as ``slots=``); ``rpm`` (and ``tpm``) must be at least ``slots``. The adaptive
  backoff on 429s stays per partition.
- **Budgets**: ``max_cost`` / ``max_tokens`` are split evenly among the partitions, so the run as
  a whole stays within them; a partition that reaches its share raises ``BudgetExceeded`` (rerun
  with a higher budget: finished rows come from the store).

Resume: every validated row is committed to a result store (SQLite, ``store=`` or the
extractor's ``cache``) as it finishes, by whichever worker ran it. Dask reruns a partition whose
worker died; the rerun serves committed rows from the store (``kx_from_cache`` True, zero tokens
billed) and requests only the rest. Rerunning a whole failed ``compute`` works the same way. The
path is opened as given on every worker: one SQLite file on a local disk serves every process
of one machine (a ``LocalCluster``). SQLite's WAL mode does not work over network filesystems
(NFS, SMB), so on a cluster of several machines give each machine a local path (a partition
rerun on another machine then asks again for the rows finished on the first one).

The API key travels to the workers inside the pickled extractor (as ``transport.Secret``, whose
repr is masked); reprs of the shipped task arguments never show it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import copy
import io
import os
import sys
import threading
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import cloudpickle
import dask.dataframe as dd
import distributed
import pandas as pd
from dask.dataframe.extensions import register_dataframe_accessor
from pydantic import BaseModel

from .accessor import build_extractor
from .exceptions import ConfigurationError
from .extractor import Extractor, check_budget_fits
from .http.limits import OUTER_GATE, Limiter
from .run.inputs import prepare
from .table.frame import build_frame, check_clashes

__all__ = ["KimiDaskAccessor", "extract", "output_meta"]

#: Run options that name columns, checked against the Dask frame's columns up front.
_COLUMN_OPTIONS = ("text", "template", "images", "videos")


def extract(
    ddf: dd.DataFrame,
    extractor: Extractor[Any] | type[BaseModel],
    *,
    text: str | Sequence[str] | None = None,
    template: str | None = None,
    store: str | os.PathLike[str] | None = None,
    slots: int | None = None,
    client: distributed.Client | None = None,
    **options: Any,
) -> dd.DataFrame:
    """Extract every row of ``ddf`` on the cluster; returns a lazy Dask DataFrame.

    ``extractor``: an ``Extractor``, or an output model with ``Extractor`` options in
    ``options`` (as ``df.kimi.extract``). ``text`` / ``template`` / ``images``: as in
    ``Extractor.run``. ``store``: the result-store path every worker commits to and resumes
    from (default: the extractor's ``cache``; required). ``slots``: how many partitions may run
    at once, among which ``rpm`` / ``tpm`` are divided (default: the cluster's worker threads
    now). ``client``: default ``distributed.get_client()``; compute with that client. Columns
    and options are checked now; nothing is sent until the result is computed.
    """
    extractor, run_options = build_extractor(extractor, options)
    run_options = {"text": text, "template": template, **run_options}
    client = client or _current_client()
    if slots is None:
        slots = sum(client.nthreads().values())
        if slots < 1:
            raise ConfigurationError(
                "the cluster has no workers yet; pass slots= (the most partitions that will run "
                "at once) to divide rpm/tpm among"
            )
    elif not isinstance(slots, int) or isinstance(slots, bool) or slots < 1:
        raise ConfigurationError(f"slots must be a positive integer, got {slots!r}")
    path = store if store is not None else extractor.cache_path
    if path is None:
        raise ConfigurationError(
            "a Dask run commits every row to a result store so a failed partition resumes: pass "
            "store='/path/results.sqlite3' (or Extractor(cache=...))"
        )
    # Each partition's share must still pay for one request, or no partition could send any.
    check_budget_fits(
        None if extractor.max_tokens is None else extractor.max_tokens // ddf.npartitions,
        None if extractor.max_cost is None else extractor.max_cost / ddf.npartitions,
        extractor.max_completion_tokens,
        extractor.pricing,
        per=f" per partition ({ddf.npartitions} partitions share the budget)",
    )
    meta = output_meta(ddf, extractor, run_options)
    limits = cluster_limits(extractor, slots)
    worker_copy = copy.copy(extractor)
    worker_copy.cache_path = Path(path).expanduser().absolute()
    worker_copy.progress = False
    worker_copy.last_run = None
    worker_copy.last_partial = None
    if extractor.max_cost is not None:
        worker_copy.max_cost = extractor.max_cost / ddf.npartitions
    if extractor.max_tokens is not None:
        worker_copy.max_tokens = max(1, extractor.max_tokens // ddf.npartitions)
    shipped = ShippedExtractor(worker_copy, limits.token)
    return ddf.map_partitions(
        _run_partition,
        shipped,
        run_options,
        limits,
        meta,
        meta=meta,
        align_dataframes=False,
    )


def cluster_limits(extractor: Extractor[Any], slots: int) -> ClusterLimits:
    """A run's shared limits: the extractor's concurrency, and its rpm/tpm divided by ``slots``."""
    return ClusterLimits(
        token=uuid.uuid4().hex,
        concurrency=extractor.concurrency,
        rpm=_share("rpm", extractor.rpm, slots),
        tpm=_share("tpm", extractor.tpm, slots),
    )


def output_meta(
    ddf: dd.DataFrame, extractor: Extractor[Any], run_options: dict[str, Any]
) -> pd.DataFrame:
    """The empty output frame (columns and dtypes) of a run over ``ddf``; no API call.

    Raises ``InputError`` now when a column option names a column ``ddf`` lacks, or an output
    column would overwrite an input column.
    """
    columns = {k: v for k, v in run_options.items() if k in _COLUMN_OPTIONS and v is not None}
    prepared = prepare(ddf._meta, **columns)
    check_clashes(prepared.columns, extractor.output, extractor.prefix)
    assert prepared.index is not None
    return build_frame(
        model=extractor.output,
        results=[],
        index=prepared.index,
        input_frame=prepared.frame,
        prefix=extractor.prefix,
        web_search=extractor.web_search,
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
    """An extractor on its way to the workers: pickled once, by value where needed.

    Locks inside it (per-process state such as the router's) are pickled as fresh locks. Its
    repr names the extractor (whose repr masks the key) and never the bytes.
    """

    def __init__(self, extractor: Extractor[Any], token: str) -> None:
        self.description = repr(extractor)
        self.token = token
        buffer = io.BytesIO()
        _LockFreePickler(buffer).dump(extractor)
        self.payload = buffer.getvalue()

    def __repr__(self) -> str:
        return f"ShippedExtractor({self.description})"

    def __dask_tokenize__(self) -> str:
        return self.token

    def load(self) -> Extractor[Any]:
        """A fresh extractor (one per partition: runs record their report on it)."""
        extractor: Extractor[Any] = cloudpickle.loads(self.payload)
        return extractor


_LOCK_TYPES = (type(threading.Lock()), type(threading.RLock()))


class _LockFreePickler(cloudpickle.Pickler):
    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, _LOCK_TYPES):
            return (threading.RLock if "RLock" in type(obj).__name__ else threading.Lock, ())
        return super().reducer_override(obj)


class ClusterLimits:
    """What every partition of one run shares: the semaphore name and the per-slot shares."""

    def __init__(self, *, token: str, concurrency: int, rpm: int | None, tpm: int | None) -> None:
        self.token = token
        self.concurrency = concurrency
        self.rpm = rpm
        self.tpm = tpm

    def __repr__(self) -> str:
        return (
            f"ClusterLimits(concurrency={self.concurrency}, rpm_per_slot={self.rpm}, "
            f"tpm_per_slot={self.tpm})"
        )

    def __dask_tokenize__(self) -> str:
        return self.token

    def gate(self) -> ClusterGate:
        """The gate for a partition running in this thread of this worker."""
        return ClusterGate(_semaphore(self), slot_window(self))


class ClusterGate:
    """The outer gate of a partition's limiter: a cluster lease, then the slot's window."""

    def __init__(self, semaphore: distributed.Semaphore, window: Limiter | None) -> None:
        self.semaphore = semaphore
        self.window = window

    async def acquire(self, tokens: int) -> Any:
        await _take_lease(self.semaphore)
        if self.window is None:
            return True
        try:
            return await self.window.acquire(tokens)
        except BaseException:
            _give_lease(self.semaphore)
            raise

    def release(self, handle: Any, actual_tokens: int | None) -> None:
        if self.window is not None:
            self.window.release(handle, actual_tokens)
        _give_lease(self.semaphore)


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
    try:
        return extractor.run(partition, **run_options)
    finally:
        OUTER_GATE.reset(token)


def _share(name: str, limit: int | None, slots: int) -> int | None:
    if limit is None:
        return None
    share = limit // slots
    if share < 1:
        raise ConfigurationError(
            f"{name}={limit} cannot be divided among {slots} task slots (each needs at least 1); "
            f"raise {name} or run fewer partitions at once (slots=)"
        )
    return share


def _current_client() -> distributed.Client:
    try:
        return distributed.get_client()
    except ValueError:
        raise ConfigurationError(
            "kimi_extract.dask needs a dask.distributed Client for its cluster-wide limits: "
            "client = distributed.Client(...) first (Extractor.run covers one machine without "
            "Dask)"
        ) from None


# -- worker side -----------------------------------------------------------------------------

_semaphores: dict[str, distributed.Semaphore] = {}
_semaphores_lock = threading.Lock()
_slots = threading.local()


def _semaphore(limits: ClusterLimits) -> distributed.Semaphore:
    """This worker process's handle on the run's semaphore (it refreshes the leases it holds)."""
    name = f"kimi_extract-{limits.token}"
    with _semaphores_lock:
        semaphore = _semaphores.get(name)
        if semaphore is None:
            semaphore = _semaphores[name] = distributed.Semaphore(limits.concurrency, name=name)
        return semaphore


def slot_window(limits: ClusterLimits, **clock: Any) -> Limiter | None:
    """The RPM/TPM window of this task slot (worker thread) for the run; None when unlimited.

    One window per thread and run, reused by every partition the thread runs, so a partition
    that starts right after another one inherits its last 60 seconds. ``clock`` (``clock=``,
    ``sleep=``) is for tests.
    """
    if limits.rpm is None and limits.tpm is None:
        return None
    windows: dict[str, Limiter] = getattr(_slots, "windows", None) or {}
    _slots.windows = windows
    window = windows.get(limits.token)
    if window is None:
        reset = OUTER_GATE.set(None)  # the window itself has no outer gate
        try:
            window = Limiter(
                concurrency=sys.maxsize, rpm=limits.rpm, tpm=limits.tpm, adaptive=False, **clock
            )
        finally:
            OUTER_GATE.reset(reset)
        if len(windows) >= 8:  # keep the latest runs' windows only
            windows.pop(next(iter(windows)))
        windows[limits.token] = window
    return window


async def _take_lease(semaphore: distributed.Semaphore) -> None:
    """Take a lease on the worker's event loop, from the partition's own loop."""

    async def acquire() -> bool:
        return bool(await semaphore.acquire())

    future = asyncio.run_coroutine_threadsafe(acquire(), semaphore.loop.asyncio_loop)
    try:
        await asyncio.wrap_future(future)
    except asyncio.CancelledError:
        # A lease granted after the cancel reached us is given back as soon as it arrives.
        future.add_done_callback(lambda done: _give_back(semaphore, done))
        raise


def _give_back(semaphore: distributed.Semaphore, done: concurrent.futures.Future[bool]) -> None:
    if not done.cancelled() and done.exception() is None and done.result():
        _give_lease(semaphore)


def _give_lease(semaphore: distributed.Semaphore) -> None:
    """Give a lease back without waiting for the scheduler's answer."""

    async def release() -> None:
        await semaphore.release()

    asyncio.run_coroutine_threadsafe(release(), semaphore.loop.asyncio_loop)
