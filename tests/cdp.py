"""A small Chrome DevTools Protocol client for the browser tests (no dependency but Chromium).

The browser is Debian's ``chromium`` started headless with ``--remote-debugging-pipe``: commands
go to its file descriptor 3 and replies come back on 4, as NUL-terminated JSON (what Puppeteer and
Playwright use too), so no websocket library is needed. One page target is attached in "flat"
mode; its console messages, uncaught exceptions, log entries and JavaScript dialogs are collected
in ``Browser.events`` for the tests to assert on.

``serve(directory)`` serves a folder over loopback HTTP. A test that needs ``localStorage`` to
outlive a document (a reload, a navigation) opens its page from there: this Chromium, driven
headless, now and then loses a file:// page's ``localStorage`` writes across a reload (a two-line
page that reads a key on load, opened, reloaded, written, reloaded: 21 of 40 fresh browsers read
nothing back on a 2-core machine at load ~5; 0 of 40 over http://127.0.0.1 just before it),
with nothing a page or a test could wait for. ``Browser.clear_storage`` empties an origin's
storage from the browser side, before a page opens, instead of a ``localStorage.clear()`` from
the page (itself such a write) and a reload.

``find_chromium()`` looks for the binary (``KX_CHROMIUM`` overrides); ``.ci/run`` installs it with
apt when missing and sets ``KX_REQUIRE_BROWSER=1``, so in CI a missing browser fails the tests
rather than skipping them.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import http.server
import json
import os
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

CANDIDATES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def find_chromium() -> str | None:
    """The browser binary: ``$KX_CHROMIUM``, else the first of ``CANDIDATES`` on PATH."""
    explicit = os.environ.get("KX_CHROMIUM")
    if explicit:
        return explicit
    for name in CANDIDATES:
        found = shutil.which(name)
        if found:
            return found
    return None


def browser_required() -> bool:
    """True in CI: a missing browser is a failure there, not a skip."""
    return bool(os.environ.get("KX_REQUIRE_BROWSER") or os.environ.get("CI"))


def browser_session() -> Iterator[Browser]:
    """A browser for a test module's fixture (closed afterwards): skipped without a binary,
    failed in CI (``browser_required``)."""
    import pytest

    binary = find_chromium()
    if binary is None:
        message = "no chromium on PATH (apt-get install chromium, or set KX_CHROMIUM)"
        if browser_required():
            pytest.fail(f"{message}; the browser tests are required here (CI)")
        pytest.skip(message)
    instance = Browser(binary)
    try:
        yield instance
    finally:
        instance.close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002  (the base's name)
        pass


@contextlib.contextmanager
def serve(directory: Path) -> Iterator[Callable[[Path], str]]:
    """Serve ``directory`` on a fresh loopback port while the block runs; yields a function
    turning a file under it into its URL. A fresh port is a fresh origin: nothing is stored
    for it yet (``Browser.clear_storage`` makes sure)."""
    root = directory.resolve()
    handler = functools.partial(_QuietHandler, directory=str(root))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield lambda path: base + "/" + path.resolve().relative_to(root).as_posix()
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


class CDPError(RuntimeError):
    """A command the browser answered with an error, or no answer in time."""


class Browser:
    """Headless Chromium with one page; ``call`` sends a command to the page, ``evaluate`` runs
    JavaScript and returns its value."""

    def __init__(self, binary: str, *, width: int = 1280, height: int = 900) -> None:
        self.profile = tempfile.mkdtemp(prefix="kx-chromium-")
        commands_read, self._commands = os.pipe()
        self._replies, replies_write = os.pipe()
        args = [
            binary,
            "--headless",
            "--no-sandbox",  # CI runs as root
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--no-first-run",
            "--no-default-browser-check",
            "--disable-extensions",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--mute-audio",
            "--hide-scrollbars",
            f"--window-size={width},{height}",
            f"--user-data-dir={self.profile}",
            "--remote-debugging-pipe",
            "about:blank",
        ]
        # The shell moves the pipes to descriptors 3 and 4 and execs the browser.
        self.process = subprocess.Popen(
            ["/bin/sh", "-c", 'exec "$0" "$@" 3<&0 4>&1 </dev/null >/dev/null', *args],
            stdin=commands_read,
            stdout=replies_write,
            stderr=subprocess.DEVNULL,
        )
        os.close(commands_read)
        os.close(replies_write)
        self._next_id = 0
        self._lock = threading.Condition()
        self._replies_by_id: dict[int, dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []
        self._closed = False
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.session = self._attach()

    # -- protocol ----------------------------------------------------------------------------------

    def _read(self) -> None:
        buffer = b""
        while True:
            try:
                chunk = os.read(self._replies, 1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                with self._lock:
                    self._closed = True
                    self._lock.notify_all()
                return
            buffer += chunk
            while b"\0" in buffer:
                raw, buffer = buffer.split(b"\0", 1)
                message = json.loads(raw)
                with self._lock:
                    if "id" in message:
                        self._replies_by_id[message["id"]] = message
                    else:
                        self.events.append(message)
                    self._lock.notify_all()

    def _send(
        self, method: str, params: dict[str, Any] | None, session: str | None, timeout: float
    ) -> dict[str, Any]:
        with self._lock:
            self._next_id += 1
            number = self._next_id
        message: dict[str, Any] = {"id": number, "method": method, "params": params or {}}
        if session:
            message["sessionId"] = session
        os.write(self._commands, json.dumps(message).encode() + b"\0")
        deadline = time.monotonic() + timeout
        with self._lock:
            while number not in self._replies_by_id:
                left = deadline - time.monotonic()
                if left <= 0 or self._closed:
                    raise CDPError(f"no reply to {method} within {timeout} s")
                self._lock.wait(left)
            reply = self._replies_by_id.pop(number)
        if "error" in reply:
            raise CDPError(f"{method}: {reply['error']}")
        result: dict[str, Any] = reply.get("result", {})
        return result

    def _attach(self) -> str:
        targets = self._send("Target.getTargets", None, None, 20)["targetInfos"]
        pages = [t for t in targets if t["type"] == "page"]
        if pages:
            target = pages[0]["targetId"]
        else:
            target = self._send("Target.createTarget", {"url": "about:blank"}, None, 20)["targetId"]
        attached = self._send(
            "Target.attachToTarget", {"targetId": target, "flatten": True}, None, 20
        )
        session: str = attached["sessionId"]
        for domain in ("Page.enable", "Runtime.enable", "Log.enable"):
            self._send(domain, None, session, 20)
        return session

    def call(self, method: str, params: dict[str, Any] | None = None, timeout: float = 20) -> Any:
        """Send a command to the page's session; its result."""
        return self._send(method, params, self.session, timeout)

    def browser_call(
        self, method: str, params: dict[str, Any] | None = None, timeout: float = 20
    ) -> Any:
        """Send a command to the browser itself (``Browser.*``), not to the page; its result."""
        return self._send(method, params, None, timeout)

    def save_downloads(self, directory: Path) -> None:
        """Let the page download files, into ``directory`` (under their suggested names)."""
        self.browser_call(
            "Browser.setDownloadBehavior",
            {"behavior": "allow", "downloadPath": str(directory), "eventsEnabled": True},
        )

    def downloaded(self, directory: Path, name: str, timeout: float = 20) -> Path:
        """The file ``name`` in ``directory`` once the browser has finished writing it."""
        path = directory / name
        deadline = time.monotonic() + timeout
        while True:
            finished = [
                e
                for e in list(self.events)
                if e.get("method") == "Browser.downloadProgress"
                and e.get("params", {}).get("state") == "completed"
            ]
            if finished and path.exists():
                return path
            if time.monotonic() > deadline:
                raise CDPError(f"no download of {name} in {directory} within {timeout} s")
            time.sleep(0.05)

    # -- conveniences ------------------------------------------------------------------------------

    def evaluate(self, expression: str, timeout: float = 20) -> Any:
        """The value of a JavaScript expression in the page (an exception fails the call)."""
        result = self.call(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True, "awaitPromise": True},
            timeout,
        )
        if "exceptionDetails" in result:
            raise CDPError(f"{expression!r} raised: {result['exceptionDetails']}")
        return result["result"].get("value")

    def open(
        self, path: Path | str, ready: str = "document.body && document.body.dataset.ready"
    ) -> float:
        """Navigate to a local file (or a URL, ``serve``) and wait until ``ready`` is truthy;
        seconds it took."""
        started = time.monotonic()
        url = path if isinstance(path, str) else path.resolve().as_uri()
        self.call("Page.navigate", {"url": url})
        self.wait_for(ready)
        return time.monotonic() - started

    def reload(self, ready: str = "document.body && document.body.dataset.ready") -> None:
        """Reload the page (as the browser's reload button does) and wait until ``ready``."""
        self.evaluate("document.body.dataset.ready = ''")
        self.call("Page.reload", {"ignoreCache": True})
        self.wait_for(ready)

    def clear_storage(self, url: str) -> None:
        """Delete what the browser stores for ``url``'s origin (``localStorage``), in the browser
        itself: done when the call returns, with no document of the page involved."""
        origin = "/".join(url.split("/", 3)[:3])
        self.call("Storage.clearDataForOrigin", {"origin": origin, "storageTypes": "local_storage"})

    def wait_for(self, expression: str, timeout: float = 20) -> Any:
        deadline = time.monotonic() + timeout
        while True:
            try:
                value = self.evaluate(expression)
            except CDPError:
                value = None  # the document is being replaced
            if value:
                return value
            if time.monotonic() > deadline:
                raise CDPError(f"{expression!r} never became true within {timeout} s")
            time.sleep(0.05)

    def click(self, selector: str, timeout: float = 20) -> None:
        """A real mouse click (pressed and released) at the centre of the first match.

        The point is taken only once the element is the one the browser would hit there: a page
        still laying out or scrolling (a loaded machine draws late) moves it, and a click at a
        stale point would land on its neighbour or on nothing.
        """
        probe = (
            f"(() => {{ const n = document.querySelector({json.dumps(selector)});"
            " if (!n) return null;"
            " n.scrollIntoView({block: 'center'}); const r = n.getBoundingClientRect();"
            " const x = r.left + r.width / 2, y = r.top + r.height / 2;"
            " const hit = document.elementFromPoint(x, y);"
            " return hit && (hit === n || n.contains(hit)) ? [x, y] : null; })()"
        )
        box = self.wait_for(probe, timeout)
        for kind in ("mousePressed", "mouseReleased"):
            self.call(
                "Input.dispatchMouseEvent",
                {"type": kind, "x": box[0], "y": box[1], "button": "left", "clickCount": 1},
            )

    def key(self, key: str) -> None:
        """Press and release one printable key (``"j"``) or a named one (``"ArrowDown"``)."""
        down: dict[str, Any] = {"type": "keyDown", "key": key}
        if len(key) == 1:
            down["text"] = key
        self.call("Input.dispatchKeyEvent", down)
        self.call("Input.dispatchKeyEvent", {"type": "keyUp", "key": key})

    def screenshot(self, path: Path, *, full_width: int | None = None) -> Path:
        """Save a PNG of the viewport to ``path``."""
        data = self.call("Page.captureScreenshot", {"format": "png"})["data"]
        path.write_bytes(base64.b64decode(data))
        return path

    def problems(self) -> list[str]:
        """Console errors and warnings, uncaught exceptions, error log entries (CSP violations,
        failed loads) and JavaScript dialogs seen so far."""
        found = []
        with self._lock:
            events = list(self.events)
        for event in events:
            method, params = event.get("method"), event.get("params", {})
            if method == "Runtime.exceptionThrown":
                found.append(f"exception: {params['exceptionDetails']}")
            elif method == "Runtime.consoleAPICalled" and params.get("type") in (
                "error",
                "warning",
                "assert",
            ):
                found.append(f"console.{params['type']}: {params.get('args')}")
            elif method == "Log.entryAdded" and params["entry"]["level"] in ("error", "warning"):
                found.append(f"log: {params['entry'].get('text')}")
            elif method == "Page.javascriptDialogOpening":
                found.append(f"dialog: {params.get('message')}")
        return found

    def clear_events(self) -> None:
        """Forget the events seen so far (each test asserts on its own ``problems()``)."""
        with self._lock:
            self.events.clear()

    def console_messages(self) -> list[dict[str, Any]]:
        with self._lock:
            return [e for e in self.events if e.get("method") == "Runtime.consoleAPICalled"]

    def close(self) -> None:
        try:
            self._send("Browser.close", None, None, 5)
        except (CDPError, OSError):
            pass
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        for fd in (self._commands, self._replies):
            try:
                os.close(fd)
            except OSError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)
