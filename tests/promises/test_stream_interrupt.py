"""Ctrl-C during ``ex.stream`` raises ``RunInterrupted`` (checked in a child process).

The child's answer streams its first chunk at once, then waits a long time before the next (the
simulator paces chunks at ``tokens_per_s``). The child says when it holds a partial value and its
main thread waits inside the library for the next (a watcher thread reads the main thread's
stack); the parent then sends SIGINT. The checks are on the order of events (the stream had not
finished), not on time.
"""

from __future__ import annotations

import textwrap

import pytest

from ..conftest import INTERRUPTIBLE, WAITING_IN_LIBRARY, ctrl_c_when_ready

SCRIPT = (
    INTERRUPTIBLE
    + WAITING_IN_LIBRARY
    + textwrap.dedent(
        """
    import asyncio, sys
    import kimi_extract as kx
    from kimi_extract.simulator import Reply, Simulator
    from pydantic import BaseModel

    class Out(BaseModel):
        words: list[str]

    def slow(request):
        return Reply(content={"words": [f"w{i}" for i in range(400)]}, reasoning_content="")

    with Simulator(responder=slow, tokens_per_s=4) as sim:
        ex = kx.Extractor(Out, base_url=sim.base_url, api_key=sim.api_key, progress=False)
        seen = []
        tell_when(lambda: len(seen) >= 2, lambda: f"partial {len(seen[-1].words)}")

        def consume():
            for value in ex.stream("go"):
                seen.append(value)

        try:
            if sys.argv[1] == "sync":
                consume()
            else:  # like a notebook cell: inside a running loop
                async def cell():
                    consume()
                loop = asyncio.new_event_loop()
                try:
                    loop.run_until_complete(cell())
                finally:
                    loop.close()
        except kx.RunInterrupted as exc:
            finished = sum(1 for h in sim.history if h.status is not None)
            print("interrupted", isinstance(exc, KeyboardInterrupt), exc.partial, finished,
                  len(seen[-1].words), flush=True)
    """
    )
)


@pytest.mark.parametrize("mode", ["sync", "in-running-loop"])
def test_ctrl_c_during_a_stream_raises_run_interrupted(mode):
    first, out, err, code = ctrl_c_when_ready(
        [SCRIPT, mode], lambda first: first.startswith("partial")
    )
    words = int(first.split()[1])
    # RunInterrupted (a KeyboardInterrupt), no frame; the stream had not finished (its request
    # never completed), and the last value seen was the partial printed before the interrupt.
    assert out.split() == ["interrupted", "True", "None", "0", str(words)], out + err
    assert code == 0, err
    assert "Traceback" not in err and "was never awaited" not in err, err
