"""The aiohttp application: routes, the chat-completions pipeline, history and counters.

A chat request goes through, in order: auth (401) -> JSON parse (400) -> model (404) -> the
reference's request schema (400) -> Kimi's rules: MFJS, kimi-k3 parameters, tools, tool history
(400) -> context window (400) -> admission: concurrency, RPM, overload, quota (429) -> the responder
-> the answer, cut to the output budget -> TPM (429) -> seeded faults -> the prefix cache -> latency
-> the JSON response or SSE stream. Only a completed 200 is billed and commits its cache writes.

Everything here runs on the simulator's event-loop thread; ``lock`` guards what other threads read
(history, counters) and what ``Simulator.reset`` clears.
"""

from __future__ import annotations

import asyncio
import json
import random
import threading
import time
from collections import Counter, deque
from typing import Any

from aiohttp import web

from ..kimi import CONTEXT_WINDOW, DEFAULT_CACHE_TTL, MODELS
from . import answers, completion, rules, validation
from .cache import Lookup, PrefixCache
from .config import Responder, SimAnswer, SimulatorConfig
from .limits import Latency, SimLimits, cost_usd, draw_faults
from .prompt import Prompt, build_prompt, schema_text
from .protocol import (
    Reply,
    SimError,
    SimExchange,
    SimRequest,
    default_error_type,
    error_body,
    invalid_request,
    user_text,
)
from .quality import quality_model
from .recall import KeyIndex
from .streaming import send_json, send_stream

#: Larger request bodies get a 413 in the API's error shape.
_MAX_BODY_BYTES = 256 * 1024 * 1024


def _bucket_add(tokens: Counter[str], usage: dict[str, Any]) -> None:
    details = usage.get("prompt_tokens_details") or {}
    tokens["prompt"] += usage.get("prompt_tokens", 0)
    tokens["cached"] += details.get("cached_tokens", 0)
    tokens["cache_write"] += details.get("cache_write_tokens", 0)
    tokens["completion"] += usage.get("completion_tokens", 0)
    tokens["reasoning"] += (usage.get("completion_tokens_details") or {}).get("reasoning_tokens", 0)


