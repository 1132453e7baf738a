"""Gleaning: later passes of one row's conversation that ask for the list items it missed.

``run_documents(passes=N)`` gives each chunk row a ``records.Gleaning``. Once the row's first
answer is valid (sent, or served from the result store), ``glean`` asks again in the same
conversation, up to ``N - 1`` times: the earlier answers stay in the history as assistant
messages (with their ``reasoning_content`` unchanged, as Kimi requires in multi-turn
conversations; an answer served from the store has none, and is echoed with an empty one, which
Kimi accepts), followed by ``GLEAN_PROMPT``. Each later answer holds only the items the earlier
ones missed; the row stops early when a pass adds no item that agrees with none of the earlier
passes' items (``merge_fields.new_items``: the key fields of ``dedupe_on``, else every field).

**The result store**, pass by pass: the first pass is stored under the row's usual key (a run with
``passes=1`` and a run with ``passes=2`` share it); pass ``k`` under ``pass_key``: the row's key
material plus the raw answers of passes ``1..k-1`` and the follow-up prompt. Each pass is
committed as soon as it is valid, so a run killed between passes resumes with the passes it has
(served, no request) and sends only the missing ones; the same earlier answers give the same key
in every process.

A later pass that fails (an error, the budget) leaves the row with the passes before it and the
error in ``kx_error`` (``"pass 2 of 3: ..."``); a rerun asks that pass again. Every pass's usage
is the row's (``RowResult.passes`` keeps each one's: the run summary shows the cost per pass).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from pydantic import BaseModel

from ..exceptions import StoreError
from ..records import PassResult, RowInput, RowResult, Usage
from .merge import new_items
from .store_base import Store

logger = logging.getLogger("kimi_extract")

#: The follow-up message of every later pass.
GLEAN_PROMPT = (
    "Read the input again for list items that your previous answers missed. Reply with the "
    "same JSON object, where every list holds only items that are in none of your previous "
    "answers ([] when none is missing) and every other field is as before."
)


class Runner(Protocol):
    """What ``glean`` needs of ``conversation.RowRunner``."""

    settings: Any
    store: Store | Any | None

    def stop_starting(self, exc: BaseException) -> None: ...

    def serve_stored(self, stored: Any, result: RowResult) -> bool: ...

    async def turn(
        self, turns: list[dict[str, Any]], result: RowResult
    ) -> tuple[BaseModel, str, dict[str, Any]] | None: ...

    async def ground(self, row: RowInput, result: RowResult, raw: str | None) -> None: ...


def glean_message() -> dict[str, Any]:
    """The user message that asks for the missed items."""
    return {"role": "user", "content": GLEAN_PROMPT}


def pass_key(settings: Any, user: dict[str, Any], raws: list[str]) -> str:
    """The store key of the pass that follows the answers ``raws`` (module docstring)."""
    return str(
        settings.store_key(
            {
                "role": "user",
                "content": user["content"],
                "glean_previous_answers": list(raws),
                "glean_prompt": GLEAN_PROMPT,
            }
        )
    )


def _echo(raw: str) -> dict[str, Any]:
    """A stored answer as a history message (its reasoning is not stored)."""
    return {"role": "assistant", "content": raw, "reasoning_content": ""}


async def glean(
    runner: Runner,
    row: RowInput,
    user: dict[str, Any],
    result: RowResult,
    raw: str,
    reply: dict[str, Any] | None,
) -> None:
    """Run the row's later passes after its valid first answer (``raw``; ``reply``: the
    assistant message it came in, None when served from the store); fills ``result.passes``
    and adds every pass's usage to the row (module docstring)."""
    gleaning = row.gleaning
    if gleaning is None or result.value is None:
        return
    settings = runner.settings
    first = PassResult(result.value, result.usage, None, result.from_store, result.spans)
    result.passes = [first]
    history = [user, reply or _echo(raw)]
    raws = [raw]
    dumps = [result.value.model_dump()]
    ask = glean_message()
    for number in range(2, gleaning.passes + 1):
        part = RowResult(label=row.label, position=row.position)
        key = pass_key(settings, user, raws) if runner.store is not None else None
        stale = False
        served = False
        if key is not None and runner.store is not None:
            try:
                stored = await runner.store.lookup(key)
            except StoreError as exc:
                runner.stop_starting(exc)
                result.error = f"pass {number} of {gleaning.passes}: {exc}"
                return
            served = runner.serve_stored(stored, part)
            stale = stored is not None and not served
        if served:
            assert part.value is not None and stored is not None
            value, answer, message = part.value, stored.output, _echo(stored.output)
        else:
            done = await runner.turn([*history, ask], part)
            if done is None:
                _add(result, part)
                result.error = f"pass {number} of {gleaning.passes}: {part.error}"
                return
            value, answer, message = done
            if key is not None and runner.store is not None:
                try:
                    await runner.store.commit(
                        key,
                        model=settings.model,
                        output=answer,
                        usage=part.usage,
                        attempts=part.attempts,
                        web_searches=part.web_searches,
                        replace=stale,
                    )
                except StoreError as exc:  # the pass counts; the run stops after this row
                    runner.stop_starting(exc)
        part.value = value
        if settings.grounding:
            await runner.ground(row, part, answer)
        _add(result, part)
        dump = value.model_dump()
        added = new_items(dumps, dump, gleaning.dedupe_on)
        result.passes.append(PassResult(value, part.usage, added, part.from_store, part.spans))
        if added == 0:
            return  # nothing new: a further pass would not find more
        history += [ask, message]
        raws.append(answer)
        dumps.append(dump)


def _add(result: RowResult, part: RowResult) -> None:
    """A later pass's accounting, added to the row's."""
    result.usage = result.usage + part.usage
    result.attempts += part.attempts
    result.latency_s += part.latency_s
    result.web_searches += part.web_searches
    if part.saved is not None:
        result.saved = (result.saved or Usage()) + part.saved
    result.from_store = result.from_store and part.from_store
