"""The public namespace stays explicit and sorted (after httpx's tests/test_exported_members.py)."""

from __future__ import annotations

import kimi_extract as kx


def test_all_is_sorted_and_complete():
    assert kx.__all__ == sorted(kx.__all__)
    for name in kx.__all__:
        assert hasattr(kx, name), name
    public = {n for n in vars(kx) if not n.startswith("_") and n[0].isupper()}
    assert public <= set(kx.__all__)


def test_response_format_shape():
    from pydantic import BaseModel

    class Thing(BaseModel):
        name: str

    rf = kx.response_format(Thing)
    assert rf["type"] == "json_schema"
    assert set(rf["json_schema"]) == {"name", "strict", "schema"}
    assert rf["json_schema"]["strict"] is True and rf["json_schema"]["name"] == "Thing"
