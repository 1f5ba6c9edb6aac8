"""Drawing one scene: textured background, an outlined shape, an emoji.

A scene is a small frozen record of every choice (attributes plus jitter);
`render` turns it into an RGB uint8 array. Everything here is pure numpy on
cached sprites, so one 64 px scene costs tens of microseconds.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
from PIL import Image, ImageDraw

from dear.data.world_emoji import sprite

# The world's vocabulary. Colours are background colours (RGB); names are the
# words captions and prompts use. The lists in params.yaml pick from these.
COLORS = {
    "red": (210, 40, 40), "orange": (240, 140, 20), "yellow": (235, 215, 30), "green": (40, 160, 60),
    "cyan": (40, 190, 200), "blue": (40, 80, 210), "purple": (140, 60, 190), "pink": (240, 130, 190),
    "brown": (130, 80, 40), "gray": (128, 128, 128),
}
TEXTURES = ("plain", "striped", "dotted", "checkered", "grid", "noisy", "wavy", "diagonal")
SHAPES = ("circle", "square", "triangle", "star", "cross", "hexagon")
POSITION_NAMES = {
    2: ("top left", "top right", "bottom left", "bottom right"),
    3: ("top left", "top center", "top right", "middle left", "center", "middle right",
        "bottom left", "bottom center", "bottom right"),
}
STYLES = ("photo", "sketch")
PAPER = np.array([238, 236, 228], dtype=np.float32) / 255.0  # sketch background


@dataclasses.dataclass(frozen=True)
class Scene:
    """Every choice that makes one image; `key()` identifies it exactly."""

    point: int          # emoji code point (the object)
    cell: int           # grid cell of the emoji (the position)
    shape: str
    shape_cell: int
    texture: str
    color: str
    style: str
    emoji_px: int
    shape_px: int
    emoji_shift: tuple[int, int]
    shape_shift: tuple[int, int]
    phase: tuple[int, int]
    tint: tuple[int, int, int]   # per-channel colour jitter
    noise_seed: int

    def key(self) -> tuple:
        # dataclasses.astuple's result, without its recursive copy (every field is an int, str or tuple of ints):
        # the corpus checks two keys per scene, ~100 per pretraining step
        return tuple(getattr(self, name) for name in _SCENE_FIELDS)


_SCENE_FIELDS = tuple(field.name for field in dataclasses.fields(Scene))


@dataclasses.dataclass(frozen=True)
class Canvas:
    """Geometry and drawing constants of the world (from params)."""

    size: int
    grid: int
    period: int
    texture_shade: float
    outline_px: int

    @property
    def cell_px(self) -> int:
        return self.size // self.grid


def render(scene: Scene, canvas: Canvas) -> np.ndarray:
    """The scene as an RGB uint8 array [size, size, 3]."""
    image = _background(scene, canvas)                                   # [H, W, 3] float 0..1
    shape_rgba = _shape_sprite(scene.shape, scene.shape_px, canvas.outline_px, scene.style == "sketch")
    _paste(image, shape_rgba, _anchor(scene.shape_cell, scene.shape_shift, canvas))
    emoji_rgba = sprite(scene.point, scene.emoji_px)
    if scene.style == "sketch":
        emoji_rgba = _line_art(emoji_rgba)
    _paste(image, emoji_rgba, _anchor(scene.cell, scene.emoji_shift, canvas))
    return np.clip(image * 255.0 + 0.5, 0, 255).astype(np.uint8)


def _background(scene: Scene, canvas: Canvas) -> np.ndarray:
    pattern = texture_mask(scene.texture, canvas.size, canvas.period, scene.phase, scene.noise_seed)  # [H, W] bool
    if scene.style == "sketch":
        base = PAPER
        ink = base * 0.78
    else:
        base = np.clip((np.array(COLORS[scene.color], dtype=np.float32) + scene.tint) / 255.0, 0, 1)
        ink = base * canvas.texture_shade
    image = np.empty((canvas.size, canvas.size, 3), dtype=np.float32)
    image[:] = base
    image[pattern] = ink
    return image


def texture_mask(texture: str, size: int, period: int, phase: tuple[int, int], noise_seed: int) -> np.ndarray:
    """Where the texture's darker ink goes: bool [size, size], read-only."""
    if texture == "noisy":
        return np.random.default_rng(noise_seed).random((size, size)) < 0.5
    return _pattern(texture, size, period, phase)


@functools.lru_cache(maxsize=4096)
def _pattern(texture: str, size: int, period: int, phase: tuple[int, int]) -> np.ndarray:
    """A periodic texture's mask, drawn once per (texture, phase): the corpus draws ~100k scenes."""
    mask = _periodic(texture, size, period, phase)
    mask.flags.writeable = False
    return mask


