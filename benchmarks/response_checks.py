"""CPU per response of the checks every answer passes: the key check and the JSON value count.

    python benchmarks/response_checks.py

``Secret.suspect`` (does the answer hold the key in any form?) runs on every answer's texts;
``check_values`` (how many JSON values outside strings?) on every body before ``json.loads`` (a
body no longer than the cap, 100,000 bytes, cannot exceed it and is not read).
Both are printed beside ``json.loads`` of the same body for scale. CPU time
(``time.process_time``), best of 7 repeats, so the figures hold on a busy machine.
"""

from __future__ import annotations

import json
import time
import timeit

from kimi_extract.http.secret import Secret
from kimi_extract.http.wire import check_values

KEY = "sk-" + "Zq9Wm3Lx7Rt2Vb8Nc4Hk6Jd1Fs5Gp0YaQe7Ub3Hn9Kd2Lm5Pq8Rs1Tv4Wx"
REASONING = (
    "The user wrote about the battery being fine but the screen scratches. I need sentiment, "
    "aspects. Considering the overall tone, the review is mostly positive with one complaint."
)


def body_of(content: str) -> bytes:
    message = {"role": "assistant", "content": content, "reasoning_content": REASONING}
    return json.dumps(
        {
            "id": "cmpl-5f1c2a",
            "object": "chat.completion",
            "model": "kimi-k3.1-pro",
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 187, "completion_tokens": 74, "total_tokens": 261},
        }
    ).encode()


def best_us(function: object, number: int) -> float:
    runs = timeit.repeat(function, number=number, repeat=7, timer=time.process_time)  # type: ignore[arg-type]
    return min(runs) / number * 1e6


def document(rows: int) -> str:
    items = [{"name": f"item {i}", "price": i / 2, "note": "a note"} for i in range(rows)]
    return json.dumps({"rows": items})


def main() -> None:
    secret = Secret(KEY)
    answers = {
        "extraction answer": json.dumps({"sentiment": "positive", "aspects": ["battery", "lid"]}),
        "document answer": document(300),
        "large document": document(3000),
    }
    header = f"{'response':<18} {'body bytes':>10} {'suspect us':>10} {'values us':>10}"
    print(f"{header} {'loads us':>9}")
    for name, content in answers.items():
        body = body_of(content)
        texts = "\n".join([content, REASONING, "stop", "cmpl-5f1c2a"])
        number = 20_000 if len(body) < 2_000 else 100
        suspect = best_us(lambda: secret.suspect(texts), number)  # noqa: B023
        values = best_us(lambda: check_values(body), number)  # noqa: B023
        loads = best_us(lambda: json.loads(body), number)  # noqa: B023
        print(f"{name:<18} {len(body):>10,} {suspect:>10.2f} {values:>10.2f} {loads:>9.2f}")


if __name__ == "__main__":
    main()
