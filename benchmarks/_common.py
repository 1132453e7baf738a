"""What every benchmark shares: the Review model, the rows, the long instructions, and helpers."""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

HERE = Path(__file__).resolve().parent
MODEL = "kimi-k3.1-pro"
INSTRUCTIONS = "Classify the product review: its sentiment and the product aspects it mentions."
#: Sent by every client, so all of them ask for the same answer budget and effort.
MAX_COMPLETION_TOKENS = 16384
REASONING_EFFORT = "low"
#: kimi_extract's result store: its directory, and the switch that turns the default store off.
STORE_DIR_ENV = "KIMI_EXTRACT_STORE_DIR"
STORE_OFF_ENV = "KIMI_EXTRACT_STORE"


def _plain_schema(schema: dict[str, Any]) -> None:
    # Kimi's schema dialect has no "title" keyword; the openai SDK and instructor send pydantic's
    # schema as is, so without this the server answers 400 to them.
    schema.pop("title", None)
    for prop in schema.get("properties", {}).values():
        prop.pop("title", None)


class Review(BaseModel):
    """The benchmark's output model: small, like a typical extraction."""

    # extra="forbid" makes pydantic emit additionalProperties: false, which Kimi requires.
    model_config = ConfigDict(extra="forbid", json_schema_extra=_plain_schema)

    sentiment: Literal["positive", "negative", "neutral"]
    aspects: list[str]


_TEMPLATES = (
    "Review {i}: the battery is fine but the screen scratches after a week.",
    "Review {i}: fast delivery, sturdy box, and the charger works great.",
    "Review {i}: stopped working on day three; support never answered my emails.",
    "Review {i}: the keyboard feels cheap, yet the trackpad and speakers are excellent.",
    "Review {i}: average product, nothing special about the camera or the price.",
)


def review_text(i: int) -> str:
    """The text of row ``i`` (distinct per row, so no answer is memoized)."""
    return _TEMPLATES[i % len(_TEMPLATES)].format(i=i)


def review_texts(count: int, offset: int = 0) -> list[str]:
    """Rows ``offset .. offset + count - 1``."""
    return [review_text(i) for i in range(offset, offset + count)]


def worker_extractor(spec: dict[str, Any], instructions: str = INSTRUCTIONS) -> Any:
    """kimi_extract as the worker processes run it: the shared model, effort and answer budget,
    the spec's endpoint, key and concurrency, and its extra ``options``."""
    import kimi_extract as kx

    return kx.Extractor(
        Review,
        instructions=instructions,
        model=MODEL,
        reasoning_effort=REASONING_EFFORT,
        max_completion_tokens=MAX_COMPLETION_TOKENS,
        base_url=spec["base_url"],
        api_key=spec["api_key"],
        concurrency=spec["concurrency"],
        progress=False,
        **spec.get("options", {}),
    )


def long_instructions(target_tokens: int = 3000) -> str:
    """Static instructions of about ``target_tokens`` tokens (the simulator's token rules)."""
    from kimi_extract.tokens import count_text_tokens

    rules = [
        "Read the whole review before deciding; do not stop at the first sentence.",
        "Sentiment is positive when the reviewer would recommend the product overall.",
        "Sentiment is negative when a defect, refund or broken promise dominates the text.",
        "Sentiment is neutral when praise and complaints balance or the text is factual.",
        "Aspects are short noun phrases naming product parts or services, lower case.",
        "Never invent aspects that the review does not mention explicitly or implicitly.",
        "Merge synonyms such as 'battery life' and 'battery' into the shorter phrase.",
        "Ignore shipping and packaging unless the review is mostly about them.",
    ]
    lines = ["You are a careful annotator of product reviews. Follow every guideline below."]
    number = 0
    while count_text_tokens("\n".join(lines)) < target_tokens:
        rule = rules[number % len(rules)]
        lines.append(f"Guideline {number + 1} (section {number // len(rules) + 1}): {rule}")
        number += 1
    return "\n".join(lines)


def median(values: list[float]) -> float:
    """The median (NaN for no values)."""
    return statistics.median(values) if values else float("nan")


@dataclass
class Section:
    """One measurement's outcome, rendered to the console and RESULTS.md by ``report``."""

    key: str
    title: str
    command: str
    headers: list[str]
    rows: list[list[Any]]
    #: (target, measured, met) — met is True, False, or None when not applicable.
    targets: list[tuple[str, str, bool | None]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: Raw numbers for the plot.
    data: dict[str, Any] = field(default_factory=dict)
    #: Filled by run.py: when it finished (UTC), seconds taken, the 1-minute load average
    #: (os.getloadavg) before and after, the command that ran it, whether it was --quick, and
    #: the commit.
    finished: str = ""
    elapsed_s: float = 0.0
    load: tuple[float, float] = (float("nan"), float("nan"))
    run_command: str = ""
    quick: bool = False
    #: The kimi_extract commit measured ("+" when kimi_extract/ had uncommitted changes).
    commit: str = ""

    def to_json(self) -> dict[str, Any]:
        """A JSON-ready dict (run.py keeps every section in results.json)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Section:
        """The inverse of ``to_json``."""
        data = dict(data)
        data["targets"] = [tuple(t) for t in data.get("targets", [])]
        data["load"] = tuple(data.get("load", (float("nan"), float("nan"))))
        names = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def run_worker(module: str, spec: dict[str, Any], timeout: float = 1800) -> dict[str, Any]:
    """Run ``python benchmarks/<module>.py <spec-json>`` in a fresh process; returns its JSON.

    The worker prints one JSON object as its last stdout line; ``spec`` gains the simulator's
    ``api_key``. A fresh process per client keeps
    imports, connection pools and garbage from one client out of another's CPU time and memory.
    kimi_extract's on-disk result store stays on (its default) but points at a fresh empty
    directory, so no row is ever served from an earlier run.
    """
    from _server import API_KEY  # the parent imports the simulator; the worker need not

    spec = {"api_key": API_KEY, **spec}
    with tempfile.TemporaryDirectory(prefix="kx-bench-store-") as store:
        env = dict(os.environ)
        env.pop(STORE_OFF_ENV, None)
        env[STORE_DIR_ENV] = store
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HERE), env.get("PYTHONPATH")]))
        proc = subprocess.run(
            [sys.executable, str(HERE / f"{module}.py"), json.dumps(spec)],
            capture_output=True,
            text=True,
            timeout=timeout,
            env=env,
        )
    if proc.returncode != 0:
        raise RuntimeError(
            f"{module} worker failed ({proc.returncode}) for {spec}:\n{proc.stderr[-3000:]}"
        )
    lines = [line for line in proc.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"{module} worker printed no result:\n{proc.stdout[-2000:]}")
    result: dict[str, Any] = json.loads(lines[-1])
    return result


def extractor_accepts(option: str) -> bool:
    """Whether ``kx.Extractor`` takes keyword ``option`` (the library is still moving)."""
    import inspect

    import kimi_extract as kx

    try:
        from kimi_extract.config import option_names
    except ImportError:  # a version before kx.ExtractorConfig: the options are the signature's
        return option in inspect.signature(kx.Extractor).parameters
    return option in option_names()


#: run.py --peers: a comma-separated list of the peers to run ("none" for none; unset: all).
PEERS_ENV = "KX_BENCH_PEERS"


def peer_available(name: str) -> bool:
    """Whether peer ``name`` is selected (``--peers``) and importable (found, not imported)."""
    import importlib.util

    selected = os.environ.get(PEERS_ENV)
    if selected is not None and name not in selected.split(","):
        return False
    return importlib.util.find_spec(name) is not None
