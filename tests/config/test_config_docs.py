"""docs/configuration.md is generated from the docstrings under the settings' fields."""

from __future__ import annotations

from pathlib import Path

from kimi_extract.config import DEPRECATED_NAMES, option_names
from kimi_extract.config.docs import settings_markdown

PAGE = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"


def test_the_settings_page_is_the_generated_one() -> None:
    assert PAGE.read_text(encoding="utf-8") == settings_markdown(), (
        "docs/configuration.md is out of date: run "
        "`python -m kimi_extract.config.docs docs/configuration.md`"
    )


def test_the_page_lists_every_setting_and_old_name() -> None:
    page = settings_markdown()
    for name in option_names() | set(DEPRECATED_NAMES):
        assert f"| `{name}=` |" in page or f"`{name}=kx." in page, name


def test_the_readme_links_the_settings_page() -> None:
    readme = (PAGE.parents[1] / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    assert "docs/configuration.md" in section
