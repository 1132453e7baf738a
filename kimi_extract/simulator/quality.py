"""A model of answer quality: right answers from a row's answer key, wrong at configured rates.

The simulator cannot read. To make accuracy measurable offline, a row's text may carry its right
answer, an **answer key**: a line ``kx-answer-key: {...}`` (the JSON of the answer, as
``with_answer_key(text, answer)`` writes it). When the last user message of a ``json_schema``
request holds one, the simulated model answers from the key instead of making values up, and
makes mistakes in it at the rates its ``QualityModel`` sets for the request's model and reasoning
effort. A row without a key is answered as before (placeholder values), so nothing changes for
requests that carry none.

**Error kinds** (``ERROR_KINDS``), each a per-value rate in ``ErrorRates``:

- ``wrong_number``: an integer moved by 1, 2 or 10 (above any minimum), a number scaled by 0.5,
  0.9, 1.1, 2 or 10;
- ``changed_date``: a date (``YYYY-MM-DD``, or the date of a date-time) moved 1 to 28 days;
- ``typo``: one letter or digit in the middle of a text replaced (so it differs after case and
  width are normalized);
- ``wrong_enum``: another member of the enum, or the other boolean;
- ``dropped_item``: a list item left out (per item, keeping any ``minItems``);
- ``invented_item``: one item the key does not have, made up from the item schema (per list,
  within any ``maxItems``);
- ``null_value``: a value the key has left out: ``null`` where the schema allows it, an empty
  text for a text that cannot be null.

Each value is tested with each rate that applies to it (null first; then its own kind); lists
test every item for ``dropped_item`` and once for ``invented_item``. Draws come from a
``random.Random`` seeded from the request seed (a hash of the model, the effort and the request
content: ``answers.request_seed``), so the same row gets the same answer every time and two
candidates (another model or effort) make independent mistakes. Properties the key lacks are
filled with the generated placeholder values; keys the schema lacks are dropped.

``QualityModel.illustrative()`` (the simulator's default) holds made-up rates chosen to show the
trade-offs a comparison is about: more effort, fewer mistakes (and, as always in the simulator,
more reasoning tokens); the previous generation makes more; each model keeps its own price. They
are an illustration, not a measurement of Kimi.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from datetime import date, timedelta
from typing import Any

from ..exceptions import ConfigurationError
from .protocol import message_text
from .recall import UNSEEN, KeyIndex, Recall, located, previous_answers, read
from .values import constraints_of, json_value

__all__ = ["ErrorRates", "QualityModel", "with_answer_key"]

#: The mistakes the quality model makes, in the order of ``ErrorRates``' fields.
ERROR_KINDS = (
    "wrong_number",
    "changed_date",
    "typo",
    "wrong_enum",
    "dropped_item",
    "invented_item",
    "null_value",
)
#: What starts a row's answer key in its text; the answer's JSON follows.
ANSWER_KEY = "kx-answer-key:"
_DATE = re.compile(r"^(\d{4}-\d{2}-\d{2})(?=$|[T ])")
_DECODER = json.JSONDecoder()


@dataclass(frozen=True)
class ErrorRates:
    """Per-value rates (0..1) of each mistake kind (``ERROR_KINDS``; module docstring)."""

    wrong_number: float = 0.0
    changed_date: float = 0.0
    typo: float = 0.0
    wrong_enum: float = 0.0
    dropped_item: float = 0.0
    invented_item: float = 0.0
    null_value: float = 0.0

    def __post_init__(self) -> None:
        for kind in fields(self):
            rate = getattr(self, kind.name)
            if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
                raise ConfigurationError(
                    f"ErrorRates.{kind.name} must be a rate in [0, 1], got {rate!r}"
                )

    @classmethod
    def uniform(cls, rate: float) -> ErrorRates:
        """Every kind at ``rate``."""
        return cls(**dict.fromkeys(ERROR_KINDS, rate))

    def scaled(self, factor: float) -> ErrorRates:
        """Every rate times ``factor`` (capped at 1)."""
        return ErrorRates(**{k: min(1.0, getattr(self, k) * factor) for k in ERROR_KINDS})


#: The illustrative rates of ``kimi-k3.1-pro`` at ``reasoning_effort="low"``.
ILLUSTRATIVE_BASE = ErrorRates(
    wrong_number=0.06,
    changed_date=0.05,
    typo=0.04,
    wrong_enum=0.05,
    dropped_item=0.08,
    invented_item=0.04,
    null_value=0.05,
)
#: Illustrative: each step of effort halves the mistakes.
ILLUSTRATIVE_EFFORT = {"low": 1.0, "high": 0.5, "max": 0.25}
#: Illustrative, per model (times the base): the highspeed variant is the same model served
#: faster (the API reference: "Same parameters as Pro, faster generation"), so it errs as often
#: at twice the price; kimi-k3, the previous generation (max effort only), errs more.
ILLUSTRATIVE_MODELS = {
    "kimi-k3.1-pro": (1.0, ("low", "high", "max")),
    "kimi-k3.1-pro-highspeed": (1.0, ("low", "high", "max")),
    "kimi-k3": (1.6, ("max",)),
}


#: The illustrative recall of ``kimi-k3.1-pro`` at low effort on long lists (``recall``): a first
#: answer finds 90 % of the items it can see and stops after 40 items of one list; a follow-up
#: finds 75 % of the rest; a look-alike (a page subtotal) is taken for a value not in the text
#: one time in three. Made up to show what passes and merging are for, not measured on Kimi.
ILLUSTRATIVE_RECALL = Recall(found=0.9, later=0.75, max_items=40, decoy=1 / 3)


@dataclass(frozen=True)
class QualityModel:
    """The error rates of each (model, reasoning effort); ``default`` for any other pair.

    ``QualityModel({("kimi-k3.1-pro", "low"): ErrorRates(typo=0.1)})``; efforts are the
    normalized ones (low, high, max; an omitted effort is max, as on the server).
    """

    rates: Mapping[tuple[str, str], ErrorRates] = field(default_factory=dict)
    default: ErrorRates = field(default_factory=ErrorRates)
    #: How much of a long list one answer finds, per (model, effort), for located keys
    #: (``recall``); ``default_recall`` for any other pair (the default finds everything).
    recall: Mapping[tuple[str, str], Recall] = field(default_factory=dict)
    default_recall: Recall = field(default_factory=Recall)

    def __post_init__(self) -> None:
        for key, recall in self.recall.items():
            if not isinstance(recall, Recall):
                raise ConfigurationError(
                    f"QualityModel recall[{key!r}] must be a Recall, got {recall!r}"
                )
        for key, rates in self.rates.items():
            pair = isinstance(key, tuple) and len(key) == 2
            if not (pair and all(isinstance(k, str) for k in key)):
                raise ConfigurationError(
                    f"QualityModel rates are keyed by (model, effort), got {key!r}"
                )
            if not isinstance(rates, ErrorRates):
                raise ConfigurationError(
                    f"QualityModel rates[{key!r}] must be ErrorRates, got {rates!r}"
                )

    def rates_for(self, model: str, effort: str) -> ErrorRates:
        """The rates of ``model`` at ``effort``."""
        return self.rates.get((model, effort), self.default)

    def recall_for(self, model: str, effort: str) -> Recall:
        """How much of a long list ``model`` at ``effort`` finds per answer."""
        return self.recall.get((model, effort), self.default_recall)

    @classmethod
    def illustrative(cls) -> QualityModel:
        """The simulator's default rates (module docstring): a documented illustration."""
        pairs = [
            (model, effort, factor * ILLUSTRATIVE_EFFORT[effort])
            for model, (factor, efforts) in ILLUSTRATIVE_MODELS.items()
            for effort in efforts
        ]
        return cls(
            {(model, effort): ILLUSTRATIVE_BASE.scaled(f) for model, effort, f in pairs},
            default=ILLUSTRATIVE_BASE,
            recall={(model, effort): ILLUSTRATIVE_RECALL.scaled(f) for model, effort, f in pairs},
            default_recall=ILLUSTRATIVE_RECALL,
        )


