"""Render benchmark sections: console tables, RESULTS.md, and the results plot."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import subprocess
from pathlib import Path
from typing import Any

from _common import HERE, Section

ORDER = ("1", "2", "3", "4", "5", "6", "7", "8", "9")
PACKAGES = ("kimi-extract", "openai", "instructor", "pydantic", "httpx", "aiohttp", "pandas")


def _verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "n/a"}[met]


def console_table(section: Section) -> str:
    """A plain-text table with the section's targets under it."""
    cells = [section.headers, *[[str(c) for c in row] for row in section.rows]]
    widths = [
        max(len(str(row[i])) if i < len(row) else 0 for row in cells)
        for i in range(len(section.headers))
    ]
    lines = [f"== {section.key}. {section.title} =="]
    for number, row in enumerate(cells):
        lines.append(
            "  ".join(
                str(c).rjust(w) if i else str(c).ljust(w)
                for i, (c, w) in enumerate(zip(row, widths, strict=False))
            )
        )
        if number == 0:
            lines.append("  ".join("-" * w for w in widths))
    for target, measured, met in section.targets:
        lines.append(f"target: {target}: {measured} -> {_verdict(met).strip('*')}")
    return "\n".join(lines)


def markdown_table(headers: list[str], rows: list[list[Any]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(out)


def environment() -> list[str]:
    """Lines describing where the numbers were made."""
    versions = []
    for name in PACKAGES:
        try:
            versions.append(f"{name} {importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            versions.append(f"{name} (not installed)")
    return [
        f"Python {platform.python_version()} on {platform.system()} {platform.machine()}, "
        f'{os.cpu_count()} CPUs; kimi_extract at the commit each section names ("+": with '
        "uncommitted changes in kimi_extract/, the shared work tree being edited meanwhile).",
        "Versions: " + ", ".join(versions) + ".",
    ]


def commit() -> str:
    """The commit measured: HEAD, with "+" when kimi_extract/ has uncommitted changes."""
    head = _git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+" if _git("status", "--porcelain", "kimi_extract") else "")


def _git(*args: str) -> str:
    try:
        out = subprocess.run(
            ["git", *args], cwd=HERE.parent, capture_output=True, text=True, check=True
        )
    except (OSError, subprocess.CalledProcessError):
        return ""
    return out.stdout.strip()


def write_markdown(path: Path, sections: list[Section], *, plot: str | None, quick: bool) -> None:
    """RESULTS.md: environment, every target's verdict, the plot, then one part per section.

    ``ANALYSIS.md`` next to this file (written by hand: profiles, gaps, suggestions) is appended
    when it exists and this is not a --quick run.
    """
    commands = sorted({s.run_command for s in sections if s.run_command})
    lines = [
        "# kimi_extract benchmarks",
        "",
        (
            "**--quick run: reduced sizes, not the real figures.** "
            if quick
            else "Figures made on the machine described below. "
        )
        + "Every measurement runs against the project's simulator in its own process (section "
        "7: an independent rate-limited server, benchmarks/gateway_server.py); each "
        "client runs in its own fresh process, so client CPU (`time.process_time` of that "
        "process) excludes the server; figures are medians or ratios. Made by: "
        + ", ".join(f"`{c}`" for c in commands)
        + " (each section below names its own run, time and machine load).",
        "",
        *environment(),
        "",
        "## Targets",
        "",
        markdown_table(
            ["#", "target", "measured", "verdict"],
            [
                [s.key, target, measured, _verdict(met)]
                for s in sections
                for target, measured, met in s.targets
            ],
        ),
        "",
    ]
    if plot:
        lines += [f"![results]({plot})", ""]
    for section in sections:
        lines += [
            f"## {section.key}. {section.title}",
            "",
            f"Command: `{section.command}{' --quick' if section.quick else ''}` "
            f"(figures below made by `{section.run_command}` at kimi_extract "
            f"{section.commit or 'unknown'}, finished {section.finished}, "
            f"{section.elapsed_s:.0f} s, load average {section.load[0]:.2f} -> "
            f"{section.load[1]:.2f} on {os.cpu_count()} CPUs).",
            "",
            markdown_table(section.headers, section.rows),
            "",
        ]
        lines += [f"- {note}" for note in section.notes]
        lines.append("")
    analysis = HERE / "ANALYSIS.md"
    if analysis.exists() and not quick:
        lines += [analysis.read_text().rstrip(), ""]
    path.write_text("\n".join(lines))


def plot(path: Path, sections: list[Section]) -> bool:
    """Write the results figure; False when matplotlib is not installed."""
    try:
        import matplotlib
    except ImportError:
        return False
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_key = {s.key: s for s in sections}
    panels = [key for key in ("1", "3", "4", "6") if key in by_key]
    if not panels:
        return False
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 4.2), squeeze=False)
    for ax, key in zip(axes[0], panels, strict=True):
        {"1": _plot_cpu, "3": _plot_rate_limit, "4": _plot_cache, "6": _plot_import}[key](
            ax, by_key[key]
        )
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True


def _bars(ax: Any, labels: list[str], groups: dict[str, list[float]]) -> None:
    width = 0.8 / max(1, len(groups))
    for n, (name, values) in enumerate(groups.items()):
        positions = [i + (n - (len(groups) - 1) / 2) * width for i in range(len(labels))]
        ax.bar(positions, values, width, label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.legend(fontsize=8)


def _plot_cpu(ax: Any, section: Section) -> None:
    results = section.data["results"]
    concurrencies = list(next(iter(results.values())).keys())
    _bars(
        ax,
        [f"c={c}" for c in concurrencies],
        {client: [r[c]["ms_per_row"] for c in concurrencies] for client, r in results.items()},
    )
    ax.set_ylabel("client CPU ms per row (lower is better)")
    ax.set_title("1. CPU per row, zero latency")


def _plot_rate_limit(ax: Any, section: Section) -> None:
    figures = section.data["figures"]
    clients = list(figures)
    _bars(
        ax,
        clients,
        {
            "rows lost / 100": [f["lost"] / 100 for f in figures.values()],
            "requests per success": [f["per_success"] for f in figures.values()],
            "share of limit rate": [f["of_limit"] for f in figures.values()],
        },
    )
    ax.set_title("3. Rate-limited server (1,000 rows)")
    ax.tick_params(axis="x", labelsize=8)


def _plot_cache(ax: Any, section: Section) -> None:
    figures = section.data["figures"]
    labels = [
        label.split(" (")[0] + ("\n(" + label.split(" (")[1] if " (" in label else "")
        for label in figures
    ]
    base = next(iter(figures.values()))["cost"]
    _bars(
        ax,
        labels,
        {
            "cost vs cache-warm": [f["cost"] / base for f in figures.values()],
            "cached share of prompt": [f["cached_share"] for f in figures.values()],
        },
    )
    ax.set_title("4. Shared 3,000-token prefix")
    ax.tick_params(axis="x", labelsize=7)


def _plot_import(ax: Any, section: Section) -> None:
    times = section.data.get("cpu_times") or section.data["times"]
    ax.barh(list(times), list(times.values()))
    ax.axvline(0.7, color="red", linestyle="--", linewidth=1, label="target 0.7 s")
    ax.set_xlabel("import CPU seconds (median)")
    ax.set_title("6. Import time")
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=8)
