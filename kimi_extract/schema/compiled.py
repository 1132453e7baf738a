"""Pydantic output model -> strict MFJS ``json_schema`` response_format; answer text -> model.

``compile_schema(Model)`` starts from pydantic's validation JSON schema (aliases as property
names) and rewrites it into Kimi's schema dialect as MoonshotAI/walle defines it (the rules are in
``schema.dialect``); every schema it emits passes walle's ``ultra`` level:

- every object is closed and lists every property in ``required``; a field with a default
  becomes nullable, and on the way back a null for a field whose type is not nullable is dropped
  so the pydantic default applies;
- constraints the dialect carries stay keywords (``minimum``/``maximum``, ``minLength``/
  ``maxLength``/``pattern``, ``minItems``/``maxItems``); the rest (formats, exclusive bounds of
  floats, multiples, unique items, timezone and past/future rules, URL schemes) move into the
  description as one sentence, ``Constraints: <item>; <item>.`` (the simulator's answer generator
  reads it back); pydantic still enforces every constraint on every answer;
- ``dict[str, X]`` becomes ``additionalProperties: X`` (``dict[str, Any]``: ``{}``), a dict
  keyed by an Enum or Literal an object of exactly those keys, each nullable; a fixed
  homogeneous tuple an array with ``minItems = maxItems``; a heterogeneous ``tuple[A, B]`` the
  object ``{"0": A, "1": B}``, mapped back on decode; ``Any`` an ``anyOf`` of every JSON type; a
  RootModel whose root is not an object ``{"root": ...}``; a property named like an MFJS keyword
  (``required``, ``anyOf``...) travels as ``required_`` and is renamed back;
- what walle cannot express (a tuple with a variable tail, dict keys that do not come back from
  a JSON object key, intersections, types with no JSON form) raises ``SchemaError`` naming the
  field, and so does a model past walle's limits (nesting, property count, size, enum or union
  size), when the Extractor is built.

``CompiledSchema.parse`` is the hot path: when no mapping is needed the answer text goes straight
to ``model_validate_json``; the slower path (fence stripping, mapping, null-for-default) runs
only when needed. Validation always uses pydantic's JSON mode, so strict models behave the same on
both paths.

The parts live in sibling modules: ``schema.source`` (pydantic's generator with markers, the
kept keywords and the constraint sentence), ``schema.compile`` (the transform to MFJS) and
``schema.codec`` (mapping answers between the compiled shape and the model's). This module holds
the public API and the answer parsing.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, RootModel, ValidationError
from pydantic.errors import PydanticInvalidForJsonSchema, PydanticUserError
from pydantic_core import from_json

from ..exceptions import SchemaError
from .codec import _REF_PREFIX, _Codec, _Object, _path_text
from .compile import _Compiler
from .quotes import add_quotes, quote_schema, split_quotes
from .source import _Generator

__all__ = ["AnswerInvalid", "CompiledSchema", "compile_schema", "response_format"]

AnswerKind = Literal["json", "validation"]

_FENCE = re.compile(r"```[a-zA-Z]*\s*(.*?)\s*```", re.DOTALL)


class AnswerInvalid(ValueError):
    """An answer that is not JSON (``kind="json"``) or does not validate (``kind="validation"``).

    ``errors`` holds one line per problem: ``path.to.field: message`` with property names and
    list indexes as sent (aliases, e.g. ``aspects.0.score``), or ``$: message`` for the whole
    answer. The conversation (``run.conversation``) sends these lines back when it reasks.
    """

    def __init__(self, kind: AnswerKind, errors: Sequence[str]) -> None:
        self.kind: AnswerKind = kind
        self.errors: list[str] = list(errors)
        what = "is not valid JSON" if kind == "json" else "does not match the output model"
        super().__init__(f"the answer {what}: " + "; ".join(self.errors))

    def __reduce__(self) -> tuple[Any, ...]:
        return (AnswerInvalid, (self.kind, self.errors))


@dataclass(frozen=True, eq=False)
class CompiledSchema:
    """An output model compiled for Kimi's strict mode; built once per class by compile_schema.

    ``schema`` is the MFJS schema (treat it as read-only; ``response_format()`` hands out a copy).
    ``needs_mapping`` is True when answers must be transformed before validation (tuples sent as
    objects, renamed properties, a RootModel's ``{"root": ...}``, nulls standing for defaults).
    """

    model: type[BaseModel]
    name: str
    schema: dict[str, Any] = field(repr=False)
    needs_mapping: bool
    _codec: _Codec = field(repr=False)
    _fast_first: bool = field(repr=False)
    #: ``grounding="quotes"``: ``schema`` also asks for ``kx_quotes`` (``with_quotes``).
    quotes: bool = False

    def with_quotes(self) -> CompiledSchema:
        """This schema asking for a supporting quote per field (``schema.quotes``); ``parse``
        then strips the quotes before the model validates (a missing one is invalid) and
        ``quotes_of`` returns them. Raises ``SchemaError`` when the result breaks walle's
        limits."""
        if self.quotes:
            return self
        return _with_quotes_cached(self)

    def response_format(self) -> dict[str, Any]:
        """The ``response_format`` request field: a strict ``json_schema`` named ``name``."""
        schema = copy.deepcopy(self.schema)
        return {
            "type": "json_schema",
            "json_schema": {"name": self.name, "strict": True, "schema": schema},
        }

    def decode(self, data: Any) -> Any:
        """An answer in the compiled shape -> data for ``model.model_validate`` (never mutated).

        ``parse`` validates the result in JSON mode (as JSON text), which strict models need.
        """
        if not self.needs_mapping:
            return data
        return self._codec.decode(data)

    def encode(self, data: Any) -> Any:
        """``model_dump(mode="json", by_alias=True)`` -> the compiled shape (inverse of decode);
        with ``quotes``, each value quoted by its own text."""
        encoded = self._codec.encode(data)
        return add_quotes(self.schema, encoded) if self.quotes else encoded

    def quotes_of(self, text: str | bytes) -> dict[tuple[str | int, ...], dict[str, Any]]:
        """The ``kx_quotes`` of an answer, by the path of their object in the answer as sent
        (``{(): {...}, ("items", 0): {...}}``); ``{}`` without ``quotes`` or for bad JSON."""
        if not self.quotes:
            return {}
        try:
            data, _ = _load(text)
        except AnswerInvalid:
            return {}
        return split_quotes(self.schema, data)[1]

    def parse(self, text: str | bytes) -> BaseModel:
        """Answer text -> a validated model instance, or AnswerInvalid.

        Tolerates whitespace and a ```json fence around the object.
        """
        if self.quotes:
            return self._parse_quoted(text)
        if self._fast_first:
            try:
                return self.model.model_validate_json(text)
            except ValidationError as error:
                if not self.needs_mapping and not _is_json_error(error):
                    raise AnswerInvalid("validation", _error_lines(error)) from None
        return self._parse_slow(text)

    def _parse_quoted(self, text: str | bytes) -> BaseModel:
        data, _ = _load(text)
        data, _, quote_errors = split_quotes(self.schema, data)
        decoded = self.decode(data)
        try:
            value = self.model.model_validate_json(
                json.dumps(decoded, ensure_ascii=False, separators=(",", ":"))
            )
        except ValidationError as error:
            locate = (lambda loc: self._codec.locate(loc, data)) if self.needs_mapping else None
            lines = _error_lines(error, locate)
            raise AnswerInvalid("validation", lines + quote_errors) from None
        if quote_errors:
            raise AnswerInvalid("validation", quote_errors)
        return value

    def _parse_slow(self, text: str | bytes) -> BaseModel:
        data, body = _load(text)
        if not self.needs_mapping:
            try:
                return self.model.model_validate_json(body)
            except ValidationError as error:
                raise AnswerInvalid("validation", _error_lines(error)) from None
        decoded = self.decode(data)
        try:
            return self.model.model_validate_json(
                json.dumps(decoded, ensure_ascii=False, separators=(",", ":"))
            )
        except ValidationError as error:
            lines = _error_lines(error, lambda loc: self._codec.locate(loc, data))
            raise AnswerInvalid("validation", lines) from None


def compile_schema(model: type) -> CompiledSchema:
    """Compile a pydantic model class (cached per class).

    Raises TypeError for anything but a BaseModel subclass, and SchemaError (naming the model,
    the field and the reason) for types Kimi's strict JSON schema mode cannot express.
    """
    if not isinstance(model, type) or not issubclass(model, BaseModel):
        raise SchemaError(f"compile_schema expects a pydantic BaseModel subclass, got {model!r}")
    return _compile_cached(model)


def response_format(model: type) -> dict[str, Any]:
    """The strict ``json_schema`` response_format for a model: compile_schema(model)'s."""
    return compile_schema(model).response_format()


@functools.lru_cache(maxsize=512)
def _compile_cached(model: type[BaseModel]) -> CompiledSchema:
    try:
        source = model.model_json_schema(
            by_alias=True,
            ref_template=_REF_PREFIX + "{model}",
            schema_generator=_Generator,
            mode="validation",
        )
    except (PydanticUserError, PydanticInvalidForJsonSchema) as error:
        raise SchemaError(
            f"{model.__name__}: pydantic cannot build its JSON schema: {error}"
        ) from error
    compiler = _Compiler(model.__name__, source)
    schema, codec = compiler.compile()
    needs_mapping = codec.decodes
    # the fast path validates the text as sent; shapes that differ from the model's skip it
    fast_first = not any(
        (isinstance(c, _Object) and c.renames) or c.intrinsic() and not isinstance(c, _Object)
        for c in compiler.codecs
    ) and not issubclass(model, RootModel)
    name = re.sub(r"[^a-zA-Z0-9_-]", "_", model.__name__)[:64] or "output"
    return CompiledSchema(model, name, schema, needs_mapping, codec, fast_first)


@functools.lru_cache(maxsize=512)
def _with_quotes_cached(compiled: CompiledSchema) -> CompiledSchema:
    schema = quote_schema(compiled.schema, compiled.model.__name__)
    return dataclasses.replace(compiled, schema=schema, quotes=True, _fast_first=False)


# ---------------------------------------------------------------------------------------------
# answer text


def _load(text: str | bytes) -> tuple[Any, str | bytes]:
    """(parsed JSON, the text it came from); unwraps a fence or surrounding prose if needed."""
    try:
        return from_json(text), text
    except ValueError as error:
        first = error
    raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
    inner = _unwrap(raw)
    if inner is not None:
        try:
            return from_json(inner), inner
        except ValueError:
            pass
    if not raw.strip():
        raise AnswerInvalid("json", ["$: the answer is empty; expected one JSON object"])
    if "{" not in raw:
        start = raw.strip()
        start = start if len(start) <= 60 else start[:57] + "..."
        raise AnswerInvalid("json", [f"$: expected one JSON object, got text: {start!r}"])
    raise AnswerInvalid("json", [f"$: Invalid JSON: {first}"])


def _unwrap(text: str) -> str | None:
    match = _FENCE.search(text)
    if match:
        return match.group(1)
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        return text[start : end + 1]
    return None


def _is_json_error(error: ValidationError) -> bool:
    return error.error_count() == 1 and error.errors()[0]["type"] == "json_invalid"


def _error_lines(
    error: ValidationError, locate: Callable[[Sequence[Any]], list[Any]] | None = None
) -> list[str]:
    lines: list[str] = []
    for item in error.errors(include_url=False, include_context=False, include_input=False):
        loc = locate(item["loc"]) if locate is not None else item["loc"]
        line = f"{_path_text(loc)}: {item['msg']}"
        if line not in lines:
            lines.append(line)
    return lines