def quality_model(quality: QualityModel | str | None) -> QualityModel | None:
    """``Simulator(quality=...)``: "illustrative", "exact" (keys answered without mistakes), a
    ``QualityModel``, or None / "off" (answer keys ignored); else ``ConfigurationError``."""
    if quality is None or isinstance(quality, QualityModel):
        return quality
    if quality == "off":
        return None
    if quality == "illustrative":
        return QualityModel.illustrative()
    if quality == "exact":
        return QualityModel()
    raise ConfigurationError(
        f"quality must be 'illustrative', 'exact', 'off' (or None) or a QualityModel, got "
        f"{quality!r}"
    )


def with_answer_key(text: str, answer: Any) -> str:
    """``text`` followed by the answer key the simulator answers from (module docstring).

    ``answer``: a Pydantic model instance or a JSON-ready value (dates as ISO text).
    """
    if hasattr(answer, "model_dump"):
        answer = answer.model_dump(mode="json")
    key = json.dumps(answer, ensure_ascii=False, separators=(", ", ": "))
    return f"{text}\n\n{ANSWER_KEY} {key}"


def answer_key(text: str) -> Any:
    """The answer key of a text (its last ``kx-answer-key:`` line), or None without one."""
    at = text.rfind(ANSWER_KEY)
    if at < 0:
        return None
    start = at + len(ANSWER_KEY)
    while start < len(text) and text[start] in " \t":
        start += 1
    try:
        value, _ = _DECODER.raw_decode(text, start)
    except ValueError:
        return None
    return value


