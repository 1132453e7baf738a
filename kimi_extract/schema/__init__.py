"""Pydantic model -> strict MFJS ``json_schema`` (compiler, codec, Kimi's dialect)."""

from __future__ import annotations

from .compiled import AnswerInvalid, CompiledSchema, compile_schema, response_format

__all__ = ["AnswerInvalid", "CompiledSchema", "compile_schema", "response_format"]
