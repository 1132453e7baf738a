"""A streamed answer's text so far -> a partial instance of the output model (``PartialParser``).

The text is read by pydantic-core's partial JSON parser (``from_json(..., allow_partial=True)``:
an unfinished string, key or literal at the end is left out), after one trim it cannot do
itself: a number at the very end may still grow (``12`` of ``123``), so it is left out too. The
result is mapped from the sent shape to the model's as ``CompiledSchema.parse`` maps answers
(quotes removed, renamed properties, nulls standing for defaults), then built field by field:

- a field appears once its value is complete and validates against the field's type and
  constraints (``Annotated`` metadata included); one that does not (yet) is left out;
- a nested model appears as soon as its object starts, itself partial;
- a list grows item by item (an item still being written is a partial model, or left out
  when it is not a model); a ``dict[str, X]`` grows key by key in the same way;
- the fields not (yet) in the answer hold their default, or None when they have none:
  ``model_fields_set`` names the fields that came from the answer.

So every field a partial instance sets equals the final value's (lists being prefixes, nested
models partial in the same way), as long as the answer goes on to validate; model and field
validators run on the final value only (``CompiledSchema.parse``). Built with
``model_construct``: no validation of the whole, no copies of values already checked.
"""

from __future__ import annotations

import functools
import types
import typing
from typing import Annotated, Any, Union

from pydantic import BaseModel, RootModel, TypeAdapter, ValidationError
from pydantic_core import from_json, to_json

from .compiled import CompiledSchema
from .quotes import split_quotes

__all__ = ["PartialParser"]

#: Characters a JSON number may end a text with while it could still grow.
_NUMBER_TAIL = "0123456789.eE+-"
_MISSING: Any = object()


class PartialParser:
    """Partial instances of ``compiled.model`` from the text of a streamed answer so far."""

    def __init__(self, compiled: CompiledSchema) -> None:
        self.compiled = compiled
        self.model = compiled.model

    def parse(self, text: str) -> BaseModel | None:
        """The partial instance ``text`` holds so far; None before its object starts or when
        the text cannot be read as the start of one JSON object."""
        data = partial_json(text)
        if not isinstance(data, dict):
            return None
        compiled = self.compiled
        try:
            if compiled.quotes:
                data = split_quotes(compiled.schema, data)[0]
            data = compiled.decode(data)
        except Exception:  # noqa: BLE001 - a shape the codec cannot map yet: no partial now
            return None
        if issubclass(self.model, RootModel):
            root = _partial(_field_annotation(self.model, "root"), data)
            if root is _MISSING:
                return None
            return self.model.model_construct(root)
        return _partial_model(self.model, data)

    def empty(self) -> BaseModel:
        """The instance with no field set (every field at its default, or None)."""
        if issubclass(self.model, RootModel):
            return self.model.model_construct(None)
        return _partial_model(self.model, {})


def partial_json(text: str) -> Any:
    """The JSON value ``text`` starts, as far as it is complete (None when there is none yet).

    Text before the first ``{`` (a code fence, prose) is skipped; a number at the very end is
    left out (it may still grow)."""
    start = text.find("{")
    if start < 0:
        return None
    body = text[start:].rstrip()
    if body and body[-1].isdigit():
        body = body.rstrip(_NUMBER_TAIL)
    try:
        return from_json(body, allow_partial=True)
    except ValueError:
        return None


def _partial_model(model: type[BaseModel], data: dict[str, Any]) -> BaseModel:
    values: dict[str, Any] = {}
    present: set[str] = set()
    for name, field in model.model_fields.items():
        key = _sent_name(name, field)
        if key in data:
            value = _partial(_field_annotation(model, name), data[key])
            if value is not _MISSING:
                values[name] = value
                present.add(name)
                continue
        if field.is_required():
            values[name] = None
    return model.model_construct(_fields_set=present, **values)


def _sent_name(name: str, field: Any) -> str:
    alias = field.validation_alias
    if isinstance(alias, str):
        return alias
    return field.alias or name


def _partial(annotation: Any, value: Any) -> Any:
    """``value`` (complete, or the last and unfinished part of an answer) as ``annotation``, or
    ``_MISSING`` when it is not complete enough to validate.

    Models, lists and ``dict[str, X]`` (also optional, also with constraints) are built part by
    part (a constraint on the whole, such as a list's ``min_length``, is checked on the final
    value); anything else validates whole, constraints included."""
    shape = _shape(annotation)
    if value is None or shape is None:
        return _validate(annotation, value)
    if isinstance(shape, type) and issubclass(shape, BaseModel):
        return _partial_model(shape, value) if isinstance(value, dict) else _MISSING
    origin, args = typing.get_origin(shape), typing.get_args(shape)
    if origin is list and isinstance(value, list):
        items = []
        for one in value:
            built = _partial(args[0] if args else Any, one)
            if built is _MISSING:
                break  # only the last item can be unfinished: the list grows item by item
            items.append(built)
        return items
    if origin is dict and isinstance(value, dict):
        entries = {}
        for key, one in value.items():
            built = _partial(args[1] if args else Any, one)
            if built is _MISSING:
                break  # likewise the last key
            entries[key] = built
        return entries
    return _validate(annotation, value)


def _shape(annotation: Any) -> Any:
    """The model, ``list[X]`` or ``dict[str, X]`` under ``annotation``'s ``Annotated`` and
    ``| None``; None for any other type (validated whole)."""
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    optional = _non_none(annotation)
    if optional is not None:
        return _shape(optional)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return None if issubclass(annotation, RootModel) else annotation
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if origin is list:
        return annotation
    if origin is dict and (not args or _shape_key(args[0])):
        return annotation
    return None


def _shape_key(annotation: Any) -> bool:
    while typing.get_origin(annotation) is Annotated:
        annotation = typing.get_args(annotation)[0]
    return annotation is str


def _validate(annotation: Any, value: Any) -> Any:
    try:
        return _adapter(annotation).validate_json(to_json(value))
    except (ValidationError, TypeError, ValueError):
        return _MISSING


@functools.lru_cache(maxsize=1024)
def _cached_adapter(annotation: Any) -> TypeAdapter[Any]:
    return TypeAdapter(annotation)


def _adapter(annotation: Any) -> TypeAdapter[Any]:
    try:
        return _cached_adapter(annotation)
    except TypeError:  # an unhashable annotation
        return TypeAdapter(annotation)


def _field_annotation(model: type[BaseModel], name: str) -> Any:
    """The field's type with its constraints (``Field(ge=0)`` ...) as ``Annotated`` metadata."""
    field = model.model_fields[name]
    if field.metadata:
        return Annotated[(field.annotation, *field.metadata)]
    return field.annotation


def _non_none(annotation: Any) -> Any:
    """``X`` of ``X | None`` (None when ``annotation`` is not an optional of one type)."""
    origin = typing.get_origin(annotation)
    if origin is Union or origin is types.UnionType:
        args = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(annotation)) == 2:
            return args[0]
    return None
