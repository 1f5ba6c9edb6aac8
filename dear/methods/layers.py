"""The recipe values that name layers, resolved against a model's depth (no torch: `dear check`, `dear recipe`).

MaPLe's `prompt_depth`, PromptSRC's `vision_depth` and `text_depth` name how
deep prompts go (layers 1..value); MMRL's `start_layer` and DeAR's
`start_layer` and `text_start_layer` where tokens start (layers value..L; null:
a share of the tower's depth). The authors' values are ViT-B/16's (12
layers): a model of another depth needs its own, and this module says which
fit, for the check and the display, from the architecture's config alone.
The methods' modules apply the same rules when they build (tests/model/test_layouts.py
checks both agree on models of several depths). Layers are 1-based.
"""

from __future__ import annotations

from dataclasses import dataclass

from dear.errors import DearError
from dear.methods.recipe import LayerKey, load


def half(depth: int) -> int:
    """MMRL's start when null: the middle layer (ViT-B/16: 6 of 12, its REP_LAYERS 6-12)."""
    return (depth + 1) // 2


def two_thirds(depth: int) -> int:
    """DeAR's start when null: after the first two thirds, rounded down (ViT-B/16: 9 of 12)."""
    return 2 * depth // 3 + 1


KEYS: dict[str, tuple[LayerKey, ...]] = {  # by recipe file
    "maple": (LayerKey("prompt_depth", ("image", "text"), "depth", 1),),
    "promptsrc": (LayerKey("vision_depth", ("image",), "depth", 0), LayerKey("text_depth", ("text",), "depth", 1)),
    "mmrl": (LayerKey("start_layer", ("image", "text"), "start", 1, half),),
    "mmrlpp": (LayerKey("start_layer", ("image", "text"), "start", 1, half),),
    "tac": (LayerKey("vision_depth", ("image",), "depth", 1), LayerKey("text_depth", ("text",), "depth", 1)),
    "dear": (LayerKey("start_layer", ("image",), "start", 1, two_thirds),
             LayerKey("text_start_layer", ("text",), "start", 1, two_thirds)),
}


@dataclass(frozen=True)
class Resolved:
    """One layer key of one recipe on one model: the layers it gives each tower, or what is wrong."""

    key: str
    value: int | None  # as the recipe says (None: null)
    layers: dict[str, range]  # tower -> the 1-based layers it covers (empty: none)
    depth: dict[str, int]  # tower -> its number of layers
    problem: str | None  # None: it fits

    def shown(self) -> str:
        """e.g. 'start_layer null -> image layers 9-12 of 12'."""
        value = "null" if self.value is None else str(self.value)
        parts = [f"{tower} {_span(self.layers[tower])} of {self.depth[tower]}" for tower in self.layers]
        return f"{self.key} {value} -> " + ", ".join(parts)


def resolve(recipe: str, values: dict, depth: dict[str, int | None]) -> list[Resolved]:
    """Every layer key of `recipe` with its `values`, on towers of `depth` layers ({'image': L, 'text': L'};
    a tower whose depth is unknown is left out)."""
    found = []
    for spec in KEYS.get(recipe) or declared(recipe):
        if spec.key not in values:
            continue
        known = {tower: depth[tower] for tower in spec.towers if isinstance(depth.get(tower), int)}
        if not known:
            continue
        value = values[spec.key]
        found.append(Resolved(spec.key, value, {t: _layers(spec, value, n) for t, n in known.items()}, known,
                              _problem(spec, value, known)))
    return found


def declared(recipe: str) -> tuple[LayerKey, ...]:
    """The layer keys a recipe file declares itself (`layers:` of a key: a plugin's), none when it does not load."""
    try:
        return tuple(key.layers for key in load(recipe).keys.values() if key.layers is not None)
    except DearError:
        return ()  # a broken recipe file: its own line says why


def _layers(spec: LayerKey, value: int | None, depth: int) -> range:
    first = spec.default(depth) if value is None else value
    return range(1, first + 1) if spec.meaning == "depth" else range(first, depth + 1)


def _problem(spec: LayerKey, value: int | None, depth: dict[str, int]) -> str | None:
    if value is None:
        return None  # a default always fits
    highest = min(depth.values())
    if spec.lowest <= value <= highest:
        return None
    shape = " and ".join(f"{n} {tower}" for tower, n in depth.items())
    null = ", or null" if spec.default is not None else ""
    return f"does not fit this model ({shape} layers); set it in {spec.lowest}..{highest}{null}"


def _span(layers: range) -> str:
    if not layers:
        return "layers none"
    return f"layer {layers[0]}" if len(layers) == 1 else f"layers {layers[0]}-{layers[-1]}"
