"""Caption a folder of images into a typed table (the image-captioning pipeline).

    python examples/caption_images.py --simulate            # offline: base_url="simulator"
    python examples/caption_images.py examples/images       # real API (KIMI_API_KEY set)

Each image becomes an ``image_url`` part: png/jpeg/webp/gif go as they are, other formats (the
.bmp here) are converted, EXIF-rotated photos are turned upright, and anything larger than
``max_image_pixels`` is downscaled first. Needs Pillow for the conversion:
``pip install -e '.[images]'``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd
from pydantic import BaseModel, Field

import kimi_extract as kx

HERE = Path(__file__).resolve().parent
SUFFIXES = {".png", ".jpg", ".jpeg", ".webp", ".gif", ".bmp", ".tif", ".tiff"}


class Caption(BaseModel):
    """What an image shows."""

    caption: str = Field(description="One sentence describing the image")
    objects: list[str] = Field(description="Main objects visible, as short nouns")
    dominant_color: str = Field(description="The color covering most of the image")
    has_text: bool = Field(description="Whether the image contains readable text")


def main() -> int:
    """Run the example; the exit status is 0 when every image was captioned, else 1."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default=str(HERE / "images"))
    parser.add_argument("--simulate", action="store_true", help="use the bundled simulator")
    parser.add_argument("--max-image-pixels", type=int, default=1024 * 1024)
    parser.add_argument("--out", help="write the table here (.csv, .jsonl or .parquet)")
    args = parser.parse_args()

    paths = sorted(p for p in Path(args.folder).iterdir() if p.suffix.lower() in SUFFIXES)
    frame = pd.DataFrame({"file": [p.name for p in paths], "image": [str(p) for p in paths]})
    extractor = kx.Extractor(
        Caption,
        instructions="Describe the image for a searchable photo catalogue.",
        max_image_pixels=args.max_image_pixels,  # larger images are downscaled first
        progress=False,
        # The bundled simulator: made-up answers, no key, no result store.
        base_url="simulator" if args.simulate else None,
    )
    out = extractor.run(frame, images="image")
    columns = ["file", "caption", "objects", "dominant_color", "kx_prompt_tokens", "kx_error"]
    with pd.option_context(
        "display.width", 200, "display.max_columns", 12, "display.max_colwidth", 40
    ):
        print(out[columns])
    if extractor.last_run is not None:
        print(extractor.last_run.summary())
    if args.out:
        from kimi_extract.table.export import write_table

        write_table(out, Path(args.out))
    failed = out.loc[out["kx_error"].notna(), ["file", "kx_error"]]
    for file, error in failed.itertuples(index=False):
        print(f"error: {file}: {error}", file=sys.stderr)
    return 1 if len(failed) else 0


if __name__ == "__main__":
    sys.exit(main())
