"""Media formats at the byte level, without Pillow: MIME sniffing, image size, EXIF orientation.

Also ``data_url`` and a small PNG encoder (``png_bytes``, for rendered PDF pages). MIME names for
video follow docs/reference/KIMI-NOTES.md, "Media": mp4, mpeg, mov, avi, x-flv, mpg, webm, wmv,
3gpp.
"""

from __future__ import annotations

import base64
import struct
import zlib
from collections.abc import Iterator


def sniff_image_mime(data: bytes) -> str | None:
    """The image MIME type from magic bytes (png, jpeg, gif, webp), or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data[:6] in (b"GIF87a", b"GIF89a"):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


def sniff_video_mime(data: bytes) -> str | None:
    """The video MIME type from magic bytes (the API's names: video/mov, video/avi...), or None."""
    if data[4:8] == b"ftyp":
        brand = data[8:12]
        if brand == b"qt  ":
            return "video/mov"
        if brand.startswith((b"3gp", b"3g2")):
            return "video/3gpp"
        return "video/mp4"
    if data.startswith(b"\x1a\x45\xdf\xa3"):
        return "video/webm" if b"webm" in data[:64] else None  # other Matroska is not accepted
    if data[:4] == b"RIFF" and data[8:12] == b"AVI ":
        return "video/avi"
    if data.startswith(b"FLV\x01"):
        return "video/x-flv"
    if data.startswith(b"\x30\x26\xb2\x75\x8e\x66\xcf\x11"):
        return "video/wmv"
    if data[:4] in (b"\x00\x00\x01\xba", b"\x00\x00\x01\xb3"):
        return "video/mpeg"
    return None


def image_size(data: bytes) -> tuple[int, int] | None:
    """(width, height) read from a png/gif/webp/jpeg header, or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) >= 24:
        width, height = struct.unpack(">II", data[16:24])
        return (width, height) if width and height else None
    if data[:6] in (b"GIF87a", b"GIF89a") and len(data) >= 10:
        width, height = struct.unpack("<HH", data[6:10])
        return (width, height) if width and height else None
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP" and len(data) >= 30:
        chunk = data[12:16]
        if chunk == b"VP8 ":
            width, height = struct.unpack("<HH", data[26:30])
            return width & 0x3FFF, height & 0x3FFF
        if chunk == b"VP8L":
            bits = int.from_bytes(data[21:25], "little")
            return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
        if chunk == b"VP8X":
            return int.from_bytes(data[24:27], "little") + 1, int.from_bytes(
                data[27:30], "little"
            ) + 1
        return None
    if data.startswith(b"\xff\xd8"):
        for marker, segment in _jpeg_segments(data):
            if 0xC0 <= marker <= 0xCF and marker not in (0xC4, 0xC8, 0xCC) and len(segment) >= 5:
                height, width = struct.unpack(">HH", segment[1:5])
                return (width, height) if width and height else None
    return None


def structure_problem(data: bytes, mime: str) -> str | None:
    """Why a png, jpeg or webp is cut short or malformed at the container level, or None.

    Cheap (no pixel is decoded) and independent of Pillow: a jpeg needs a start of scan and an
    end-of-image marker after it; a png a chain of whole chunks up to IEND, with IDAT; a webp as
    many bytes as its RIFF header declares. gif is left to Pillow (its trailer byte can occur in
    image data, so a missing one proves nothing cheap).
    """
    if mime == "image/jpeg":
        scan = _jpeg_scan_start(data)
        if scan is None:
            return "jpeg header is cut short or malformed (no start of scan)"
        if data.find(b"\xff\xd9", scan) < 0:
            return "jpeg is truncated (no end-of-image marker after the image data)"
        return None
    if mime == "image/png":
        offset, seen_data = 8, False
        while offset + 12 <= len(data):
            length, chunk = struct.unpack(">I4s", data[offset : offset + 8])
            if offset + 12 + length > len(data):
                break
            if chunk == b"IDAT":
                seen_data = True
            if chunk == b"IEND":
                return None if seen_data else "png has no image data (IDAT)"
            offset += 12 + length
        return "png is truncated (no IEND chunk)"
    if mime == "image/webp":
        declared = int.from_bytes(data[4:8], "little") + 8
        if len(data) < declared:
            return f"webp is truncated ({len(data):,} of {declared:,} bytes)"
    return None


def _jpeg_markers(data: bytes) -> Iterator[tuple[int, int, int]]:
    """(offset, marker, segment length) of the JPEG's markers, up to and including SOS or EOI.

    Stops early (without SOS/EOI) where the header bytes end or stop looking like markers.
    SOS and EOI are yielded with length 0: what follows them is not a header segment.
    """
    offset = 2
    while offset + 4 <= len(data):
        if data[offset] != 0xFF:
            return
        marker = data[offset + 1]
        if marker == 0xFF:
            offset += 1
            continue
        if marker in (0xD8, 0x01) or 0xD0 <= marker <= 0xD7:
            offset += 2
            continue
        if marker in (0xDA, 0xD9):
            yield offset, marker, 0
            return
        (length,) = struct.unpack(">H", data[offset + 2 : offset + 4])
        yield offset, marker, length
        offset += 2 + length


def _jpeg_scan_start(data: bytes) -> int | None:
    """The offset of the jpeg's first start-of-scan marker, or None when the headers end first."""
    for offset, marker, _ in _jpeg_markers(data):
        if marker == 0xDA:
            return offset
    return None


def _jpeg_segments(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(marker, payload) of the JPEG header segments, up to the start of scan."""
    for offset, marker, length in _jpeg_markers(data):
        if marker not in (0xDA, 0xD9):
            yield marker, data[offset + 4 : offset + 2 + length]


def exif_orientation(data: bytes) -> int:
    """The EXIF orientation (1-8) of a jpeg, png or webp; 1 when absent or unreadable."""
    tiff: bytes | None = None
    if data.startswith(b"\xff\xd8"):
        for marker, segment in _jpeg_segments(data):
            if marker == 0xE1 and segment.startswith(b"Exif\x00\x00"):
                tiff = segment[6:]
                break
    elif data.startswith(b"\x89PNG\r\n\x1a\n"):
        offset = 8
        while offset + 8 <= len(data):
            length, chunk = struct.unpack(">I4s", data[offset : offset + 8])
            if chunk == b"eXIf":
                tiff = data[offset + 8 : offset + 8 + length]
                break
            if chunk == b"IDAT":
                break
            offset += 12 + length
    elif data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        offset = 12
        while offset + 8 <= len(data):
            chunk, length = (
                data[offset : offset + 4],
                int.from_bytes(data[offset + 4 : offset + 8], "little"),
            )
            if chunk == b"EXIF":
                tiff = data[offset + 8 : offset + 8 + length]
                tiff = tiff[6:] if tiff.startswith(b"Exif\x00\x00") else tiff
                break
            offset += 8 + length + (length & 1)
    return _tiff_orientation(tiff) if tiff else 1


def _tiff_orientation(tiff: bytes) -> int:
    if tiff[:2] not in (b"II", b"MM") or len(tiff) < 8:
        return 1
    order = "<" if tiff[:2] == b"II" else ">"
    (ifd,) = struct.unpack(order + "I", tiff[4:8])
    if ifd + 2 > len(tiff):
        return 1
    (count,) = struct.unpack(order + "H", tiff[ifd : ifd + 2])
    for i in range(count):
        entry = tiff[ifd + 2 + 12 * i : ifd + 14 + 12 * i]
        if len(entry) < 12:
            break
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag == 0x0112 and kind == 3:
            (value,) = struct.unpack(order + "H", entry[8:10])
            return value if 1 <= value <= 8 else 1
    return 1


def data_url(data: bytes, mime: str) -> str:
    """A base64 data URL."""
    return f"data:{mime};base64,{base64.b64encode(data).decode('ascii')}"


def png_bytes(
    pixels: bytes | memoryview, width: int, height: int, *, channels: int, stride: int
) -> bytes:
    """Encode raw 8-bit rows (1 = gray, 3 = RGB, 4 = RGBA channels) as a PNG, without Pillow."""
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    view = memoryview(pixels)
    row_bytes = width * channels
    raw = b"".join(
        b"\x00" + view[y * stride : y * stride + row_bytes].tobytes() for y in range(height)
    )

    def chunk(kind: bytes, payload: bytes) -> bytes:
        body = kind + payload
        return struct.pack(">I", len(payload)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, color_type, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(raw, 6))
        + chunk(b"IEND", b"")
    )
