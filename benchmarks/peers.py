"""The peers kimi_extract is measured against, written the way their docs suggest.

- ``openai``: ``AsyncOpenAI().chat.completions.parse(response_format=Review)`` per row, with an
  ``asyncio.Semaphore`` bounding the rows in flight (the SDK's default retries: 2).
- ``instructor``: ``instructor.from_openai(AsyncOpenAI(), mode=Mode.JSON_SCHEMA)`` and
  ``chat.completions.create_with_completion(response_model=Review)`` per row, same semaphore
  (instructor's default validation retries on top of the SDK's transport retries).

Both send the same body as kimi_extract (system instructions, the row as the user message,
``reasoning_effort="low"``, ``max_completion_tokens=16384``). A row whose call raises is lost.

- ``aiohttp`` (the floor, section 1): ``RawAiohttpRunner``, the same body posted with aiohttp and
  the answer validated by pydantic, nothing else.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from _common import MAX_COMPLETION_TOKENS, MODEL, REASONING_EFFORT, Review

PEERS = ("openai", "instructor")
#: The floor (section 1 only): raw aiohttp, no library around it.
FLOOR = "aiohttp"


@dataclass
class PeerRun:
    """What one peer run returned: rows ok, errors by type, and each row's API usage."""

    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    #: The usage dict of the last response of each successful row (input order; None = lost).
    usages: list[dict[str, Any] | None] = field(default_factory=list)


def _usage_dict(completion: Any) -> dict[str, Any] | None:
    usage = getattr(completion, "usage", None)
    return usage.model_dump() if usage is not None else None


class OpenAIParseRunner:
    """openai SDK ``.parse`` + ``asyncio.Semaphore``; one client reused across runs."""

    name = "openai"

    def __init__(self, base_url: str, api_key: str, instructions: str) -> None:
        import openai

        self.client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=api_key)
        self.instructions = instructions

    async def _one(self, text: str) -> tuple[Any, dict[str, Any] | None]:
        completion = await self.client.chat.completions.parse(
            model=MODEL,
            messages=[
                {"role": "system", "content": self.instructions},
                {"role": "user", "content": text},
            ],
            response_format=Review,
            reasoning_effort=REASONING_EFFORT,  # type: ignore[arg-type]
            max_completion_tokens=MAX_COMPLETION_TOKENS,
        )
        parsed = completion.choices[0].message.parsed
        if parsed is None:
            raise ValueError("no parsed answer")
        return parsed, _usage_dict(completion)

    async def run(self, texts: list[str], concurrency: int) -> PeerRun:
        return await _gather(self._one, texts, concurrency)

    async def close(self) -> None:
        await self.client.close()


class InstructorRunner:
    """instructor ``Mode.JSON_SCHEMA`` + ``asyncio.Semaphore``; one client reused across runs."""

    name = "instructor"

    def __init__(self, base_url: str, api_key: str, instructions: str) -> None:
        import instructor
        import openai

        self.openai = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key=api_key)
        self.client = instructor.from_openai(self.openai, mode=instructor.Mode.JSON_SCHEMA)
        self.instructions = instructions

    async def _one(self, text: str) -> tuple[Any, dict[str, Any] | None]:
        value, completion = await self.client.chat.completions.create_with_completion(
            model=MODEL,
            messages=[
                {"role": "system", "content": self.instructions},
                {"role": "user", "content": text},
            ],
            response_model=Review,
            reasoning_effort=REASONING_EFFORT,
            max_completion_tokens=MAX_COMPLETION_TOKENS,
        )
        return value, _usage_dict(completion)

    async def run(self, texts: list[str], concurrency: int) -> PeerRun:
        return await _gather(self._one, texts, concurrency)

    async def close(self) -> None:
        await self.openai.close()


class RawAiohttpRunner:
    """The floor: aiohttp posting a prebuilt body, ``json.loads``, ``Review.model_validate_json``.

    No retries, limiter, accounting, store or frame; what any client must at least spend.
    ``session_per_run``: open (and close) the session inside each run, as every
    ``Extractor.run`` does, so its connects are counted in the run like ours; otherwise one
    session is kept across runs.
    """

    name = "aiohttp"

    def __init__(
        self, base_url: str, api_key: str, instructions: str, *, session_per_run: bool = False
    ) -> None:
        self.session_per_run = session_per_run
        self.url = base_url + "/v1/chat/completions"
        self.headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
        self.instructions = instructions
        self.response_format = {
            "type": "json_schema",
            "json_schema": {"name": "Review", "strict": True, "schema": Review.model_json_schema()},
        }
        self.session: Any = None

    async def _one(self, text: str) -> tuple[Any, dict[str, Any] | None]:
        body = {
            "model": MODEL,
            "messages": [
                {"role": "system", "content": self.instructions},
                {"role": "user", "content": text},
            ],
            "response_format": self.response_format,
            "reasoning_effort": REASONING_EFFORT,
            "max_completion_tokens": MAX_COMPLETION_TOKENS,
        }
        async with self.session.post(self.url, data=json.dumps(body).encode()) as response:
            data = json.loads(await response.read())
        if response.status != 200:
            raise RuntimeError(f"HTTP {response.status}")
        value = Review.model_validate_json(data["choices"][0]["message"]["content"])
        return value, data.get("usage")

    async def run(self, texts: list[str], concurrency: int) -> PeerRun:
        import aiohttp

        if self.session is None or self.session.connector.limit != concurrency:
            await self.close()
            connector = aiohttp.TCPConnector(limit=concurrency)
            self.session = aiohttp.ClientSession(headers=self.headers, connector=connector)
        try:
            return await _gather(self._one, texts, concurrency)
        finally:
            if self.session_per_run:
                await self.close()

    async def close(self) -> None:
        if self.session is not None:
            await self.session.close()
            self.session = None


async def _gather(one: Any, texts: list[str], concurrency: int) -> PeerRun:
    """Every row as a task, at most ``concurrency`` in flight (the usual asyncio pattern)."""
    semaphore = asyncio.Semaphore(concurrency)
    result = PeerRun(usages=[None] * len(texts))

    async def row(position: int, text: str) -> None:
        async with semaphore:
            try:
                _, usage = await one(text)
            except Exception as exc:  # a lost row; counted by error type
                result.errors[type(exc).__name__] += 1
                return
        result.ok += 1
        result.usages[position] = usage

    await asyncio.gather(*(row(i, text) for i, text in enumerate(texts)))
    return result


def make_runner(name: str, base_url: str, api_key: str, instructions: str, **options: Any) -> Any:
    """The runner for peer ``name`` ("openai", "instructor" or the floor ``FLOOR``); ``options``
    go to the floor's runner."""
    if name == "openai":
        return OpenAIParseRunner(base_url, api_key, instructions)
    if name == "instructor":
        return InstructorRunner(base_url, api_key, instructions)
    if name == FLOOR:
        return RawAiohttpRunner(base_url, api_key, instructions, **options)
    raise ValueError(f"unknown peer {name!r}; expected one of {PEERS}")
