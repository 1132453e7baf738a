"""Where the result store is: ``store=`` and the environment resolved to a file or a database.

``resolve(store)``: a path (an SQLite file), a PostgreSQL URL ``"postgresql://user@host/db"``
(held as a ``StoreURL``, which never shows its password), ``True``/None for the default location,
or False to disable. The default is ``$KIMI_EXTRACT_STORE`` when it holds a PostgreSQL URL, else
the file ``$KIMI_EXTRACT_STORE_DIR`` or the user cache directory (``$XDG_CACHE_HOME/kimi_extract``,
``~/.cache/kimi_extract``; ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) /
``results.sqlite3``. ``KIMI_EXTRACT_STORE=0`` (or off/false/no) disables the default store (an
explicit ``store=`` still wins). The old names ``KIMI_EXTRACT_CACHE`` / ``KIMI_EXTRACT_CACHE_DIR``
still work for one release, with a ``DeprecationWarning`` (a new name that is set wins).

Opening and using a store is ``run.store``'s; this module only says where it is, so the settings
(``ExtractorConfig.store_path``) sit below the run.
"""

from __future__ import annotations

import os
import re
import sys
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

from ..exceptions import ConfigurationError

__all__ = [
    "DIR_ENV",
    "DISABLE_ENV",
    "FILENAME",
    "POSTGRES_SCHEMES",
    "Location",
    "StoreURL",
    "default_path",
    "is_store_url",
    "resolve",
    "scrub_urls",
]

#: URL schemes of a PostgreSQL store (``store="postgresql://user@host/db"``).
POSTGRES_SCHEMES = ("postgresql", "postgres")
#: Query parameters of a libpq URL that hold a secret (shown as ``***``).
_SECRET_PARAMS = frozenset({"password", "sslpassword"})

DISABLE_ENV = "KIMI_EXTRACT_STORE"
DIR_ENV = "KIMI_EXTRACT_STORE_DIR"
#: Deprecated environment variables -> their new names (read for one release, with a warning).
OLD_ENV = {"KIMI_EXTRACT_CACHE": DISABLE_ENV, "KIMI_EXTRACT_CACHE_DIR": DIR_ENV}
FILENAME = "results.sqlite3"


def _env(name: str) -> str | None:
    """Environment variable ``name``, else its deprecated old name (with a DeprecationWarning)."""
    value = os.environ.get(name)
    if value is not None:
        return value
    for old, new in OLD_ENV.items():
        if new == name and old in os.environ:
            warnings.warn(
                f"the environment variable {old} is deprecated: use {new}",
                DeprecationWarning,
                stacklevel=3,
            )
            return os.environ[old]
    return None


def default_path() -> Path:
    """The default store file (see the module docstring)."""
    override = _env(DIR_ENV)
    if override:
        return Path(override).expanduser() / FILENAME
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Caches"
    elif os.name == "nt":
        base = Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    else:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "kimi_extract" / FILENAME


def resolve(store: str | os.PathLike[str] | StoreURL | bool | None) -> Location | None:
    """The store for an ``Extractor(store=...)`` value: a file path, a PostgreSQL URL
    (``StoreURL``), or None when disabled. ``ConfigurationError`` for a malformed URL, naming
    ``store`` or ``KIMI_EXTRACT_STORE``."""
    if store is False:
        return None
    if store is None or store is True:
        chosen = (_env(DISABLE_ENV) or "").strip()
        if chosen.lower() in ("0", "off", "false", "no"):
            return None
        if is_store_url(chosen):
            return StoreURL(chosen, DISABLE_ENV)
        return default_path()
    if is_store_url(store):
        return store if isinstance(store, StoreURL) else StoreURL(str(store))
    assert not isinstance(store, StoreURL)
    return Path(store).expanduser()


def is_store_url(value: object) -> bool:
    """Whether ``value`` names a PostgreSQL store (``postgresql://...`` or ``postgres://...``)."""
    if isinstance(value, StoreURL):
        return True
    if not isinstance(value, str):
        return False
    scheme, sep, _ = value.strip().partition("://")
    return bool(sep) and scheme.lower() in POSTGRES_SCHEMES


class StoreURL:
    """A PostgreSQL store's URL: ``str()`` and ``repr()`` show it with its password as ``***``.

    ``reveal()`` gives the URL itself, for the connection only. Checked when made: a scheme of
    ``POSTGRES_SCHEMES`` and a database name (or a ``dbname=`` parameter); otherwise a
    ``ConfigurationError`` naming ``setting``, never echoing the password. ``redact(text)``
    removes the password (plain or percent-encoded) from any text, such as a driver's error.
    """

    __slots__ = ("_url", "_shown", "_secrets")
    _secrets: tuple[str, ...]

    def __init__(self, url: str, setting: str = "store") -> None:
        if isinstance(url, StoreURL):
            url = url.reveal()
        url = url.strip()
        self._url = url
        secrets: list[str] = []
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018  (a port out of range or not a number raises ValueError)
            if parts.password:
                secrets.append(parts.password)
            query = parse_qsl(parts.query, keep_blank_values=True)
        except ValueError:
            self._secrets = (url,)
            self._shown = "postgresql://***"
            raise ConfigurationError(
                f"{setting} is not a valid PostgreSQL URL (a bad port or IPv6 brackets); write "
                "it as postgresql://user@host:5432/dbname"
            ) from None
        secrets += [value for name, value in query if name.lower() in _SECRET_PARAMS and value]
        forms = (
            form
            for secret in secrets
            for form in (secret, unquote(secret), quote(unquote(secret), safe=""))
        )
        # The longest first: a form that contains another is replaced whole.
        self._secrets = tuple(sorted(dict.fromkeys(f for f in forms if f), key=len, reverse=True))
        netloc = parts.netloc
        if parts.password is not None:
            user, _, host = netloc.rpartition("@")
            netloc = user.partition(":")[0] + ":***@" + host
        shown_query = urlencode(
            [(n, "***" if n.lower() in _SECRET_PARAMS else v) for n, v in query], safe="/:,*"
        )
        self._shown = urlunsplit((parts.scheme.lower(), netloc, parts.path, shown_query, ""))
        database = unquote(parts.path.lstrip("/")) or dict(query).get("dbname", "")
        if parts.scheme.lower() not in POSTGRES_SCHEMES or not database:
            raise ConfigurationError(
                f"{setting} must be a PostgreSQL URL with a database name, such as "
                f"postgresql://user@host:5432/dbname; got {self._shown!r}"
            )

    def reveal(self) -> str:
        """The URL with its password: for the database connection only."""
        return self._url

    def redact(self, text: str) -> str:
        """``text`` with the password (plain or percent-encoded) replaced by ``***``."""
        for secret in self._secrets:
            text = text.replace(secret, "***")
        return text

    def __str__(self) -> str:
        return self._shown

    def __repr__(self) -> str:
        return f"StoreURL({self._shown!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, StoreURL) and other._url == self._url

    def __hash__(self) -> int:
        return hash(("StoreURL", self._url))

    def __reduce__(self) -> tuple[Any, ...]:
        # Shipped whole (a Dask worker connects with it), as the API key's ``Secret`` is.
        return (StoreURL, (self._url,))


_PASSWORD_IN_URL = re.compile(r"(?i)(postgres(?:ql)?://[^:/@\s]*:)[^@\s]*@")


def scrub_urls(text: str) -> str:
    """``text`` with the password of any PostgreSQL URL in it replaced by ``***``."""
    return _PASSWORD_IN_URL.sub(r"\1***@", text)


#: A store's location: an SQLite file or a PostgreSQL database.
Location = Path | StoreURL
