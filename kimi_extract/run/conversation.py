"""One row's conversation: store lookup, budget reservation, reask, truncation retry, tool loop.

Each row is one conversation: the shared prefix (system + examples), then the row's content. The
answer is parsed and validated by the output model; an invalid answer is appended to the
conversation (with its ``reasoning_content`` unchanged, as
docs/reference/kimi-chat-completions-reference.md requires) followed by a user
message listing the errors, and the model is asked again, up to ``validation_retries`` times. An
answer cut at ``max_completion_tokens`` (``finish_reason == "length"``) is retried once with double
the budget. Every answer's tokens count toward the row.

Whatever a row's content or a server's answer, the worst outcome for that row is its
``kx_error``. ``RowRunner`` also keeps the run-level state the scheduler (``run.scheduler``) reads
between rows: a fatal API error (authentication, permission, quota, unknown model, the same 400
for the first rows of a run, or an endpoint no attempt has reached: ``Transport.unreachable``),
a halt (the result store failed), a budget hit.

With ``grounding=`` the valid answer's leaves are then aligned to the row's text
(``run.grounding``; an answer served from the store too), filling ``RowResult.spans``.

Budgets (``RunBudget``) are checked per request: each one reserves its worst case (prompt + its
``max_completion_tokens``) before it is sent, so billed totals never cross a cap; its attempts
are followed by the budget's hook on the run's observer (``run.budget.BudgetHook``). After a
web search the prompt includes the search result tokens the search reported
(``arguments.usage.total_tokens``), which every later request of the row bills as input.

The run's observer (``dispatch.Dispatcher``) hears each row's start and end and every reask;
``Exchange`` numbers the row's requests, and the transport its attempts.

Tool calls are followed up only for tools the request offered, at most ``MAX_TOOL_CALLS`` per
answer: anything else ends the row at once (``ToolLoopError``), with no follow-up request. An
answer holding more JSON values than ``VALUES_PER_TOKEN`` per token of its
``max_completion_tokens`` is refused before it is parsed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
from collections.abc import Awaitable
from typing import Any, Protocol

from pydantic import BaseModel

from ..dispatch import Dispatcher, Exchange, billing_unknown, one_line
from ..exceptions import (
    AuthenticationError,
    BadRequestError,
    ContextOverflowError,
    NotFoundError,
    PermissionDeniedError,
    QuotaExceededError,
    StoreError,
    ToolLoopError,
    TruncatedError,
    ValidationFailedError,
)
from ..http.transport import Transport
from ..http.wire import json_values
from ..kimi import MAX_COMPLETION_TOKENS, WEB_SEARCH_FUNCTION
from ..records import RowInput, RowResult, Usage
from ..schema.compiled import AnswerInvalid
from .budget import BudgetHook, OverBudget, RunBudget
from .grounding import aground_row
from .passes import glean
from .request import (
    Answer,
    assistant_message,
    build_body,
    estimate_prompt_tokens,
    reask_message,
    tool_result_messages,
)
from .settings import RowSettings

logger = logging.getLogger("kimi_extract")

#: Errors that would fail every row the same way: stop the run at once.
FATAL_ERRORS = (AuthenticationError, PermissionDeniedError, QuotaExceededError, NotFoundError)
#: The run stops when its first rows all fail with this many identical 400s and nothing succeeded.
SAME_400_LIMIT = 3
#: ``kx_error`` of a row not sent because it would have crossed the run's budget.
BUDGET_ERROR = "budget"
#: Most tool calls accepted in one answer; more end the row (no follow-up is sent).
MAX_TOOL_CALLS = 16
#: An answer may hold at most this many JSON values per token of its ``max_completion_tokens``
#: (at least ``MIN_ANSWER_VALUES``), counted before it is parsed: a valid answer needs about a
#: token per value, so only a server sending more than it was asked for is refused.
VALUES_PER_TOKEN = 4
MIN_ANSWER_VALUES = 10_000


def search_tokens(tool_calls: list[dict[str, Any]]) -> int:
    """The search result tokens the ``$web_search`` calls of an answer report
    (``arguments.usage.total_tokens``): the next request bills them as input."""
    total = 0
    for call in tool_calls:
        function = call.get("function") or {}
        if function.get("name") != WEB_SEARCH_FUNCTION:
            continue
        try:
            arguments = json.loads(function.get("arguments") or "{}")
            reported = arguments["usage"]["total_tokens"]
        except (ValueError, TypeError, KeyError, RecursionError):
            continue
        if isinstance(reported, int) and not isinstance(reported, bool) and reported > 0:
            total += reported
    return total


def check_tool_calls(tool_calls: list[dict[str, Any]], offered: frozenset[str]) -> None:
    """Refuse, at once, an answer calling a tool the request did not offer or calling more than
    ``MAX_TOOL_CALLS`` (``ToolLoopError``: no follow-up request is sent)."""
    if len(tool_calls) > MAX_TOOL_CALLS:
        raise ToolLoopError(
            f"the answer made {len(tool_calls):,} tool calls, more than the {MAX_TOOL_CALLS} "
            "accepted per answer; no follow-up was sent"
        )
    for call in tool_calls:
        name = (call.get("function") or {}).get("name")
        if name not in offered:
            shown = repr(name)[:80]
            raise ToolLoopError(
                f"the model called a tool that was not offered ({shown}); no follow-up was sent"
            )


class RowStore(Protocol):
    """Where validated rows are kept between runs (``store_base.Store``: SQLite or PostgreSQL);
    lookups and commits are grouped per event-loop turn. ``replace``: the stored row under this
    key is stale (the output model rejects it), so the new one replaces it."""

    def lookup(self, key: str) -> Awaitable[Any]: ...

    def commit(
        self,
        key: str,
        *,
        model: str,
        output: str,
        usage: Usage,
        attempts: int,
        web_searches: int,
        replace: bool = False,
    ) -> Awaitable[None]: ...


#: The next attempt of a row does not fit the budget; the message is its kx_error.
_OverBudget = OverBudget
#: An attempt that may have been billed without telling us how much (``dispatch``).
outcome_unknown = billing_unknown
#: How long a cancelled run (Ctrl-C) waits for the commits already on their way to the store,
#: so the rows they land are in its partial (``RowRunner.unreported``). The store's close waits
#: for them anyway; this only bounds a store that does not answer.
COMMIT_GRACE_S = 5.0


class RowRunner:
    """Runs rows, one conversation each, with one transport; keeps the run-level state.

    ``halt``, ``fatal`` and ``budget_hit`` are read by the scheduler: once one is set, no new row
    starts. ``hooks``: the run's observer (default: the transport's); with a ``budget``, its
    ``BudgetHook`` joins it as an internal hook.
    """

    def __init__(
        self,
        settings: RowSettings,
        transport: Transport,
        *,
        store: RowStore | None = None,
        budget: RunBudget | None = None,
        hooks: Dispatcher | None = None,
    ) -> None:
        self.settings = settings
        self.transport = transport
        self.store = store
        self.budget = budget
        self.hooks = hooks if hooks is not None else transport.dispatcher
        self._budget_hook: BudgetHook | None = None
        if budget is not None:
            self._budget_hook = BudgetHook(budget)
            self.hooks.add(self._budget_hook, internal=True)
        self.budget_hit = False
        #: The error that halted the run (input iterator raised, store failed): no row starts.
        self.halt: BaseException | None = None
        #: A run-level API error (authentication, quota...): the run stops at once.
        self.fatal: BaseException | None = None
        self.successes = 0
        self._early_400: dict[str, int] = {}
        #: Row position -> the exchange of the row in progress (``turn`` continues it).
        self._exchanges: dict[int, Exchange] = {}
        #: Rows finished, or committed to the store, that the scheduler has not reported yet:
        #: position -> (the commit of the row's answer, or None, and its result). The scheduler
        #: drops a row once reported; a cancelled run reports the rest (``unreported``).
        self.finishing: dict[int, tuple[asyncio.Future[None] | None, RowResult]] = {}

    async def process(self, row: RowInput) -> RowResult:
        """One row, start to finish; never raises for the row's own failures.

        A row already in the result store is served from it without a request (its stored raw
        answer validated again). Otherwise the conversation runs, every attempt within the budget
        (an attempt that does not fit is not sent: ``kx_error`` starts with "budget"), and a valid
        result is committed to the store at once. Any other failure is the row's ``kx_error``.
        The observer hears the row start and end (``on_row_start`` / ``on_row_end``).
        """
        exchange = Exchange(row=row.position, label=row.label)
        hooks = self.hooks
        if "on_row_start" in hooks.listening:
            await hooks.row_start(exchange)
        self._exchanges[row.position] = exchange  # a later pass's requests count in it too
        try:
            result = await self._process(row, exchange)
        finally:
            del self._exchanges[row.position]
        # Finished from here on: a Ctrl-C in the hooks, or before the scheduler reports the
        # row, leaves it in ``finishing`` and the partial frame still gets it.
        self.finishing[row.position] = (None, result)
        if "on_row_end" in hooks.listening:
            await hooks.row_end(exchange, result)
        return result

    async def _process(self, row: RowInput, exchange: Exchange) -> RowResult:
        settings = self.settings
        result = RowResult(label=row.label, position=row.position)
        if self.halt is not None:
            result.error = f"not run: the run stopped ({type(self.halt).__name__})"
            return result
        if row.error is not None or row.content is None:
            exc = row.error or ValueError("row has no content")
            result.error, result.exception = one_line(exc), exc
            return result
        user = {"role": "user", "content": row.content}
        key = None
        raw: str | None = None
        stale = False
        try:
            if self.store is not None:
                key = settings.store_key(user)
                stored = await self.store.lookup(key)
                if self._serve_stored(stored, result):
                    if settings.grounding:
                        await self._ground(row, result, stored.output)
                    if row.gleaning is not None:  # the later passes (run.passes)
                        await glean(self, row, user, result, stored.output, None)
                    return result
                stale = stored is not None  # the output model rejects it: the answer replaces it
            prompt_estimate = settings.prefix_tokens + estimate_prompt_tokens([user])
        except StoreError as exc:
            self.stop_starting(exc)
            result.error, result.exception = one_line(exc), exc
            return result
        except Exception as exc:  # an unusable cell: the row's error, never the run's
            result.error, result.exception = one_line(exc), exc
            return result
        reply: dict[str, Any] | None = None
        try:
            result.value, raw, reply = await self._converse(
                [user], prompt_estimate, result, exchange
            )
            self.successes += 1
        except _OverBudget as over:
            result.error = str(over)
        except Exception as exc:
            result.error, result.exception = one_line(exc), exc
            self._check_run_stop(exc)
        finally:
            result.latency_s = exchange.latency_s
            result.usage = result.usage.priced(
                settings.pricing,
                separate_cache_writes=settings.separate_cache_writes,
                ttl=settings.cache_ttl,
            )
        if key is not None and raw is not None and self.store is not None:
            # Grouped with the rows finishing this event-loop turn; done once committed, so the
            # row is reported (frame, sink, progress) only when a kill -9 cannot lose it.
            commit = asyncio.ensure_future(
                self.store.commit(
                    key,
                    model=settings.model,
                    output=raw,
                    usage=result.usage,
                    attempts=result.attempts,
                    web_searches=result.web_searches,
                    replace=stale,
                )
            )
            self.finishing[row.position] = (commit, result)
            try:
                # Shielded: a Ctrl-C while it is on its way does not cancel the commit, and the
                # cancelled run reports the row if it lands (``unreported``).
                await asyncio.shield(commit)
            except StoreError as exc:  # the row keeps its value; the run stops after it
                del self.finishing[row.position]
                self.stop_starting(exc)
        if settings.grounding:  # (no coroutine per row when grounding is off)
            await self._ground(row, result, raw)
        if row.gleaning is not None and raw is not None and result.value is not None:
            await glean(self, row, user, result, raw, reply)
        return result

    async def unreported(self) -> list[RowResult]:
        """The rows of a cancelled run (Ctrl-C) that finished, or whose answer the store
        committed, but that the scheduler had not reported: the partial frame holds them (a row
        cut off in its grounding or a later pass as it was then). A commit still on its way is
        waited for (``COMMIT_GRACE_S`` at most); its row is reported only if it landed."""
        entries = list(self.finishing.values())
        self.finishing.clear()
        pending = [commit for commit, _ in entries if commit is not None and not commit.done()]
        if pending:
            await asyncio.wait(pending, timeout=COMMIT_GRACE_S)
        return [
            result
            for commit, result in entries
            if commit is None
            or (commit.done() and not commit.cancelled() and commit.exception() is None)
        ]

    async def turn(
        self, turns: list[dict[str, Any]], result: RowResult
    ) -> tuple[BaseModel, str, dict[str, Any]] | None:
        """One more request of a row's conversation (a later pass, ``run.passes``): ``turns``
        follow the shared prefix and end with the user's message. Returns the validated value,
        the raw answer and the assistant message to echo (its ``reasoning_content`` kept), or
        None when it failed: ``result.error`` says why (a budget hit or a run-stopping error is
        noted as for a first request). ``result`` gets the turn's priced usage and attempts."""
        settings = self.settings
        # The row's own exchange: its requests and attempts go on being numbered (and the budget
        # and the hooks know the row); the pass's time is what it adds.
        exchange = self._exchanges.get(result.position)
        if exchange is None:
            exchange = Exchange(row=result.position, label=result.label)
        before = exchange.latency_s
        try:
            estimate = settings.prefix_tokens + estimate_prompt_tokens(turns)
            return await self._converse(turns, estimate, result, exchange)
        except _OverBudget as over:
            result.error = str(over)
        except Exception as exc:
            result.error, result.exception = one_line(exc), exc
            self._check_run_stop(exc)
        finally:
            result.latency_s = exchange.latency_s - before
            result.usage = result.usage.priced(
                settings.pricing,
                separate_cache_writes=settings.separate_cache_writes,
                ttl=settings.cache_ttl,
            )
        return None

    def serve_stored(self, stored: Any, result: RowResult) -> bool:
        """Fill ``result`` from a stored row (True), or False when there is none or the output
        model no longer accepts it."""
        return self._serve_stored(stored, result)

    async def ground(self, row: RowInput, result: RowResult, raw: str | None) -> None:
        """``_ground`` for ``run.passes``: the spans of a later pass's answer."""
        await self._ground(row, result, raw)

    async def _ground(self, row: RowInput, result: RowResult, raw: str | None) -> None:
        """``grounding=``: the valid answer's spans in the row's text (recomputed for an answer
        served from the store); ``"quotes"``: checked through the quotes of ``raw``, the answer
        it came from. The aligner is pure; should it fail, the row keeps its value and has no
        spans."""
        settings = self.settings
        if not settings.grounding or result.value is None:
            return
        try:
            quotes = None
            if settings.grounding == "quotes" and raw is not None:
                quotes = settings.compiled.quotes_of(raw)
            result.spans = await aground_row(
                row.content, result.value, quotes, fields=settings.grounding_fields
            )
        except Exception:  # pragma: no cover - a bug in the aligner must not fail the row
            logger.exception("grounding failed for row %r", row.label)

    def stop_starting(self, exc: BaseException) -> None:
        """Stop starting rows (the first error wins); rows in flight finish."""
        if self.halt is None:
            self.halt = exc

    def _serve_stored(self, stored: Any, result: RowResult) -> bool:
        if stored is None:
            return False
        try:
            # The raw answer, validated as the first run validated it: the same values.
            result.value = self.settings.compiled.parse(stored.output)
        except Exception:
            return False  # the output model no longer accepts it: ask again
        result.from_store = True
        result.saved = stored.usage
        result.web_searches = stored.web_searches
        result.usage = Usage(cost=0.0 if self.settings.pricing is not None else math.nan)
        return True

    async def _send(
        self,
        body: dict[str, Any],
        exchange: Exchange,
        prompt_estimate: int,
        completion: int,
        searched: int = 0,
    ) -> Answer:
        """One request (with its retries), within the budget when there is one.

        The request's worst case is reserved before it is sent and replaced by the billed usage
        when it ends; retries run one at a time under the same reservation. ``searched``: the
        web search result tokens the prompt estimate includes (named when they do not fit).
        """
        budget = self.budget
        if budget is None:
            return await self.transport.complete(body, exchange, prompt_estimate)
        worst = budget.worst_case(prompt_estimate, completion)
        if not budget.fits_alone(worst):
            raise _OverBudget(
                f"{BUDGET_ERROR}: this row's next request may bill up to {worst.tokens:,} tokens"
                + (f" / ${worst.cost:.4f}" if budget.max_cost is not None else "")
                + f" (prompt ~{prompt_estimate:,}"
                + (f", {searched:,} of them web search results" if searched else "")
                + f" + max_completion_tokens {completion:,}), "
                f"more than {budget.describe()}; raise the budget or lower max_completion_tokens"
            )
        reservation = await budget.reserve(worst)
        if reservation is None:
            self.budget_hit = True
            if searched:
                raise _OverBudget(
                    f"{BUDGET_ERROR}: the follow-up request after a web search bills its "
                    f"{searched:,} tokens of search results as input; what is left of "
                    f"{budget.describe()} cannot pay for it (up to {worst.tokens:,} tokens), so "
                    "it was not sent"
                )
            raise _OverBudget(BUDGET_ERROR)
        billed: Any = None
        held = self._budget_hook
        assert held is not None
        # Its attempts are charged by the budget's hook (an attempt of unknown billing at its
        # worst case); the hook refuses a retry that no longer fits.
        held.hold(exchange.row, reservation)
        try:
            answer = await self.transport.complete(body, exchange, prompt_estimate)
            settings = self.settings
            billed = answer.usage.priced(
                settings.pricing,
                separate_cache_writes=settings.separate_cache_writes,
                ttl=settings.cache_ttl,
            )
            return answer
        except OverBudget:
            self.budget_hit = True
            raise
        finally:
            held.release(exchange.row)
            budget.settle(reservation, billed)

    def _check_run_stop(self, exc: BaseException) -> None:
        """Note a run-level error; the row is delivered first, then the run stops."""
        if isinstance(exc, FATAL_ERRORS):
            self.fatal = self.fatal or exc
        unreachable = getattr(self.transport, "unreachable", None)
        if unreachable is not None:  # no attempt of the run has ever connected
            self.fatal = self.fatal or unreachable
        if isinstance(exc, BadRequestError) and self.successes == 0:
            key = f"{exc.error_type}:{exc.message}"
            self._early_400[key] = self._early_400.get(key, 0) + 1
            if self._early_400[key] >= SAME_400_LIMIT:
                self.fatal = self.fatal or exc

    async def _converse(
        self,
        turns: list[dict[str, Any]],
        prompt_estimate: int,
        result: RowResult,
        exchange: Exchange,
    ) -> tuple[BaseModel, str, dict[str, Any]]:
        """The row's conversation after the shared prefix (``turns``: the row's message, or a
        later pass's history); returns the validated value, the raw answer it came from and the
        assistant message that answer is echoed as."""
        settings = self.settings
        messages = [*settings.static_messages, *turns]
        room = settings.context_window - prompt_estimate
        if room <= 0:
            raise ContextOverflowError(
                f"the prompt needs about {prompt_estimate:,} tokens; the context window of "
                f"{settings.model} is {settings.context_window:,}"
            )
        budget = min(settings.max_completion_tokens, room)
        budget_doubled = False
        reasks = tool_rounds = searched = 0
        while True:
            body = build_body(
                model=settings.model,
                messages=messages,
                response_format=settings.response_format,
                reasoning_effort=settings.reasoning_effort,
                max_completion_tokens=budget,
                prompt_cache_options=settings.prompt_cache_options,
                tools=list(settings.tools),
                stream=settings.stream,
            )
            exchange.next_request()
            if self.budget is None:  # one coroutine less per request
                answer = await self.transport.complete(body, exchange, prompt_estimate)
            else:
                answer = await self._send(body, exchange, prompt_estimate, budget, searched)
            # The first answer's usage is the row's so far (a Usage less per row).
            result.usage = result.usage + answer.usage if result.attempts else answer.usage
            result.attempts += 1
            if answer.finish_reason == "tool_calls" and answer.tool_calls:
                check_tool_calls(answer.tool_calls, settings.offered_tools)
                if tool_rounds >= settings.max_tool_rounds:
                    raise ToolLoopError(f"the model still called tools after {tool_rounds} rounds")
                tool_rounds += 1
                result.web_searches += sum(
                    1
                    for call in answer.tool_calls
                    if (call.get("function") or {}).get("name") == WEB_SEARCH_FUNCTION
                )
                added = [assistant_message(answer), *tool_result_messages(answer)]
                messages = [*messages, *added]
                # Every later request bills the search results the history names, as input.
                found = search_tokens(answer.tool_calls)
                searched += found
                prompt_estimate += estimate_prompt_tokens(added) + found
                continue
            if answer.finish_reason == "length":
                larger = min(budget * 2, MAX_COMPLETION_TOKENS, room)
                if budget_doubled or larger <= budget:
                    raise TruncatedError(
                        f"truncated: the answer did not fit max_completion_tokens={budget:,}"
                    )
                budget, budget_doubled = larger, True
                continue
            raw = answer.content or ""
            most = max(MIN_ANSWER_VALUES, VALUES_PER_TOKEN * budget)
            if json_values(raw, most) > most:  # before a parse builds an object per value
                raise ValidationFailedError(
                    f"the answer holds more than {most:,} JSON values ({VALUES_PER_TOKEN} per "
                    f"token of max_completion_tokens={budget:,}); refused before parsing"
                )
            try:
                return settings.compiled.parse(raw), raw, assistant_message(answer)
            except AnswerInvalid as invalid:
                if reasks >= settings.validation_retries:
                    raise ValidationFailedError(
                        f"answer still invalid after {result.attempts} attempts: "
                        + "; ".join(invalid.errors),
                        invalid.errors,
                    ) from None
                reasks += 1
                await self.hooks.reask(exchange, invalid.kind, invalid.errors, raw)
                added = [assistant_message(answer), reask_message(invalid.errors, invalid.kind)]
                messages = [*messages, *added]
                prompt_estimate += estimate_prompt_tokens(added)