class Service:
    """State and handlers of one simulator."""

    def __init__(self, config: SimulatorConfig, responder: Responder | None = None) -> None:
        self.config = config
        self.responder = responder
        self.lock = threading.Lock()
        self.cache = PrefixCache(
            config.clock,
            config.cache_block_tokens,
            config.cache_min_tokens,
            config.cache_refresh_on_read,
        )
        self.limits = SimLimits(
            config.clock,
            random.Random(f"overload-{config.seed}"),
            max_concurrency=config.max_concurrency,
            rpm=config.rpm,
            tpm=config.tpm,
            retry_after_header=config.retry_after_header,
            overload_rate=config.overload_rate,
            quota_usd=config.quota_usd,
            rate_shape=config.rate_shape,
            window_s=config.window_s,
            burst_s=config.burst_s,
            spurious_429_rate=config.spurious_429_rate,
            seed=config.seed,
        )
        self.latency = Latency(
            config.ttft_s,
            shape=config.latency,
            median_s=config.latency_median_s,
            p99_s=config.latency_p99_s,
            seed=config.seed,
        )
        self.fault_rng = random.Random(f"faults-{config.seed}")
        self.fault_rates = config.faults.rates()
        #: How answers to rows with an answer key go wrong (``quality``); None: keys ignored.
        self.quality = quality_model(config.quality)
        #: Registered located answer keys (``recall``), or None.
        self.answer_keys = KeyIndex(config.answer_keys) if config.answer_keys else None
        self._bearer = f"Bearer {config.api_key}"
        self._id_prefix = f"{random.Random(config.seed).getrandbits(40):010x}"
        #: USD per 1M tokens by model: the ``pricing`` option, else the model table's prices.
        self._pricing: dict[str, dict[str, float] | None] = {
            name: config.pricing
            if config.pricing is not None
            else (
                {k: v for k, v in vars(info.pricing).items() if v is not None}
                if info.pricing is not None
                else None
            )
            for name, info in MODELS.items()
        }
        self.open_requests = 0
        self.reset()

    def reset(self) -> None:
        """Clear history, counters, cache, rate windows and spend.

        Requests still in flight keep counting as in flight (and finish into the new counters).
        """
        with self.lock:
            self.history: deque[SimExchange] = deque(maxlen=self.config.history_limit)
            self.request_count = 0
            self.by_status: Counter[str] = Counter()
            self.by_error_type: Counter[str] = Counter()
            self.by_fault: Counter[str] = Counter()
            self.tokens: Counter[str] = Counter()
            self.cache_counts: Counter[str] = Counter()
            self.peak_requests = self.open_requests
            self.cache.clear()
            self.limits.reset()
            #: How many times each request (by its seed) was answered from a registered key.
            self._samples: dict[int, int] = {}

    def stats(self) -> dict[str, Any]:
        """The counters, as ``GET /stats`` returns them."""
        with self.lock:
            return {
                "requests": self.request_count,
                "by_status": dict(self.by_status),
                "by_error_type": dict(self.by_error_type),
                "by_fault": dict(self.by_fault),
                "tokens": {
                    key: self.tokens[key]
                    for key in ("prompt", "cached", "cache_write", "completion", "reasoning")
                },
                "cache": {
                    "hits": self.cache_counts["hits"],
                    "writes": self.cache_counts["writes"],
                    "entries": len(self.cache),
                },
                "in_flight": self.open_requests,
                "in_flight_peak": self.peak_requests,
                "spend_usd": round(self.limits.spend_usd, 9),
            }

    def make_app(self) -> web.Application:
        """The aiohttp application."""
        app = web.Application(client_max_size=_MAX_BODY_BYTES)
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/chat/completions", self.chat)
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/models", self.models)
        app.router.add_get("/stats", self.stats_route)
        app.router.add_route("*", "/{tail:.*}", self.not_found)
        return app

    # -- bookkeeping -------------------------------------------------------------------------

    def _arrive(self, request: web.Request) -> SimExchange:
        headers = dict(request.headers)
        if headers.pop("Authorization", None) is None and "Authorization" in request.headers:
            # another spelling of the name (header lookups ignore case)
            headers = {k: v for k, v in headers.items() if k.lower() != "authorization"}
        with self.lock:
            exchange = SimExchange(
                index=self.request_count,
                t_start=time.monotonic(),
                method=request.method,
                path=request.path,
                headers=headers,
            )
            self.history.append(exchange)
            self.request_count += 1
            self.open_requests += 1
            self.peak_requests = max(self.peak_requests, self.open_requests)
        return exchange

    def _finish(
        self,
        exchange: SimExchange,
        status: int | None,
        error_type: str | None = None,
        response: dict[str, Any] | None = None,
    ) -> None:
        with self.lock:
            exchange.t_end = time.monotonic()
            exchange.status = status
            exchange.error_type = error_type
            exchange.response = response
            self.open_requests -= 1
            self.by_status[str(status)] += 1
            if error_type:
                self.by_error_type[error_type] += 1
            for fault in (exchange.fault or "").split(","):
                if fault:
                    self.by_fault[fault] += 1

    def _authorized(self, request: web.Request) -> bool:
        return request.headers.get("Authorization", "") == self._bearer

    def _error_response(self, exchange: SimExchange, error: SimError) -> web.Response:
        body = error.body()
        self._finish(exchange, error.status, error.error_type, body)
        # Errors carry a request id too, so a client can quote it (as Kimi's gateway does).
        request_id = f"req-{self._id_prefix}{exchange.index:06x}"
        headers = {"x-request-id": request_id, **(error.headers or {})}
        return web.json_response(body, status=error.status, headers=headers)

    # -- routes ------------------------------------------------------------------------------

    async def not_found(self, request: web.Request) -> web.Response:
        """Unknown path -> 404 JSON error."""
        exchange = self._arrive(request)
        return self._error_response(
            exchange,
            SimError(
                404, "resource_not_found_error", f"Not found: {request.method} {request.path}"
            ),
        )

    async def stats_route(self, request: web.Request) -> web.Response:
        """GET /stats -> the counters (no auth: a local test aid); ``in_flight`` leaves out this
        request itself."""
        exchange = self._arrive(request)
        data = self.stats()
        data["in_flight"] -= 1
        self._finish(exchange, 200, None, data)
        return web.json_response(data)

    async def models(self, request: web.Request) -> web.Response:
        """GET /v1/models -> the three models."""
        exchange = self._arrive(request)
        if not self._authorized(request):
            return self._error_response(exchange, _unauthorized())
        data = {
            "object": "list",
            "data": [
                {"id": name, "object": "model", "created": 0, "owned_by": "moonshot"}
                for name in MODELS
            ],
        }
        self._finish(exchange, 200, None, data)
        return web.json_response(data)

    async def chat(self, request: web.Request) -> web.StreamResponse:
        """POST /v1/chat/completions.

        Every way out finishes the exchange once (``finally``), so ``in_flight`` always returns
        to 0; an exception the pipeline did not expect still answers in the API's error shape.
        """
        exchange = self._arrive(request)
        try:
            return await self._chat(request, exchange)
        except SimError as error:
            return self._error_response(exchange, error)
        except RecursionError:
            return self._error_response(exchange, _too_deep())
        except Exception as exc:  # a simulator bug: say so in the API's error shape, never HTML
            return self._error_response(
                exchange,
                SimError(500, "server_error", f"simulator error: {type(exc).__name__}: {exc}"),
            )
        finally:
            if exchange.t_end is None:  # cancelled, or ended by an unexpected BaseException
                self._finish(exchange, None)

    async def _chat(self, request: web.Request, exchange: SimExchange) -> web.StreamResponse:
        if not self._authorized(request):
            raise _unauthorized()
        try:
            raw = await request.read()
        except web.HTTPRequestEntityTooLarge:
            raise SimError(
                413,
                "invalid_request_error",
                f"Invalid request: the request body is larger than {_MAX_BODY_BYTES} bytes",
            ) from None
        body = parse_body(raw)
        exchange.body = body
        exchange.stream = body.get("stream") is True
        try:
            rules.check_model(body)
            validation.validate_body(body)
            schema = schema_text(body)
            rules.check_request(body, schema, self.config.schema_level)
            completion.check_answerable(body, schema)
            prompt = build_prompt(body, schema)
        except RecursionError:
            raise _too_deep() from None
        except SimError:
            raise
        except Exception as exc:  # a check tripped over a malformed body: still that body's 400
            raise invalid_request(
                f"the request body could not be read ({type(exc).__name__}: {exc})"
            ) from None
        if prompt.tokens > CONTEXT_WINDOW:
            raise invalid_request(
                f"Your request exceeded model token limit: {CONTEXT_WINDOW} "
                f"(prompt tokens: {prompt.tokens})"
            )
        with self.lock:
            self.limits.admit()
        try:
            return await self._answer(request, exchange, body, prompt)
        finally:
            with self.lock:
                self.limits.release()

    def _call_responder(self, exchange: SimExchange, body: dict[str, Any]) -> Reply | None:
        responder = self.responder
        if responder is None:
            return None
        response_format = body.get("response_format") or {}
        sim_request = SimRequest(
            body=body,
            index=exchange.index,
            model=body["model"],
            messages=body["messages"],
            user_text=user_text(body["messages"]),
            schema=(response_format.get("json_schema") or {}).get("schema"),
            headers=exchange.headers,
        )
        try:
            result = responder(sim_request)
        except Exception as exc:  # a broken responder is the test's bug: answer 500, record it
            exchange.fault = "responder_error"
            raise SimError(
                500, "server_error", f"simulator responder raised {type(exc).__name__}: {exc}"
            ) from None
        if result is None or isinstance(result, Reply):
            return result
        if isinstance(result, str | dict | list):
            return Reply(content=result)
        raise SimError(
            500,
            "server_error",
            f"simulator responder returned {type(result).__name__}; expected None, str, dict "
            "or Reply",
        )

    async def _answer(
        self, request: web.Request, exchange: SimExchange, body: dict[str, Any], prompt: Prompt
    ) -> web.StreamResponse:
        reply = self._call_responder(exchange, body)
        if reply is not None and reply.status != 200:
            return await self._scripted_error(request, exchange, reply)
        answer = self._prepare(body, prompt, reply)
        exchange.fault = ",".join(answer.faults) or None
        if "slow_first_byte" in answer.faults:
            await asyncio.sleep(self.config.slow_first_byte_s)
        if answer.delay_s > 0:
            await asyncio.sleep(answer.delay_s)
        if "500" in answer.faults:
            raise SimError(
                500,
                "server_error",
                "The server had an error while processing your request, please retry",
            )
        if "reset" in answer.faults:
            _drop(request)
            self._finish(exchange, None)
            return web.Response()
        if "hang" in answer.faults:
            await asyncio.sleep(3600)
        sender = send_stream if exchange.stream else send_json
        completed: list[bool] = []

        def complete() -> None:
            completed.append(True)
            self._complete(exchange, answer, body)

        response, done = await sender(request, self.config, answer, complete)
        if not completed:  # cut mid-way or the client went away: not billed, nothing cached
            self._finish(exchange, response.status if response.prepared else None)
        return response

    def _prepare(self, body: dict[str, Any], prompt: Prompt, reply: Reply | None) -> SimAnswer:
        model = body["model"]
        seed = answers.request_seed(body, prompt.schema_text)
        sample = 0
        if self.answer_keys:  # a repeat of a request draws anew (recall)
            with self.lock:
                sample = self._samples.get(seed, 0)
                self._samples[seed] = sample + 1
        outcome = completion.compose(
            body,
            seed,
            reply,
            prompt.schema_text,
            answers_mode=self.config.answers,
            perturb=self.config.perturb,
            perturb_kinds=self.config.perturb_kinds,
            quote_faults=self.config.quote_faults,
            quality=self.quality,
            keys=self.answer_keys,
            sample=sample,
        )
        if reply is None or reply.finish_reason is None:
            outcome = completion.fit(outcome, completion.output_budget(body, prompt.tokens))
        total, _ = outcome.completion_tokens()
        config = self.config
        with self.lock:
            try:
                self.limits.charge_tokens(prompt.tokens + total)
            except SimError:
                self.limits.uncount()
                raise
            faults = []
            if self.fault_rates.any():
                faults = draw_faults(
                    self.fault_rng,
                    self.fault_rates,
                    stream=body.get("stream") is True,
                    json_content=outcome.json_content,
                )
        if reply is not None and reply.fault:
            faults.append(reply.fault)
        if "invalid_json" in faults:
            outcome = completion.break_json(outcome, random.Random(seed))
        elif "truncate" in faults:
            outcome = completion.truncate(outcome)
        total, reasoning = outcome.completion_tokens()
        ttl = (body.get("prompt_cache_options") or {}).get("ttl", DEFAULT_CACHE_TTL)
        lookup = Lookup()
        if prompt.tokens > config.cache_min_tokens:
            units = prompt.units()
            with self.lock:
                lookup = self.cache.lookup(model, units, ttl)
        writes = lookup.write_tokens if MODELS[model].separate_cache_writes else 0
        usage = completion.usage_dict(prompt.tokens, total, reasoning, lookup.cached_tokens, writes)
        if reply is not None and reply.usage is not None:
            usage = reply.usage
        with self.lock:
            delay = self.latency.draw()
        if config.tokens_per_s and not body.get("stream"):
            delay += total / config.tokens_per_s
        if reply is not None:
            delay += reply.delay
        created = int(time.time())
        response_id = f"chatcmpl-{self._id_prefix}{seed & 0xFFFFFFFF:08x}{self.request_count:06x}"
        response = completion.completion_body(response_id, created, model, outcome, usage)
        headers = {"x-request-id": response_id, **((reply.headers if reply else None) or {})}
        return SimAnswer(response, outcome, usage, lookup, headers, faults, delay, ttl, body)

    def _complete(self, exchange: SimExchange, answer: SimAnswer, body: dict[str, Any]) -> None:
        """A 200 fully sent: commit cache writes, bill, count."""
        model = body["model"]
        info = MODELS[model]
        pricing = self._pricing[model]
        with self.lock:
            self.cache.commit(answer.lookup)
            if pricing:
                self.limits.bill(
                    cost_usd(
                        answer.usage,
                        pricing,
                        separate_writes=info.separate_cache_writes,
                        ttl=answer.ttl,
                    )
                )
            _bucket_add(self.tokens, answer.usage)
            if answer.lookup.cached_tokens:
                self.cache_counts["hits"] += 1
            if answer.lookup.pending:
                self.cache_counts["writes"] += 1
            exchange.usage = answer.usage
        self._finish(exchange, 200, None, answer.body)

    async def _scripted_error(
        self, request: web.Request, exchange: SimExchange, reply: Reply
    ) -> web.StreamResponse:
        if reply.delay > 0:
            await asyncio.sleep(reply.delay)
        if reply.fault == "reset":
            exchange.fault = "reset"
            _drop(request)
            self._finish(exchange, None)
            return web.Response()
        if reply.fault == "hang":
            exchange.fault = "hang"
            await asyncio.sleep(3600)
        error_type = reply.error_type or default_error_type(reply.status)
        body = error_body(error_type, reply.error_message or f"simulated {reply.status} error")
        self._finish(exchange, reply.status, error_type, body)
        request_id = f"req-{self._id_prefix}{exchange.index:06x}"
        headers = {"x-request-id": request_id, **(reply.headers or {})}
        return web.json_response(body, status=reply.status, headers=headers)


