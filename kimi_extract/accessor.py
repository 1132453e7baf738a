"""The ``kimi`` pandas accessor: ``df.kimi.extract(Review, text="review")``.

Registered on ``pd.DataFrame`` and ``pd.Series`` when this module is imported (``import
kimi_extract`` does it). The accessor is thin: it checks the object when it is made, splits the
keyword arguments into ``Extractor`` options and run options, and delegates to
``Extractor.run`` / ``arun`` / ``estimate``. It never writes ``df.attrs`` and keeps no state; the
run's report is on the extractor (pass your own to read ``extractor.last_run`` afterwards)::

    out = df.kimi.extract(Review, text="review", instructions="...", concurrency=32)
    est = df.kimi.estimate(Review, text="review")           # no API call
    extractor = kx.Extractor(Review, instructions="...")
    out = df.kimi.extract(extractor, text="review")         # extractor.last_run.summary()
    out = df["review"].kimi.extract(Review)                 # one text column
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd
from pydantic import BaseModel

from .config import option_names
from .exceptions import InputError, did_you_mean
from .extractor import COLUMN_OPTIONS, DEPRECATED_OPTIONS, Extractor
from .run.estimate import Estimate


def split_options(options: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Split keyword arguments into ``(Extractor options, run options)``; TypeError if unknown.

    Extractor options are the settings of ``kx.ExtractorConfig`` (its fields, its groups and
    their fields' flat names, plus ``config=`` and the deprecated old names); run options are
    ``Extractor.run``'s column options (``COLUMN_OPTIONS``).
    """
    extractor_names = option_names() | {"config"} | set(DEPRECATED_OPTIONS)
    run_names = frozenset(COLUMN_OPTIONS)
    unknown = sorted(set(options) - extractor_names - run_names)
    if unknown:
        known = extractor_names | run_names
        names = ", ".join(f"{name!r}{did_you_mean(name, known)}" for name in unknown)
        raise TypeError(
            f"unknown option(s) {names}: run options are {sorted(run_names)}; Extractor "
            f"options are {sorted(extractor_names)}"
        )
    extractor_options = {k: v for k, v in options.items() if k in extractor_names}
    run_options = {k: v for k, v in options.items() if k in run_names}
    return extractor_options, run_options


def build_extractor(
    output: type[BaseModel] | Extractor[Any], options: dict[str, Any]
) -> tuple[Extractor[Any], dict[str, Any]]:
    """The extractor for ``output`` (a model class, or an ``Extractor`` used as is) and the run
    options left over from ``options``."""
    extractor_options, run_options = split_options(options)
    if isinstance(output, Extractor):
        if extractor_options:
            raise TypeError(
                f"Extractor option(s) {sorted(extractor_options)} given with a ready Extractor; "
                "set them when you build it, or pass the output model instead"
            )
        return output, run_options
    return Extractor(output, **extractor_options), run_options


@pd.api.extensions.register_dataframe_accessor("kimi")
class KimiFrameAccessor:
    """``df.kimi``: extract a Pydantic model from every row of a DataFrame (see the module)."""

    def __init__(self, frame: pd.DataFrame) -> None:
        labels = [str(c) for c in frame.columns]
        duplicated = sorted({c for c in labels if labels.count(c) > 1})
        if duplicated:
            raise InputError(
                f"df.kimi needs unique column names; duplicated: {duplicated} (rename them)"
            )
        self._frame = frame

    def extract(
        self,
        output: type[BaseModel] | Extractor[Any],
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        **options: Any,
    ) -> pd.DataFrame:
        """``Extractor(output, **extractor_options).run(df, text=..., ...)``: the enriched frame.

        ``output``: the model class, or a ready ``Extractor`` (then only run options are
        accepted). ``text`` / ``template`` / ``images`` / ``videos``: as in ``Extractor.run``;
        every other keyword is an ``Extractor`` option (``instructions``, ``model``,
        ``concurrency`` ...: the fields of ``kx.ExtractorConfig``).
        """
        extractor, run_options = build_extractor(output, options)
        return extractor.run(self._frame, text=text, template=template, **run_options)

    async def aextract(
        self,
        output: type[BaseModel] | Extractor[Any],
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        **options: Any,
    ) -> pd.DataFrame:
        """Async ``extract`` (``Extractor.arun``)."""
        extractor, run_options = build_extractor(output, options)
        return await extractor.arun(self._frame, text=text, template=template, **run_options)

    def estimate(
        self,
        output: type[BaseModel] | Extractor[Any],
        *,
        text: str | Sequence[str] | None = None,
        template: str | None = None,
        **options: Any,
    ) -> Estimate:
        """``Extractor.estimate`` for this frame: requests, tokens and cost, with no API call."""
        extractor, run_options = build_extractor(output, options)
        return extractor.estimate(self._frame, text=text, template=template, **run_options)


@pd.api.extensions.register_series_accessor("kimi")
class KimiSeriesAccessor:
    """``series.kimi``: extract a Pydantic model from each text of a Series."""

    def __init__(self, series: pd.Series) -> None:
        self._series = series

    def _split(
        self, output: type[BaseModel] | Extractor[Any], options: dict[str, Any]
    ) -> tuple[Extractor[Any], dict[str, Any]]:
        columns = sorted(set(options) & set(COLUMN_OPTIONS))
        if columns:
            raise InputError(
                f"series.kimi takes no {columns}: the Series is the text; use df.kimi on a "
                "DataFrame to pick columns"
            )
        return build_extractor(output, options)

    def extract(self, output: type[BaseModel] | Extractor[Any], **options: Any) -> pd.DataFrame:
        """Extract from each value; returns the Series as a column plus the output columns."""
        extractor, run_options = self._split(output, options)
        return extractor.run(self._series, **run_options)

    async def aextract(
        self, output: type[BaseModel] | Extractor[Any], **options: Any
    ) -> pd.DataFrame:
        """Async ``extract`` (``Extractor.arun``)."""
        extractor, run_options = self._split(output, options)
        return await extractor.arun(self._series, **run_options)

    def estimate(self, output: type[BaseModel] | Extractor[Any], **options: Any) -> Estimate:
        """``Extractor.estimate`` for this Series, with no API call."""
        extractor, run_options = self._split(output, options)
        return extractor.estimate(self._series, **run_options)
