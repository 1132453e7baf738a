"""Where requests go and with which key: ``base_url`` and ``api_key``, checked and resolved.

``base_url`` is an ``http(s)://`` URL with a host and no user info, query or fragment
(``check_base_url``; an error never echoes what came before an ``@``), or ``"simulator"`` (given
in code only, never read from the environment): the bundled simulator, started once per process
(``kimi_extract.shared_simulator``), with no key (none is read; passing one is an error). What was
not given is read from the environment once (``resolve_endpoint``): ``KIMI_BASE_URL``, then the
key from ``KIMI_API_KEY`` or ``EVOLINK_API_KEY``, held as a ``Secret`` (never shown in a repr).
"""

from __future__ import annotations

import functools
import ipaddress
import os
import re
import socket
from collections.abc import Callable
from urllib.parse import urlsplit

from ..exceptions import ConfigurationError
from ..http.secret import Secret
from ..kimi import SIMULATOR_BASE_URL

__all__ = [
    "API_KEY_ENV_VARS",
    "BASE_URL_ENV_VAR",
    "check_base_url",
    "is_local_endpoint",
    "resolve_endpoint",
    "simulator_endpoint",
]

API_KEY_ENV_VARS = ("KIMI_API_KEY", "EVOLINK_API_KEY")
BASE_URL_ENV_VAR = "KIMI_BASE_URL"

#: Starts the bundled simulator (once per process) and returns its ``(base_url, api_key)``, for
#: ``base_url="simulator"``. Installed by ``kimi_extract.shared_simulator``, which the package
#: imports: nothing below the package's shells imports the simulator (tests/package/test_layers.py).
simulator_starter: Callable[[], tuple[str, str]] | None = None


def simulator_endpoint() -> tuple[str, str]:
    """The bundled simulator's ``(base_url, api_key)``, starting it on first use."""
    if simulator_starter is None:  # only when kimi_extract.shared_simulator failed to import
        raise ConfigurationError("base_url='simulator': the bundled simulator is not available")
    return simulator_starter()


def resolve_endpoint(
    base_url: str | None, api_key: str | Secret | None
) -> tuple[str | None, Secret | None]:
    """``(base_url, key)`` with what was not given read from the environment, both checked.

    ``KIMI_BASE_URL=simulator`` is refused (the simulator is chosen in code only, so a leftover
    variable never sends a real run to it); with ``base_url="simulator"`` no key is read and
    passing one is an error.
    """
    base_url = base_url or None
    if base_url is None:
        base_url = os.environ.get(BASE_URL_ENV_VAR) or None
        if base_url == SIMULATOR_BASE_URL:
            raise ConfigurationError(
                f"{BASE_URL_ENV_VAR}={SIMULATOR_BASE_URL!r} is not read from the environment: "
                "choose the simulator in code (base_url='simulator') or with the CLI's "
                "--simulate, so a leftover variable never sends a real run to it"
            )
        if base_url is not None:
            check_base_url(base_url, BASE_URL_ENV_VAR)
    key: str | Secret | None
    if base_url == SIMULATOR_BASE_URL:
        # The bundled simulator has its own key; a real key is neither needed nor read.
        if api_key is not None:
            raise ConfigurationError(
                "api_key: base_url='simulator' uses the bundled simulator's own key; drop "
                "api_key= (or pass the real endpoint's base_url)"
            )
        key = None
    else:
        key = api_key or next((os.environ[v] for v in API_KEY_ENV_VARS if os.environ.get(v)), None)
    return base_url, Secret(key) if isinstance(key, str) else key


def check_base_url(url: object, setting: str) -> None:
    """Refuse a base URL no request could use, naming ``setting``; never echo credentials.

    It must be ``"simulator"`` (the bundled simulator) or an ``http://`` / ``https://`` URL with
    a host (and optionally a port and a path, such as ``https://api.example.com/v1``), without
    user info (``user:key@host``: pass the key as ``api_key``), query or fragment.
    """
    if url == SIMULATOR_BASE_URL and setting == "base_url":
        return
    if not isinstance(url, str):
        raise ConfigurationError(f"{setting} must be a string or None, got {type(url).__name__}")
    shown = _without_secrets(url)
    example = "such as 'https://api.example.com' or 'http://127.0.0.1:8000'"
    if any(c.isspace() or not c.isprintable() for c in url):
        raise ConfigurationError(f"{setting} holds spaces or control characters: {shown!r}")
    if "@" in url:
        raise ConfigurationError(
            f"{setting} must not hold credentials (user info before '@'): pass the key as "
            f"api_key= or in {API_KEY_ENV_VARS[0]}; got {shown!r}"
        )
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises ValueError for a port out of range or not a number)
    except ValueError:
        raise ConfigurationError(
            f"{setting} is not a valid URL (a bad port or IPv6 brackets): {shown!r}"
        ) from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise ConfigurationError(
            f"{setting} must be an http:// or https:// URL with a host, {example}; got {shown!r}"
            + (" (or 'simulator' for the bundled simulator)" if setting == "base_url" else "")
        )
    if parts.query or parts.fragment:
        raise ConfigurationError(
            f"{setting} takes no query or fragment (requests go to its /v1/chat/completions); "
            f"got {shown!r}"
        )


def _without_secrets(url: str) -> str:
    """``url`` as an error may show it: anything up to an ``@`` (user info: a key) and the query
    or fragment hidden."""
    if "@" in url:
        scheme = re.match(r"(?i)https?://", url)
        url = (scheme.group(0) if scheme else "") + "***@" + url.rpartition("@")[2]
    return re.sub(r"[?#].*", "?...", url, flags=re.S)


def is_local_endpoint(url: str | None) -> bool:
    """True for a server on this machine: the one rule for "no default store" and for the
    ``loopback`` store endpoint.

    Local: the bundled simulator (``base_url="simulator"``), ``localhost`` and ``*.localhost``,
    loopback addresses (127.0.0.0/8, ``::1``, ``::ffff:127.0.0.1``), the unspecified addresses
    (``0.0.0.0``, ``::``: a connection to them reaches this machine), this machine's host name
    (``socket.gethostname()``, also its first label) and any address assigned to this machine.
    No DNS lookup is made.
    """
    if not url:
        return False
    if url.strip() == SIMULATOR_BASE_URL:
        return True
    try:
        host = (urlsplit(url.strip()).hostname or "").lower()
    except ValueError:
        return False
    return bool(host) and _is_local_host(host.rstrip("."))


@functools.lru_cache(maxsize=64)
def _is_local_host(host: str) -> bool:
    if host == "localhost" or host.endswith(".localhost"):
        return True
    own = socket.gethostname().lower()
    if host in (own, own.split(".")[0]):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
        address = address.ipv4_mapped
    if address.is_loopback or address.is_unspecified:
        return True
    # An address this machine holds can be bound to; any other cannot (EADDRNOTAVAIL).
    family = socket.AF_INET6 if address.version == 6 else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as probe:
            probe.bind((str(address), 0))
    except OSError:
        return False
    return True
