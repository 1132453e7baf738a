"""Downloads for ``fetch_urls=True``: one deadline, a size cap, cancellable, no private targets.

- ``timeout`` (``fetch_timeout``) is a deadline for the whole download: DNS, connect, TLS,
  headers, redirects and body. A watchdog thread shuts the socket down when the deadline passes
  or the run is cancelled (Ctrl-C sets the ``cancel`` event), so a server trickling one byte a
  second holds neither a row nor the end of the run.
- ``max_bytes`` caps the body: the declared ``Content-Length`` and the bytes received (after
  gzip/deflate decoding, should a server compress despite ``Accept-Encoding: identity``).
- Private targets are refused unless ``allow_private=True``: every host is resolved here, each
  of its addresses is checked (loopback, private, link-local, multicast, reserved, unspecified,
  shared and other non-global ranges, including IPv4 inside IPv6), and the connection goes to the
  address that was checked, so a DNS answer that changes between check and connect (rebinding)
  cannot slip through. Every redirect is checked the same way. Proxies from the environment are
  not used (a proxy would connect on our behalf to the unchecked name).

Everything that goes wrong raises ``MediaError`` (the row's error).
"""

from __future__ import annotations

import errno
import http.client
import ipaddress
import os
import select
import socket
import ssl
import threading
import time
import zlib
from typing import Any
from urllib.parse import quote, urljoin, urlsplit

from ..exceptions import MediaError

MAX_REDIRECTS = 5
#: How often the watchdog looks at the deadline and the cancel event (seconds).
POLL = 0.05
_REDIRECTS = (301, 302, 303, 307, 308)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")
_TLS: ssl.SSLContext | None = None
_IN_PROGRESS = {errno.EINPROGRESS, errno.EALREADY, errno.EWOULDBLOCK}

Address = ipaddress.IPv4Address | ipaddress.IPv6Address


def getaddrinfo(host: str, port: int) -> list[tuple[int, Any]]:
    """(family, sockaddr) for every address of ``host``; tests replace this to fake DNS."""
    return [
        (family, sockaddr)
        for family, _, _, _, sockaddr in socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    ]


def forbidden_reason(address: Address) -> str | None:
    """Why ``address`` is not a public internet address ("loopback", "private", ...), or None."""
    embedded: Address | None = None
    if isinstance(address, ipaddress.IPv6Address):
        embedded = address.ipv4_mapped or address.sixtofour
        if embedded is None and address in _NAT64:
            embedded = ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
        if embedded is None and address.teredo is not None:
            embedded = address.teredo[1]
    for candidate in (embedded, address):  # the embedded IPv4 names the real target
        if candidate is None:
            continue
        for name in ("loopback", "unspecified", "link_local", "multicast", "reserved", "private"):
            if getattr(candidate, f"is_{name}"):
                return name.replace("_", "-")
        if not candidate.is_global:
            return "non-public"
    return None


def fetch(
    url: str,
    *,
    timeout: float,
    max_bytes: int,
    allow_private: bool = False,
    cancel: threading.Event | None = None,
) -> tuple[bytes, str]:
    """Download ``url`` (following up to 5 redirects): (body, content type); raises ``MediaError``.

    ``timeout`` bounds the whole download; ``cancel`` (when set) stops it within ~50 ms.
    """
    watch = _Watch(time.monotonic() + timeout, cancel)
    watch.start()
    current = url
    try:
        for _ in range(MAX_REDIRECTS + 1):
            connection, response = _get(current, watch, allow_private)
            try:
                if response.status in _REDIRECTS:
                    location = response.getheader("Location")
                    if not location:
                        raise MediaError(f"could not download {url}: redirect without Location")
                    current = urljoin(current, location.strip())
                    continue
                if response.status >= 400:
                    raise MediaError(f"could not download {url}: HTTP {response.status}")
                if not 200 <= response.status < 300:
                    raise MediaError(f"could not download {url}: HTTP {response.status}")
                body = _read_body(response, url, max_bytes)
                watch.check(url, timeout)  # a shutdown can look like the end of the body
                content_type = (response.getheader("Content-Type") or "").split(";")[0]
                return body, content_type.strip().lower()
            finally:
                connection.close()
        raise MediaError(f"could not download {url}: more than {MAX_REDIRECTS} redirects")
    except MediaError:
        watch.check(url, timeout)
        raise
    except (OSError, http.client.HTTPException, ValueError, zlib.error) as exc:
        watch.check(url, timeout)
        raise MediaError(f"could not download {url}: {type(exc).__name__}: {exc}") from None
    finally:
        watch.stop()


