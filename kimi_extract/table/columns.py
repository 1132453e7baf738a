"""Every ``kx_`` column kimi_extract writes: one registry, so the lists cannot drift apart.

Every column name starting with ``kx_`` is reserved: an output field may not take one, and an input
frame holding one looks like an earlier output. The groups below are what the other modules read:

- ``TOKEN_COLUMNS``: the token buckets (``plot_usage`` reads these);
- ``ADDITIVE_COLUMNS``: per-row numbers that sum to the run's totals (explode keeps them on an
  item's first row, documents sum them over chunks);
- ``ACCOUNTING_COLUMNS``: the columns every ``run`` output carries after the output fields
  (plus ``kx_web_searches`` when web search is on), with their dtypes in ``ACCOUNTING_DTYPES``.
"""

from __future__ import annotations

#: Every column name starting with this is kimi_extract's (accounting, documents, web search).
RESERVED_PREFIX = "kx_"

PROMPT_TOKENS = "kx_prompt_tokens"
CACHED_TOKENS = "kx_cached_tokens"
CACHE_WRITE_TOKENS = "kx_cache_write_tokens"
COMPLETION_TOKENS = "kx_completion_tokens"
REASONING_TOKENS = "kx_reasoning_tokens"
COST = "kx_cost"
ATTEMPTS = "kx_attempts"
LATENCY_S = "kx_latency_s"
ERROR = "kx_error"
#: True when the row was served from the result store (no request sent).
FROM_STORE = "kx_from_store"
#: Web searches the row's tool loop ran (only with ``web_search=True``).
WEB_SEARCHES = "kx_web_searches"
#: ``explode``: the item's number within its source row.
ITEM = "kx_item"
#: ``run_documents``: the document's path, its page, how many chunks it was sent as.
SOURCE = "kx_source"
PAGE = "kx_page"
CHUNKS = "kx_chunks"
#: ``run_documents`` with chunks: the list items dropped as repeats of items already kept, and
#: the values chunks disagreed on (a list of ``{"path", "values", "pages"}``; ``[]`` when none).
DUPLICATES_REMOVED = "kx_duplicates_removed"
CONFLICTS = "kx_conflicts"
#: ``run_documents(passes=N)``: the most passes a chunk of the row ran, and the merged list
#: items by the first pass that found them (``[pass 1, pass 2, ...]``).
PASSES = "kx_passes"
ITEMS_BY_PASS = "kx_items_by_pass"
#: The CLI's column for a named or non-trivial index when writing a file.
INDEX = "kx_index"
#: ``grounding=``: per row, a list of span dicts (``records.Span.to_dict``), one per leaf of the
#: answer, grounded or not; and the share of leaves grounded (NaN without leaves or on error).
SPANS = "kx_spans"
GROUNDED = "kx_grounded"

#: Token buckets (nested: cached and cache write are part of prompt, reasoning of completion).
TOKEN_COLUMNS = (
    PROMPT_TOKENS,
    CACHED_TOKENS,
    CACHE_WRITE_TOKENS,
    COMPLETION_TOKENS,
    REASONING_TOKENS,
)
#: Per-row numbers whose column sums are the run's totals.
ADDITIVE_COLUMNS = (*TOKEN_COLUMNS, COST, ATTEMPTS, LATENCY_S, WEB_SEARCHES)
#: Column -> dtype of the accounting columns of a ``run`` output, in order.
ACCOUNTING_DTYPES: dict[str, str] = {
    PROMPT_TOKENS: "int64",
    CACHED_TOKENS: "int64",
    CACHE_WRITE_TOKENS: "int64",
    COMPLETION_TOKENS: "int64",
    REASONING_TOKENS: "int64",
    COST: "float64",
    ATTEMPTS: "int64",
    LATENCY_S: "float64",
    ERROR: "object",
    FROM_STORE: "bool",
}
#: The accounting columns of a ``run`` output, in order (``WEB_SEARCHES`` follows when on).
ACCOUNTING_COLUMNS = tuple(ACCOUNTING_DTYPES)
