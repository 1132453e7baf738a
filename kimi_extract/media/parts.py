"""Image and video cells -> ``image_url`` / ``video_url`` content parts.

An image cell is a path (str or ``pathlib.Path``), bytes, a ``PIL.Image.Image``, a numpy array
(uint8, H x W or H x W x 1/3/4), a ``data:`` URL, an http(s) URL, or a list of these. Local data
becomes a base64 data URL:

- png, jpeg, webp and gif are sent as they are when they need no change (size at most
  ``max_image_pixels`` and no EXIF rotation); that path reads only the file header and works
  without Pillow (with Pillow installed the file is also checked for corruption);
- an image larger than ``max_image_pixels`` is downscaled (aspect ratio kept) and re-encoded in its
  own format (a gif becomes a png); one with an EXIF orientation is turned upright;
- other formats Pillow reads (bmp, tiff, ...) are converted: to png when they have transparency or
  a palette, else to jpeg (quality 90).

``DEFAULT_MAX_IMAGE_PIXELS`` is 1,048,576 (1024 x 1024). Kimi bills an image by its 28-pixel
patches (``tokens.image_tokens``: ``ceil(w/28) * ceil(h/28) + 4``), so this caps one image at about
1,370 prompt tokens; a 12-megapixel phone photo would otherwise cost about 15,600. A US-letter PDF
page rendered at that size is about 105 dpi, which keeps ordinary print legible; raise the limit
for dense scans. http(s) URLs pass through unchanged (the server fetches them; their size is not
known here) unless ``fetch_urls=True``, which downloads them and treats the bytes like a local
file (``kimi_extract.media.fetch``): ``fetch_timeout`` seconds for the whole download, at most
``max_fetch_bytes``, cancelled by Ctrl-C, and no loopback, private, link-local, multicast or
reserved address (checked after DNS and on every redirect) unless ``allow_private_urls=True``.

Every image is checked before it is sent: a png, jpeg or webp whose structure ends early
(truncated download, cut file) is refused even without Pillow, and with Pillow it is decoded in
full. Decoding is capped: an image whose header says it has more than ``max_decode_pixels``
(default 50,000,000, about 150-200 MB decoded) is refused before any pixel is decoded; a jpeg is
first reduced by its decoder (1/2, 1/4 or 1/8) when it is to be downscaled anyway, and the cap
applies to the reduced size. Pillow's own limit (``PIL.Image.MAX_IMAGE_PIXELS``) applies too;
either refusal is that row's error.

A video cell (path, bytes, ``data:video/...`` URL or http(s) URL) becomes a ``video_url`` part
(mp4, mpeg, mov, avi, x-flv, webm, wmv, 3gpp, detected from magic bytes, then the extension),
refused above ``max_video_bytes``. In a mixed media cell, a value is a video when its bytes,
extension or data-URL MIME type say so.

Pillow (``pip install -e '.[images]'``) is imported only when an image needs decoding.
Anything unreadable raises ``MediaError``, which becomes that row's ``kx_error``.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import io
import math
import numbers
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Literal

from ..exceptions import ConfigurationError, MediaError, install_hint
from ..kimi import VIDEO_EXTENSIONS  # the video formats Kimi accepts (cited in kimi.py)
from ..records import is_missing
from .fetch import fetch
from .formats import (
    data_url,
    exif_orientation,
    image_size,
    sniff_image_mime,
    sniff_video_mime,
    structure_problem,
)

__all__ = ["media_options"]

Kind = Literal["auto", "image", "video"]

#: 1024 x 1024: at most ~1,370 image tokens (see the module docstring).
DEFAULT_MAX_IMAGE_PIXELS = 1024 * 1024
#: Decoding more would take ~150 MB (RGB) to 200 MB (RGBA) for one image.
DEFAULT_MAX_DECODE_PIXELS = 50_000_000
DEFAULT_MAX_VIDEO_BYTES = 50 * 1024 * 1024
DEFAULT_MAX_FETCH_BYTES = 20 * 1024 * 1024
DEFAULT_FETCH_TIMEOUT = 30.0
JPEG_QUALITY = 90
INSTALL_PILLOW = install_hint("images")

_PIL_FORMATS = {"image/png": "PNG", "image/jpeg": "JPEG", "image/webp": "WEBP"}
_FORMAT_MIMES = {"PNG": "image/png", "JPEG": "image/jpeg", "WEBP": "image/webp"}


@dataclass(frozen=True)
class MediaOptions:
    """How image and video cells become content parts (the media group of the settings).

    ``kx.MediaOptions(max_image_pixels=2_000_000, fetch_urls=True)``;
    ``kimi_extract.media.parts.media_options(...)`` changes them for a block of code.
    """

    max_image_pixels: int | None = DEFAULT_MAX_IMAGE_PIXELS
    """Downscale a larger image (and rendered PDF pages) to this many pixels before sending:
    1024 x 1024 caps one image at about 1,370 prompt tokens. None: never."""

    fetch_urls: bool = False
    """Download http(s) image and video URLs and send them inline (else the server fetches
    them)."""

    fetch_timeout: float = DEFAULT_FETCH_TIMEOUT
    """Seconds for each whole download with ``fetch_urls``, from connect to last byte, redirects
    included."""

    max_fetch_bytes: int = DEFAULT_MAX_FETCH_BYTES
    """Largest image download with ``fetch_urls``, in bytes after decompression."""

    max_video_bytes: int = DEFAULT_MAX_VIDEO_BYTES
    """Largest video, local or downloaded, in bytes."""

    allow_private_urls: bool = False
    """Let ``fetch_urls`` reach loopback, private, link-local, multicast and reserved addresses
    (checked after DNS and on every redirect; refused by default)."""

    max_decode_pixels: int | None = DEFAULT_MAX_DECODE_PIXELS
    """Refuse to decode a larger image (a jpeg counts at its decoder's reduced size); None: only
    Pillow's own limit."""

    def __post_init__(self) -> None:
        for name in ("max_image_pixels", "max_decode_pixels"):
            value = getattr(self, name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 784
            ):
                raise ConfigurationError(
                    f"{name} must be an int of at least 784 (one 28x28 patch) or None, "
                    f"got {value!r}"
                )
        for name in ("fetch_urls", "allow_private_urls"):
            if not isinstance(getattr(self, name), bool):
                value = getattr(self, name)
                raise ConfigurationError(f"{name} must be True or False, got {value!r}")
        timeout = self.fetch_timeout
        if (
            isinstance(timeout, bool)
            or not isinstance(timeout, numbers.Real)
            or not (float(timeout) > 0 and math.isfinite(timeout))
        ):
            raise ConfigurationError(f"fetch_timeout must be a positive number, got {timeout!r}")
        for name in ("max_fetch_bytes", "max_video_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
                raise ConfigurationError(
                    f"{name} must be a positive whole number of bytes, got {value!r}"
                )


_DEFAULT_OPTIONS = MediaOptions()
#: The changes ``media_options`` blocks made, innermost last merged in.
_changes: contextvars.ContextVar[dict[str, Any] | None] = contextvars.ContextVar(
    "kimi_extract_media", default=None
)
#: Set by the run that pulls media rows; a set event stops the download in progress.
_cancel: contextvars.ContextVar[threading.Event | None] = contextvars.ContextVar(
    "kimi_extract_media_cancel", default=None
)


@contextlib.contextmanager
def cancellable(event: threading.Event) -> Iterator[None]:
    """Downloads started inside the block stop (with a ``MediaError``) once ``event`` is set."""
    token = _cancel.set(event)
    try:
        yield
    finally:
        _cancel.reset(token)


def current_options(base: MediaOptions | None = None) -> MediaOptions:
    """``base`` (default: the package defaults) with the changes of enclosing ``media_options``.

    ``Extractor`` passes its own options (``max_image_pixels=``, ``fetch_urls=``) as ``base``, so
    a ``media_options`` block overrides an extractor's settings for the runs started inside it.
    """
    changes = _changes.get()
    base = base or _DEFAULT_OPTIONS
    return replace(base, **changes) if changes else base


@contextlib.contextmanager
def media_options(**changes: Any) -> Iterator[MediaOptions]:
    """Change media options for the runs started inside the block (e.g. ``fetch_urls=True``).

    Applies to ``await ex.arun(...)`` and ``ex.run(...)`` called in the block's thread and task,
    over the extractor's own options; yields the options a default extractor would use.
    """
    merged = {**(_changes.get() or {}), **changes}
    options = replace(_DEFAULT_OPTIONS, **merged)  # validates the values now
    token = _changes.set(merged)
    try:
        yield options
    finally:
        _changes.reset(token)


# -- cells -> parts --------------------------------------------------------------------------------


def media_parts(
    cell: Any, options: MediaOptions | None = None, *, kind: Kind = "auto"
) -> list[dict[str, Any]]:
    """Content parts for one cell (a value or a list of values); raises ``MediaError``.

    ``kind="auto"`` sends each value as an image or a video by what it is; ``"image"`` or
    ``"video"`` insists on one.
    """
    options = options or current_options()
    if is_missing(cell):
        return []
    if _is_sequence(cell):
        return [part for item in cell for part in media_parts(item, options, kind=kind)]
    return [_part(cell, options, kind)]


def image_url(value: Any, options: MediaOptions | None = None) -> str:
    """One image value as a URL (data URL for local data; see the module docstring)."""
    part = _part(value, options or current_options(), "image")
    return str(part["image_url"]["url"])


def video_url(value: Any, options: MediaOptions | None = None) -> str:
    """One video value as a URL (data URL for local data, http(s) passed through)."""
    part = _part(value, options or current_options(), "video")
    return str(part["video_url"]["url"])


def _is_sequence(cell: Any) -> bool:
    if isinstance(cell, list | tuple):
        return True
    # An object array is a list cell read back from parquet; a numeric array is an image.
    return _is_ndarray(cell) and cell.dtype == object


def _is_ndarray(value: Any) -> bool:
    return type(value).__module__ == "numpy" and type(value).__name__ == "ndarray"


def _is_pil_image(value: Any) -> bool:
    return any(
        cls.__module__ == "PIL.Image" and cls.__name__ == "Image" for cls in type(value).__mro__
    )


def _part(value: Any, options: MediaOptions, kind: Kind) -> dict[str, Any]:
    if _is_pil_image(value) or _is_ndarray(value):
        _expect(kind, "image", "an in-memory image")
        return _image_part(_encode_in_memory(value, options))
    if isinstance(value, bytes | bytearray | memoryview):
        return _from_bytes(bytes(value), options, kind, "image bytes")
    if isinstance(value, str) and value.startswith("data:"):
        return _from_data_url(value, options, kind)
    if isinstance(value, str) and value.startswith(("http://", "https://")):
        return _from_http_url(value, options, kind)
    if isinstance(value, str | Path):
        if "\x00" in str(value):
            raise MediaError(f"media path {printable(str(value))!r} contains a NUL byte")
        return _from_path(Path(value), options, kind)
    raise MediaError(
        f"unsupported media value of type {type(value).__name__}; pass a path, bytes, a URL, "
        "a PIL image or a numpy array"
    )


def _expect(kind: Kind, actual: str, what: str) -> None:
    if kind not in ("auto", actual):
        raise MediaError(f"expected a {kind}, got {what} (a {actual})")


def _image_part(url: str) -> dict[str, Any]:
    return {"type": "image_url", "image_url": {"url": url}}


def _video_part(url: str) -> dict[str, Any]:
    return {"type": "video_url", "video_url": {"url": url}}


def _from_bytes(
    data: bytes, options: MediaOptions, kind: Kind, what: str, original: str | None = None
) -> dict[str, Any]:
    video_mime = sniff_video_mime(data) if sniff_image_mime(data) is None else None
    if kind == "video" or (kind == "auto" and video_mime is not None):
        if video_mime is None:
            raise MediaError(f"{what} are not a supported video (mp4, mov, webm, avi, ...)")
        return _video_part(_video_data_url(data, video_mime, options, what, original))
    return _image_part(process_image(data, options, what=what, original=original))


def _from_path(path: Path, options: MediaOptions, kind: Kind) -> dict[str, Any]:
    path = path.expanduser()
    ext_video = VIDEO_EXTENSIONS.get(path.suffix.lower())
    try:
        status = path.stat()
        if stat.S_ISDIR(status.st_mode):
            raise IsADirectoryError
        if not stat.S_ISREG(status.st_mode):
            # /dev/zero, /dev/stdin, a FIFO or socket: endless or blocking, never an image.
            raise MediaError(f"{path} is not a regular file (a device, pipe or socket)")
        if kind == "video" or (kind == "auto" and ext_video):
            if status.st_size > options.max_video_bytes:
                raise MediaError(_too_big(f"video {path}", status.st_size, options.max_video_bytes))
        data = path.read_bytes()
    except FileNotFoundError:
        raise MediaError(f"media file not found: {path}") from None
    except IsADirectoryError:
        raise MediaError(f"{path} is a directory, not a media file") from None
    except OSError as exc:
        raise MediaError(f"cannot read media file {path}: {exc.strerror}") from None
    except ValueError as exc:  # e.g. a path the OS cannot represent
        raise MediaError(f"cannot read media file {printable(str(path))!r}: {exc}") from None
    if (kind == "video" or (kind == "auto" and ext_video)) and sniff_image_mime(data) is None:
        mime = sniff_video_mime(data) or ext_video
        if mime is None:
            raise MediaError(f"{path} is not a supported video (mp4, mov, webm, avi, ...)")
        return _video_part(_video_data_url(data, mime, options, str(path)))
    return _from_bytes(data, options, kind, str(path))


def _from_data_url(url: str, options: MediaOptions, kind: Kind) -> dict[str, Any]:
    header, sep, payload = url.partition(",")
    if (
        not sep
        or not header.endswith(";base64")
        or not header.startswith(("data:image/", "data:video/"))
    ):
        raise MediaError(f"not a base64 image or video data URL: {url[:40]}...")
    declared = header[5:-7]
    if declared.startswith("video/"):
        _expect(kind, "video", "a video data URL")
        size = len(payload.rstrip("=")) * 3 // 4
        if size > options.max_video_bytes:
            raise MediaError(_too_big("video data URL", size, options.max_video_bytes))
        return _video_part(url)
    _expect(kind, "image", "an image data URL")
    try:
        data = base64.b64decode(payload, validate=True)
    except (binascii.Error, ValueError):
        raise MediaError("image data URL is not valid base64") from None
    return _image_part(process_image(data, options, what="image data URL", original=url))


def _from_http_url(url: str, options: MediaOptions, kind: Kind) -> dict[str, Any]:
    suffix = Path(url.split("?", 1)[0].split("#", 1)[0]).suffix.lower()
    is_video = kind == "video" or (kind == "auto" and suffix in VIDEO_EXTENSIONS)
    if not options.fetch_urls:
        return _video_part(url) if is_video else _image_part(url)
    limit = options.max_video_bytes if is_video else options.max_fetch_bytes
    data, content_type = fetch(
        url,
        timeout=options.fetch_timeout,
        max_bytes=limit,
        allow_private=options.allow_private_urls,
        cancel=_cancel.get(),
    )
    if kind == "auto" and not is_video:
        is_video = content_type.startswith("video/") or (
            sniff_image_mime(data) is None and sniff_video_mime(data) is not None
        )
    if is_video:
        mime = sniff_video_mime(data) or VIDEO_EXTENSIONS.get(suffix)
        if mime is None:
            raise MediaError(f"{url} is not a supported video (mp4, mov, webm, avi, ...)")
        return _video_part(_video_data_url(data, mime, options, url))
    return _image_part(process_image(data, options, what=url))


def _video_data_url(
    data: bytes, mime: str, options: MediaOptions, what: str, original: str | None = None
) -> str:
    if len(data) > options.max_video_bytes:
        raise MediaError(_too_big(f"video {what}", len(data), options.max_video_bytes))
    return original or data_url(data, mime)


def _too_big(what: str, size: int, limit: int) -> str:
    return (
        f"{what} is {size / 2**20:.1f} MiB, over the {limit / 2**20:.1f} MiB limit "
        "(raise max_video_bytes / max_fetch_bytes, or pass a URL)"
    )


# -- images ------------------------------------------------------------------------------------


def process_image(
    data: bytes, options: MediaOptions, *, what: str = "image", original: str | None = None
) -> str:
    """An image's bytes as a data URL, upright, within ``max_image_pixels``, in a sent format.

    ``original`` (a data URL of the same bytes) is returned as it is when nothing changes.
    Refuses (``MediaError``) a truncated or corrupt image and one over ``max_decode_pixels``.
    """
    mime = sniff_image_mime(data)
    if mime is not None:
        problem = structure_problem(data, mime)
        if problem is not None:
            raise MediaError(f"{what} is corrupt: {problem}")
    size = image_size(data) if mime else None
    limit = options.max_image_pixels
    orientation = exif_orientation(data) if mime else 1
    if mime and size and orientation == 1 and (limit is None or _area(size) <= limit):
        pil = _pillow(required=False)
        if pil is not None:
            _verify(pil, data, what, decode=_decodable(size, options))
        if original is not None and original.startswith(f"data:{mime};"):
            return original
        return data_url(data, mime)
    if mime is None and not _pillow_available():
        raise MediaError(
            f"{what} is not png, jpeg, webp or gif; converting other formats needs Pillow: "
            f"{INSTALL_PILLOW}"
        )
    if size is not None and mime != "image/jpeg":  # a jpeg may decode smaller: checked in _encode
        _check_decode(size, options, what)
    if size is None:
        why = f"reading {what}"
    elif orientation != 1:
        why = f"turning {what} upright (EXIF orientation)"
    else:
        why = f"downscaling {what} to max_image_pixels={limit:,}"
    pil = _pillow(required=True, why=why)
    try:
        with pil.open(io.BytesIO(data)) as opened:
            return _encode(opened, options, source_mime=mime, opened_here=what)
    except MediaError:
        raise
    except Exception as exc:  # Pillow raises many types for unreadable data
        raise MediaError(f"{what} is not a readable image: {_reason(exc)}") from None


def _decodable(size: tuple[int, int], options: MediaOptions) -> bool:
    return options.max_decode_pixels is None or _area(size) <= options.max_decode_pixels


def _check_decode(size: tuple[int, int], options: MediaOptions, what: str) -> None:
    """Refuse, before decoding, an image larger than ``max_decode_pixels``."""
    if not _decodable(size, options):
        width, height = size
        raise MediaError(
            f"{what} is {width:,} x {height:,} = {_area(size) / 1e6:.1f} megapixels, over "
            f"max_decode_pixels={options.max_decode_pixels:,}; decoding it would take about "
            f"{_area(size) * 4 / 2**20:,.0f} MiB. Downscale it first, or raise max_decode_pixels"
        )


def _encode_in_memory(value: Any, options: MediaOptions) -> str:
    pil = _pillow(required=True, why="encoding an in-memory image")
    if _is_ndarray(value):
        value = _from_array(pil, value)
    source_mime = _FORMAT_MIMES.get(str(getattr(value, "format", None) or ""), "image/png")
    try:
        return _encode(value, options, source_mime=source_mime)
    except MediaError:
        raise
    except Exception as exc:
        raise MediaError(f"cannot encode the image: {_reason(exc)}") from None


def _from_array(pil: Any, array: Any) -> Any:
    if array.dtype == bool:
        array = array.astype("uint8") * 255
    if str(array.dtype) != "uint8":
        raise MediaError(
            f"numpy image arrays must be uint8 (0-255), got {array.dtype}; convert with "
            "(array * 255).clip(0, 255).astype('uint8') or similar"
        )
    if array.ndim == 3 and array.shape[2] == 1:
        array = array[:, :, 0]
    if not (array.ndim == 2 or (array.ndim == 3 and array.shape[2] in (3, 4))):
        raise MediaError(f"numpy image must be H x W or H x W x 1/3/4, got shape {array.shape}")
    return pil.fromarray(array)


def _encode(
    image: Any, options: MediaOptions, *, source_mime: str | None, opened_here: str | None = None
) -> str:
    """Turn upright, downscale, and encode a Pillow image as a data URL.

    ``opened_here`` (what the image is, for messages): the image was opened here from bytes
    and not yet decoded, so a JPEG decoder may decode it at a reduced size, and
    ``max_decode_pixels`` is checked before decoding.
    """
    pil = _pillow(required=True)
    from PIL import ImageOps

    limit = options.max_image_pixels
    width, height = image.size
    if opened_here is not None:
        if limit is not None and width * height > limit and image.format == "JPEG":
            # Let the JPEG decoder skip detail we would throw away (less memory, much faster).
            scale = math.sqrt(limit / (width * height))
            image.draft("RGB", (max(1, int(width * scale)), max(1, int(height * scale))))
        _check_decode(image.size, options, opened_here)
    image.load()
    upright = ImageOps.exif_transpose(image) or image
    width, height = upright.size
    if limit is not None and width * height > limit:
        scale = math.sqrt(limit / (width * height))
        new_size = (max(1, math.floor(width * scale)), max(1, math.floor(height * scale)))
        upright = upright.resize(new_size, pil.Resampling.LANCZOS)
    fmt = _PIL_FORMATS.get(source_mime or "")
    if fmt is None:  # gif or a format the API does not take
        alpha = upright.mode in ("RGBA", "LA", "PA") or "transparency" in upright.info
        fmt = "PNG" if alpha or upright.mode in ("1", "P") or source_mime == "image/gif" else "JPEG"
    out = io.BytesIO()
    if fmt == "JPEG":
        if upright.mode not in ("RGB", "L"):
            upright = upright.convert("RGB")
        upright.save(out, "JPEG", quality=JPEG_QUALITY)
    elif fmt == "WEBP":
        if upright.mode not in ("RGB", "RGBA"):
            upright = upright.convert("RGBA")
        upright.save(out, "WEBP", quality=JPEG_QUALITY)
    else:
        if upright.mode not in ("1", "L", "LA", "P", "RGB", "RGBA", "I;16"):
            upright = upright.convert("RGBA")
        upright.save(out, "PNG")
    return data_url(out.getvalue(), _FORMAT_MIMES[fmt])


def _verify(pil: Any, data: bytes, what: str, *, decode: bool) -> None:
    """Pillow's structural check, then (within ``max_decode_pixels``) a full decode."""
    try:
        with pil.open(io.BytesIO(data)) as image:
            image.verify()
        if decode:
            with pil.open(io.BytesIO(data)) as image:
                image.load()
    except Exception as exc:
        raise MediaError(f"{what} is corrupt: {_reason(exc)}") from None


def printable(text: str) -> str:
    """``text`` with lone surrogates (not valid UTF-8) escaped, safe for errors and files."""
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


def _reason(exc: BaseException) -> str:
    reason = f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
    if "DecompressionBomb" in type(exc).__name__:
        reason += " (Pillow's PIL.Image.MAX_IMAGE_PIXELS; kimi_extract's cap is max_decode_pixels)"
    return reason


def _area(size: tuple[int, int]) -> int:
    return size[0] * size[1]


def _pillow_available() -> bool:
    return _pillow(required=False) is not None


def _pillow(*, required: bool, why: str = "processing images") -> Any:
    """``PIL.Image``, imported on first use; None (or ``MediaError`` if required) when missing."""
    try:
        from PIL import Image
    except ImportError:
        if required:
            raise MediaError(f"{why} needs Pillow: {INSTALL_PILLOW}") from None
        return None
    return Image