def _get(
    url: str, watch: _Watch, allow_private: bool
) -> tuple[http.client.HTTPConnection, http.client.HTTPResponse]:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise MediaError(f"could not download {url}: only http(s) URLs with a host are fetched")
    host = parts.hostname
    port = parts.port or (443 if parts.scheme == "https" else 80)
    ascii_host = host if host.isascii() else host.encode("idna").decode("ascii")
    addresses = _resolve(ascii_host, port, watch)
    if not allow_private:
        for _, sockaddr in addresses:
            reason = forbidden_reason(ipaddress.ip_address(sockaddr[0].split("%")[0]))
            if reason is not None:
                shown = host if host == sockaddr[0] else f"{host} ({sockaddr[0]})"
                raise MediaError(
                    f"refused to download {url}: {shown} is a {reason} address; pass "
                    "allow_private_urls=True to fetch private addresses"
                )
    cls = _HTTPSConnection if parts.scheme == "https" else _HTTPConnection
    connection = cls(ascii_host, port, addresses=addresses, watch=watch)
    target = quote(parts.path or "/", safe="/%:@!$&'()*+,;=~")
    if parts.query:
        target += "?" + quote(parts.query, safe="/%:@!$&'()*+,;=~?")
    try:
        connection.request(
            "GET", target, headers={"Accept-Encoding": "identity", "User-Agent": "kimi-extract"}
        )
        return connection, connection.getresponse()
    except BaseException:
        connection.close()
        raise


def _resolve(host: str, port: int, watch: _Watch) -> list[tuple[int, Any]]:
    """DNS in a daemon thread, so the deadline and the cancel event also bound a slow resolver."""
    outcome: dict[str, Any] = {}
    done = threading.Event()

    def work() -> None:
        try:
            outcome["value"] = getaddrinfo(host, port)
        except BaseException as exc:  # handed to the waiting thread
            outcome["error"] = exc
        finally:
            done.set()

    threading.Thread(target=work, name="kimi_extract-dns", daemon=True).start()
    while not done.wait(POLL):
        if watch.fired or watch.expired():
            raise OSError("name resolution did not finish")
    if "error" in outcome:
        error = outcome["error"]
        if isinstance(error, socket.gaierror):
            raise MediaError(f"could not resolve {host}: {error.strerror}") from None
        raise error
    if not outcome["value"]:
        raise MediaError(f"could not resolve {host}: no addresses")
    return list(outcome["value"])


def _read_body(response: http.client.HTTPResponse, url: str, max_bytes: int) -> bytes:
    declared = response.getheader("Content-Length")
    if declared and declared.strip().isdigit() and int(declared) > max_bytes:
        raise MediaError(_too_big(url, int(declared), max_bytes))
    encoding = (response.getheader("Content-Encoding") or "identity").strip().lower()
    decoder: Any = None
    if encoding in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(zlib.MAX_WBITS | 32)  # a gzip or zlib header
    elif encoding != "identity":
        raise MediaError(f"could not download {url}: unsupported Content-Encoding {encoding!r}")
    chunks: list[bytes] = []
    received = 0
    while True:
        chunk = response.read1(65536)
        if not chunk:
            break
        if decoder is not None:  # inflate at most one byte past the cap
            chunk = decoder.decompress(chunk, max_bytes + 1 - received)
        received += len(chunk)
        if received > max_bytes:
            raise MediaError(_too_big(url, received, max_bytes))
        chunks.append(chunk)
    return b"".join(chunks)


