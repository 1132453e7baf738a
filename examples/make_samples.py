"""Generate the small sample files the examples use (deterministic; needs Pillow).

    python examples/make_samples.py            # writes examples/images/ and examples/docs/

images/: Pillow-drawn pictures (a png, a jpeg whose EXIF says "rotate 90 degrees", a webp and a
bmp that gets converted to a sent format). docs/: PDFs with real text layers (Helvetica text
written by the small PDF writer below, so pypdfium2 reads it back) and one scanned page (a JPEG of
a printed table with no text layer), plus .txt, .md and .html documents.

``write_pdf`` is reused by the tests to build PDFs on the fly.
"""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: A text item on a PDF page: (x, y, font size, text), in points from the bottom-left corner.
TextItem = tuple[float, float, float, str]
PAGE_SIZE = (612, 792)  # US letter, points

INVOICE_ROWS = [
    ("Espresso beans 1 kg", 2, 18.50),
    ("Oat milk 1 l", 6, 2.10),
    ("Paper cups (100)", 3, 7.95),
    ("Descaling tablets", 1, 12.00),
]
SCANNED_ROWS = [("Grinder burr set", 1, 44.00), ("Cleaning brush", 4, 3.25)]


def _escape(text: str) -> bytes:
    raw = text.encode("cp1252", "replace")
    return raw.replace(b"\\", b"\\\\").replace(b"(", b"\\(").replace(b")", b"\\)")