@dataclass(frozen=True)
class Mistake:
    """One mistake made: where (a path like ``lines[1].quantity``) and which kind."""

    path: str
    kind: str


class _Corrupter:
    """Walks an answer key along its schema, making mistakes at ``rates``."""

    def __init__(self, schema: Any, rates: ErrorRates, rng: random.Random, words: list[str]):
        self.defs = {}
        if isinstance(schema, dict):
            for name in ("definitions", "$defs"):
                if isinstance(schema.get(name), dict):
                    self.defs.update(schema[name])
        self.root = schema
        self.rates = rates
        self.rng = rng
        self.words = words
        self.mistakes: list[Mistake] = []

    def hit(self, kind: str, path: str) -> bool:
        rate = getattr(self.rates, kind)
        if rate and self.rng.random() < rate:
            self.mistakes.append(Mistake(path, kind))
            return True
        return False

    def resolve(self, node: Any, depth: int = 0) -> Any:
        while isinstance(node, dict) and isinstance(node.get("$ref"), str) and depth < 32:
            ref = node["$ref"]
            node = self.root if ref in ("#", "") else self.defs.get(ref.rsplit("/", 1)[-1], {})
            depth += 1
        return node if isinstance(node, dict) else {}

    def branch(self, node: dict[str, Any], value: Any) -> tuple[dict[str, Any], bool]:
        """The branch of ``node`` that ``value`` takes, and whether ``node`` allows null."""
        node = self.resolve(node)
        branches = node.get("anyOf") or node.get("oneOf")
        kind = node.get("type")
        if isinstance(branches, list):
            nullable = any(self.resolve(b).get("type") == "null" for b in branches)
            for candidate in branches:
                resolved = self.resolve(candidate)
                if resolved.get("type") != "null" and _fits(resolved, value):
                    return resolved, nullable
            return {}, nullable
        return node, isinstance(kind, list) and "null" in kind

    def visit(self, node: Any, value: Any, generated: Any, path: str) -> Any:
        if value is None:
            return None
        if value is UNSEEN:  # a located value the request does not show (recall)
            if self.nullable(node):
                return None
            if self.resolve(node).get("type") == "string":
                return ""  # as null_value writes a text that cannot be null
            if generated is not None:
                return generated
            return json_value(self.rng, {**self.resolve(node), "$defs": self.defs}, self.words)
        node, nullable = self.branch(node, value)
        if nullable and self.hit("null_value", path):
            return None
        if isinstance(value, dict):
            return self.mapping(node, value, generated, path)
        if isinstance(value, list):
            return self.array(node, value, path)
        if isinstance(value, bool):
            return (not value) if self.hit("wrong_enum", path) else value
        enum = node.get("enum")
        if isinstance(enum, list) and len(enum) > 1 and value in enum:
            if self.hit("wrong_enum", path):
                return self.rng.choice([member for member in enum if member != value])
            return value
        if isinstance(value, int | float):
            return self.number(node, value, path) if self.hit("wrong_number", path) else value
        if isinstance(value, str):
            found = _DATE.match(value)
            if found is not None:
                return (
                    _shift(value, found.group(1), self.rng)
                    if self.hit("changed_date", path)
                    else value
                )
            if value and not nullable and self.hit("null_value", path):
                return ""
            return _typo(value) if value and self.hit("typo", path) else value
        return value

    def mapping(
        self, node: dict[str, Any], value: dict[str, Any], generated: Any, path: str
    ) -> dict[str, Any]:
        properties = node.get("properties")
        if not isinstance(properties, dict):  # a dict[K, V] or a free object: values only
            extra = node.get("additionalProperties")
            sub = extra if isinstance(extra, dict) else {}
            return {
                k: self.visit(sub, v, None, f"{path}.{k}" if path else k) for k, v in value.items()
            }
        filler = generated if isinstance(generated, dict) else {}
        out: dict[str, Any] = {}
        for name, sub in properties.items():
            where = f"{path}.{name}" if path else name
            if name in value:
                out[name] = self.visit(sub, value[name], filler.get(name), where)
            elif name in filler:
                out[name] = filler[name]
        return out

    def array(self, node: dict[str, Any], value: list[Any], path: str) -> list[Any]:
        limits = constraints_of(node)
        least = int(limits.get("min items", 0))
        most = int(limits.get("max items", 10**9))
        items = node.get("items", {})
        kept: list[Any] = []
        for number, item in enumerate(value):
            where = f"{path}[{number}]"
            if len(kept) + len(value) - number > least and self.hit("dropped_item", where):
                continue
            kept.append(self.visit(items, item, self.filler(items, item), where))
        if len(kept) < most and self.hit("invented_item", f"{path}[]"):
            schema = {**self.resolve(items), "$defs": self.defs}
            key = "quality-item:" + json.dumps(schema, sort_keys=True)  # memoizes its generator
            invented = json_value(self.rng, schema, self.words, key)
            kept.insert(self.rng.randint(0, len(kept)), invented)
        return kept

    def nullable(self, node: Any) -> bool:
        """Whether ``node`` allows null."""
        node = self.resolve(node)
        kind = node.get("type")
        if kind == "null" or (isinstance(kind, list) and "null" in kind):
            return True
        branches = node.get("anyOf") or node.get("oneOf") or []
        return any(self.resolve(b).get("type") == "null" for b in branches)

    def filler(self, node: Any, item: Any) -> Any:
        """Placeholder values for the properties an item of the key lacks or cannot show (a cut
        item of a located key: ``recall``); None for a whole item (no draw is made)."""
        properties = self.resolve(node).get("properties")
        if not isinstance(item, dict) or not isinstance(properties, dict):
            return None
        if all(name in item and item[name] is not UNSEEN for name in properties):
            return None
        schema = {**self.resolve(node), "$defs": self.defs}
        return json_value(self.rng, schema, self.words, "quality-item:" + json.dumps(schema))

    def number(self, node: dict[str, Any], value: int | float, path: str) -> int | float:
        rng = self.rng
        if isinstance(value, int):
            step = rng.choice((1, 2, 10)) * rng.choice((-1, 1))
            minimum = constraints_of(node).get("minimum")
            if isinstance(minimum, int | float) and value + step < minimum:
                step = abs(step)
            return value + step
        changed = round(value * rng.choice((0.5, 0.9, 1.1, 2.0, 10.0)), 2)
        return changed if changed != value else round(value + 1.0, 2)