def _too_big(url: str, size: int, limit: int) -> str:
    return (
        f"download {url} is over {size / 2**20:.1f} MiB, over the {limit / 2**20:.1f} MiB limit "
        "(raise max_video_bytes / max_fetch_bytes, or pass a URL)"
    )


class _Watch:
    """Shuts the current socket down when the deadline passes or ``cancel`` is set."""

    def __init__(self, deadline: float, cancel: threading.Event | None) -> None:
        self.deadline = deadline
        self.cancel = cancel
        self.fired: str | None = None
        self._socket: socket.socket | None = None
        self._lock = threading.Lock()
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kimi_extract-fetch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._done.set()

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def remaining(self) -> float:
        return max(0.001, self.deadline - time.monotonic())

    def track(self, sock: socket.socket) -> None:
        with self._lock:
            self._socket = sock
            fired = self.fired
        if fired:
            self._shutdown(sock)

    def check(self, url: str, timeout: float) -> None:
        """Raise the watchdog's reason, if it fired (its shutdown caused whatever came next)."""
        if self.fired == "cancelled" or (self.cancel is not None and self.cancel.is_set()):
            raise MediaError(f"download of {url} was cancelled")
        if self.fired == "deadline" or self.expired():
            raise MediaError(
                f"could not download {url}: timed out after {timeout:g} s (fetch_timeout)"
            )

    def _run(self) -> None:
        while not self._done.wait(POLL):
            if self.cancel is not None and self.cancel.is_set():
                reason = "cancelled"
            elif self.expired():
                reason = "deadline"
            else:
                continue
            with self._lock:
                self.fired = reason
                sock = self._socket
            if sock is not None:
                self._shutdown(sock)
            return

    @staticmethod
    def _shutdown(sock: socket.socket) -> None:
        # The plain socket method, also on an SSLSocket: wakes a thread blocked in recv/send.
        try:
            socket.socket.shutdown(sock, socket.SHUT_RDWR)
        except OSError:
            pass


def _connect(addresses: list[tuple[int, Any]], watch: _Watch) -> socket.socket:
    """Connect to the first address that answers, polling so the watchdog's reason stops it."""
    last: OSError | None = None
    for family, sockaddr in addresses:
        sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            sock.setblocking(False)
            code = sock.connect_ex(sockaddr)
            while code in _IN_PROGRESS:
                if watch.fired or watch.expired():
                    raise TimeoutError("connect did not finish")
                _, writable, _ = select.select([], [sock], [], POLL)
                if writable:
                    code = sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
                    break
            if code:
                raise OSError(code, f"connect to {sockaddr[0]} failed: {os.strerror(code)}")
            sock.settimeout(watch.remaining())
            watch.track(sock)
            return sock
        except TimeoutError:
            sock.close()
            raise
        except OSError as exc:
            sock.close()
            last = exc
    assert last is not None
    raise last


class _HTTPConnection(http.client.HTTPConnection):
    """An HTTP connection to addresses resolved (and checked) beforehand, watched by ``_Watch``."""

    def __init__(
        self, host: str, port: int, *, addresses: list[tuple[int, Any]], watch: _Watch
    ) -> None:
        super().__init__(host, port)
        self._addresses = addresses
        self._watch = watch

    def connect(self) -> None:
        self.sock = _connect(self._addresses, self._watch)


class _HTTPSConnection(_HTTPConnection):
    default_port = 443

    def connect(self) -> None:
        global _TLS
        raw = _connect(self._addresses, self._watch)
        _TLS = _TLS or ssl.create_default_context()
        tls = _TLS.wrap_socket(raw, server_hostname=self.host, do_handshake_on_connect=False)
        self._watch.track(tls)
        tls.settimeout(self._watch.remaining())
        tls.do_handshake()
        self.sock = tls