def _periodic(texture: str, size: int, period: int, phase: tuple[int, int]) -> np.ndarray:
    y, x = np.mgrid[0:size, 0:size]
    x = x + phase[0]
    y = y + phase[1]
    half = period // 2
    if texture == "plain":
        return np.zeros((size, size), dtype=bool)
    if texture == "striped":
        return (y % period) < half
    if texture == "dotted":
        dx, dy = (x % period) - half + 0.5, (y % period) - half + 0.5
        return dx * dx + dy * dy <= (period / 4) ** 2 + 0.5
    if texture == "checkered":
        return ((x // half) + (y // half)) % 2 == 1
    if texture == "grid":
        return ((x % period) < max(1, period // 4)) | ((y % period) < max(1, period // 4))
    if texture == "wavy":
        return ((y + np.round(half * np.sin(2 * np.pi * x / (2 * period)))) % period) < half
    if texture == "diagonal":
        return ((x + y) % period) < half
    raise ValueError(f"unknown texture {texture!r}")


def _anchor(cell: int, shift: tuple[int, int], canvas: Canvas) -> tuple[int, int]:
    """Centre (x, y) in pixels of a grid cell, moved by `shift`."""
    row, col = divmod(cell, canvas.grid)
    half = canvas.cell_px / 2
    return int(col * canvas.cell_px + half + shift[0]), int(row * canvas.cell_px + half + shift[1])


def _paste(image: np.ndarray, rgba: np.ndarray, centre: tuple[int, int]) -> None:
    """Alpha-composite `rgba` [h, w, 4] onto `image` [H, W, 3] centred at `centre`, clipped."""
    h, w = rgba.shape[:2]
    top, left = centre[1] - h // 2, centre[0] - w // 2
    y0, x0 = max(top, 0), max(left, 0)
    y1, x1 = min(top + h, image.shape[0]), min(left + w, image.shape[1])
    if y1 <= y0 or x1 <= x0:
        return
    patch = rgba[y0 - top:y1 - top, x0 - left:x1 - left]
    alpha = patch[..., 3:4]
    region = image[y0:y1, x0:x1]
    region[:] = region * (1.0 - alpha) + patch[..., :3] * alpha


def _line_art(rgba: np.ndarray) -> np.ndarray:
    """OpenMoji's dark outlines only, in graphite on transparent: the sketch style."""
    luminance = rgba[..., :3] @ np.array([0.299, 0.587, 0.114], dtype=np.float32)
    ink = np.clip((0.45 - luminance) / 0.3, 0, 1) * rgba[..., 3]
    out = np.zeros_like(rgba)
    out[..., :3] = 0.2
    out[..., 3] = ink
    return out


@functools.lru_cache(maxsize=512)
def _shape_sprite(shape: str, px: int, outline_px: int, outline_only: bool) -> np.ndarray:
    """A white shape with a dark outline (sketch: outline only): RGBA float32 [px, px, 4]."""
    scale = 4  # supersampling for smooth edges
    big = px * scale
    outer = Image.new("L", (big, big), 0)
    inner = Image.new("L", (big, big), 0)
    inset = outline_px * scale
    _draw_shape(ImageDraw.Draw(outer), shape, 0, big)
    _draw_shape(ImageDraw.Draw(inner), shape, inset, big)
    outer_a = np.asarray(outer.resize((px, px), Image.LANCZOS), dtype=np.float32) / 255.0
    inner_a = np.asarray(inner.resize((px, px), Image.LANCZOS), dtype=np.float32) / 255.0
    rgba = np.zeros((px, px, 4), dtype=np.float32)
    if outline_only:
        rgba[..., :3] = 0.2
        rgba[..., 3] = np.clip(outer_a - inner_a, 0, 1)
    else:
        rgba[..., :3] = inner_a[..., None] + (1 - inner_a[..., None]) * 0.08   # white fill, near-black rim
        rgba[..., 3] = outer_a
    return rgba


def _draw_shape(draw: ImageDraw.ImageDraw, shape: str, inset: int, size: int) -> None:
    lo, hi = inset, size - 1 - inset
    mid = (size - 1) / 2
    radius = mid - inset
    if shape == "circle":
        draw.ellipse((lo, lo, hi, hi), fill=255)
    elif shape == "square":
        draw.rectangle((lo, lo, hi, hi), fill=255)
    elif shape == "triangle":
        draw.polygon([(mid, lo), (hi, hi), (lo, hi)], fill=255)
    elif shape == "star":
        draw.polygon(_star_points(mid, radius), fill=255)
    elif shape == "cross":
        arm = (hi - lo) / 6
        draw.rectangle((mid - arm, lo, mid + arm, hi), fill=255)
        draw.rectangle((lo, mid - arm, hi, mid + arm), fill=255)
    elif shape == "hexagon":
        draw.regular_polygon((mid, mid, radius), 6, fill=255)
    else:
        raise ValueError(f"unknown shape {shape!r}")


def _star_points(mid: float, radius: float) -> list[tuple[float, float]]:
    points = []
    for k in range(10):
        r = radius if k % 2 == 0 else radius * 0.45
        angle = -np.pi / 2 + k * np.pi / 5
        points.append((mid + r * np.cos(angle), mid + r * np.sin(angle)))
    return points