def _fits(node: dict[str, Any], value: Any) -> bool:
    kind = node.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if isinstance(value, dict):
        return "object" in kinds or "properties" in node or "additionalProperties" in node
    if isinstance(value, list):
        return "array" in kinds or "items" in node
    if isinstance(value, bool):
        return "boolean" in kinds
    if isinstance(value, int | float):
        return "number" in kinds or ("integer" in kinds and float(value).is_integer())
    if isinstance(value, str):
        return "string" in kinds or "enum" in node
    return False


def _shift(value: str, day: str, rng: random.Random) -> str:
    try:
        moved = date.fromisoformat(day) + timedelta(days=rng.randint(1, 28) * rng.choice((-1, 1)))
    except ValueError:
        return value
    return moved.isoformat() + value[len(day) :]


def _typo(value: str) -> str:
    at = len(value) // 2
    for position in [*range(at, len(value)), *range(at - 1, -1, -1)]:
        old = value[position]
        if old.isalnum():
            if old.isascii():
                new = "q" if old.lower() == "x" else "x"
                if old.isdigit():
                    new = "7" if old != "7" else "3"
            else:
                new = chr(ord(old) + 1)
            return value[:position] + new + value[position + 1 :]
    return value + "x"


def corrupt(
    key: Any,
    schema: Any,
    rates: ErrorRates,
    rng: random.Random,
    words: list[str],
    generated: Any = None,
) -> tuple[Any, list[Mistake]]:
    """The answer to ``schema`` made from ``key`` with mistakes at ``rates``, and the mistakes.

    ``generated``: the placeholder answer, whose values fill properties the key lacks.
    """
    walker = _Corrupter(schema, rates, rng, words)
    return walker.visit(schema, key, generated, ""), walker.mistakes