def write_pdf(path: Path | None, pages: Sequence[Sequence[TextItem] | bytes]) -> bytes:
    """A minimal PDF: each page is a list of text items (a text layer) or JPEG bytes (a scan).

    Returns the bytes and writes them to ``path`` when given.
    """
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    catalog = add(b"")  # filled in below, once the page tree exists
    tree = add(b"")
    font = add(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>")
    width, height = PAGE_SIZE
    kids: list[int] = []
    for page in pages:
        resources = f"/Font << /F1 {font} 0 R >>".encode()
        if isinstance(page, bytes):
            img_w, img_h = _jpeg_size(page)
            image = add(
                f"<< /Type /XObject /Subtype /Image /Width {img_w} /Height {img_h} "
                f"/ColorSpace /DeviceRGB /BitsPerComponent 8 /Filter /DCTDecode "
                f"/Length {len(page)} >>\nstream\n".encode()
                + page
                + b"\nendstream"
            )
            resources += f" /XObject << /Im1 {image} 0 R >>".encode()
            stream = f"q {width} 0 0 {height} 0 0 cm /Im1 Do Q".encode()
        else:
            lines = [b"BT"]
            for x, y, size, text in page:
                lines.append(f"/F1 {size:g} Tf 1 0 0 1 {x:g} {y:g} Tm (".encode())
                lines[-1] += _escape(text) + b") Tj"
            lines.append(b"ET")
            stream = b"\n".join(lines)
        contents = add(f"<< /Length {len(stream)} >>\nstream\n".encode() + stream + b"\nendstream")
        kids.append(
            add(
                f"<< /Type /Page /Parent {tree} 0 R /MediaBox [0 0 {width} {height}] "
                f"/Contents {contents} 0 R /Resources << ".encode()
                + resources
                + b" >> >>"
            )
        )
    objects[catalog - 1] = f"<< /Type /Catalog /Pages {tree} 0 R >>".encode()
    refs = " ".join(f"{k} 0 R" for k in kids)
    objects[tree - 1] = f"<< /Type /Pages /Kids [{refs}] /Count {len(kids)} >>".encode()
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += f"{number} 0 obj\n".encode() + body + b"\nendobj\n"
    xref = len(out)
    out += f"xref\n0 {len(objects) + 1}\n0000000000 65535 f \n".encode()
    out += b"".join(f"{offset:010d} 00000 n \n".encode() for offset in offsets)
    out += f"trailer\n<< /Size {len(objects) + 1} /Root {catalog} 0 R >>\n".encode()
    out += f"startxref\n{xref}\n%%EOF\n".encode()
    data = bytes(out)
    if path is not None:
        path.write_bytes(data)
    return data


def _jpeg_size(data: bytes) -> tuple[int, int]:
    from PIL import Image

    with Image.open(io.BytesIO(data)) as image:
        return image.size


def table_lines(
    title: str, rows: Sequence[tuple[str, int, float]], *, top: float = 720
) -> list[TextItem]:
    """Text items for a titled table: Item / Qty / Unit price columns."""
    items: list[TextItem] = [(72, top, 16, title)]
    y = top - 36
    for x, head in ((72, "Item"), (340, "Qty"), (420, "Unit price (USD)")):
        items.append((x, y, 11, head))
    for name, qty, price in rows:
        y -= 18
        items += [(72, y, 11, name), (340, y, 11, str(qty)), (420, y, 11, f"{price:.2f}")]
    return items


def scanned_table_jpeg(
    title: str, rows: Sequence[tuple[str, int, float]], size: tuple[int, int] = (850, 1100)
) -> bytes:
    """A 'scanned' page: the table printed into a slightly grey image, no text layer."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, (246, 244, 238))
    draw = ImageDraw.Draw(image)
    font = ImageFont.load_default(size=24)
    draw.text((90, 90), title, fill=(20, 20, 20), font=font)
    y = 160
    for x, head in ((90, "Item"), (470, "Qty"), (580, "Unit price (USD)")):
        draw.text((x, y), head, fill=(20, 20, 20), font=font)
    draw.line((90, y + 34, size[0] - 90, y + 34), fill=(60, 60, 60), width=2)
    for name, qty, price in rows:
        y += 44
        draw.text((90, y), name, fill=(30, 30, 30), font=font)
        draw.text((470, y), str(qty), fill=(30, 30, 30), font=font)
        draw.text((580, y), f"{price:.2f}", fill=(30, 30, 30), font=font)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=70)
    return out.getvalue()


def make_images(folder: Path) -> list[Path]:
    """Four small pictures in four formats."""
    from PIL import Image, ImageDraw

    folder.mkdir(parents=True, exist_ok=True)
    written = []

    shapes = Image.new("RGB", (480, 320), "white")
    draw = ImageDraw.Draw(shapes)
    draw.ellipse((40, 60, 220, 240), fill=(220, 40, 40))
    draw.rectangle((270, 80, 440, 250), fill=(40, 90, 220))
    written.append(folder / "shapes.png")
    shapes.save(written[-1], optimize=True)

    chart = Image.new("RGB", (400, 300), "white")
    draw = ImageDraw.Draw(chart)
    for i, value in enumerate((120, 200, 90, 240)):
        draw.rectangle((50 + i * 80, 260 - value, 100 + i * 80, 260), fill=(60, 160, 90))
    draw.line((40, 260, 370, 260), fill="black", width=2)
    written.append(folder / "bar_chart.webp")
    chart.save(written[-1], quality=80)

    # Stored sideways with EXIF orientation 6 ("rotate 90 clockwise to view"), like phone photos.
    sign = Image.new("RGB", (320, 200), (250, 210, 40))
    draw = ImageDraw.Draw(sign)
    draw.text((110, 90), "STOP", fill="black", font_size=40)
    exif = Image.Exif()
    exif[0x0112] = 6
    written.append(folder / "sign_rotated.jpg")
    sign.transpose(Image.Transpose.ROTATE_90).save(written[-1], quality=80, exif=exif.tobytes())

    sunset = Image.new("RGB", (160, 100))
    sunset.putdata([(255 - 2 * y, 80 + y, 40 + x) for y in range(100) for x in range(160)])
    written.append(folder / "sunset.bmp")
    sunset.save(written[-1])
    return written


def make_docs(folder: Path) -> list[Path]:
    """PDFs with text layers and one scanned page, and .txt / .md / .html documents."""
    folder.mkdir(parents=True, exist_ok=True)
    invoice = folder / "invoice.pdf"
    write_pdf(invoice, [table_lines("Invoice 2024-017 - Corner Cafe supplies", INVOICE_ROWS)])
    report = folder / "quarterly_report.pdf"
    write_pdf(
        report,
        [
            [
                (72, 720, 18, "Quarterly purchasing report"),
                (72, 690, 11, "Spending rose 8% over the quarter, mostly on coffee beans."),
                (72, 672, 11, "The tables on the next pages list the orders."),
            ],
            table_lines("Orders placed in April", INVOICE_ROWS[:2]),
            scanned_table_jpeg("Orders placed in May (scanned)", SCANNED_ROWS),
        ],
    )
    memo = folder / "memo.txt"
    memo.write_text(
        "Memo: the espresso machine service is booked for 12 June.\n"
        "Order two descaling kits (9.90 USD each) before then.\n",
        encoding="utf-8",
    )
    notes = folder / "supplier_notes.md"
    notes.write_text(
        "# Supplier notes\n\n| item | qty | unit price |\n|---|---|---|\n"
        "| Decaf beans 500 g | 2 | 11.40 |\n| Chai syrup | 1 | 8.75 |\n",
        encoding="utf-8",
    )
    catalog = folder / "price_list.html"
    catalog.write_text(
        "<html><head><title>Price list</title><style>td {padding: 2px}</style></head><body>"
        "<h1>Price list</h1><table><tr><th>Item</th><th>Qty</th><th>Price</th></tr>"
        "<tr><td>Almond croissant</td><td>12</td><td>1.80</td></tr>"
        "<tr><td>Blueberry muffin</td><td>10</td><td>1.55</td></tr></table></body></html>",
        encoding="utf-8",
    )
    return [invoice, report, memo, notes, catalog]


def main() -> None:
    for path in make_images(HERE / "images") + make_docs(HERE / "docs"):
        print(f"{path.relative_to(HERE)}  {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