def parse_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400: not UTF-8, not JSON (``NaN`` / ``Infinity``
    are not JSON), nested too deeply to parse, a lone surrogate escape, or not an object."""
    try:
        body = _DECODER.decode(raw.decode(json.detect_encoding(raw)))
    except RecursionError:
        raise _too_deep() from None
    except ValueError as exc:
        raise invalid_request(f"the request body is not valid JSON: {exc}") from None
    if not isinstance(body, dict):
        raise invalid_request("the request body must be a JSON object at $")
    if b"\\ud" in raw or b"\\uD" in raw:  # only then can a string hold a lone surrogate
        try:
            json.dumps(body, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise invalid_request(
                "the request body is not valid JSON: a \\u escape names a lone UTF-16 surrogate"
            ) from None
        except RecursionError:
            raise _too_deep() from None
    return body


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON value")


#: One decoder for every body (``json.loads`` with an option builds a new one per call).
_DECODER = json.JSONDecoder(parse_constant=_reject_constant)


def _too_deep() -> SimError:
    return invalid_request("the request body is nested too deeply")


def _unauthorized() -> SimError:
    return SimError(401, "invalid_authentication_error", "Invalid Authentication")


def _drop(request: web.Request) -> None:
    """Close the connection without a response (the client sees a connection error)."""
    transport = request.transport
    if transport is not None:
        transport.close()