def answer_from_key(
    quality: QualityModel,
    body: dict[str, Any],
    text: str,
    effort: str,
    seed: int,
    generated: Any,
    words: list[str],
    *,
    keys: KeyIndex | None = None,
    sample: int = 0,
) -> Any:
    """The hook where answers are made: the answer to a ``json_schema`` request whose user text
    holds an answer key, or (``keys``) whose conversation holds the located texts of a
    registered one (``generated`` otherwise, unchanged). A located key is read first
    (``recall.read``: what this request's text shows, pass by pass; ``sample``: how many
    identical requests came before this one)."""
    key = answer_key(text) if ANSWER_KEY in text else None
    messages = body.get("messages") or []
    conversation = None
    if key is None and keys:
        conversation = user_texts(messages)
        key = keys.match(conversation)
    response_format = body.get("response_format") or {}
    schema = (response_format.get("json_schema") or {}).get("schema")
    if key is None or not isinstance(schema, dict):
        return generated
    model = str(body.get("model"))
    if located(key):
        recall = quality.recall_for(model, effort)
        draws = random.Random(seed ^ 0x2E_CA_11 ^ (sample * 0x9E37_79B9_7F4A_7C15))
        text = conversation if conversation is not None else user_texts(messages)
        key = read(key, text, recall, draws, previous_answers(messages))
    rates = quality.rates_for(model, effort)
    rng = random.Random(seed ^ 0x51_A1_17_E5)  # its own stream: the other draws stay as they were
    value, _ = corrupt(key, schema, rates, rng, words, generated)
    return value


def user_texts(messages: list[Any]) -> str:
    """The text of every user message of a conversation, in order (a follow-up's document is in
    an earlier one)."""
    return "\n".join(
        message_text(m.get("content"))
        for m in messages
        if isinstance(m, dict) and m.get("role") == "user"
    )
