"""The embedded emoji world: scenes with known attributes, datasets, captions, corpus.

Every image is a `Scene` drawn from its own random stream
`numpy.random.default_rng([world.seed, stream, split, index])`, where
`stream` is a fixed hash of the dataset name (or of "corpus" for the
pretraining corpus). The same params therefore give byte-identical images,
and the corpus can never draw a test scene from the same stream; on top of
that, the corpus redraws any scene whose exact key is a test scene's
(`test_scene_keys`), so disjointness holds by construction, not by luck.
"""

from __future__ import annotations

import dataclasses
import zlib
from typing import Iterator

import numpy as np

from dear.data.world_emoji import catalog
from dear.data.world_scene import COLORS, POSITION_NAMES, SHAPES, TEXTURES, Canvas, Scene, render
from dear.errors import DearError
from dear.runtime.paramsfile import in_use

SPLITS = ("train", "val", "test")
ATTRIBUTE_SETS = {"colors": "color", "textures": "texture", "shapes": "shape", "positions": "position"}
OBJECT_SETS = ("world_objects", "world_objects_b", "world_objects_sketch")
RARE_SET = "world_objects_rare"  # objects the corpus shows as often as others but rarely names
THING = "thing"  # the noun captions use when the object is not named

# Zero-shot / prompt templates per dataset: exactly the caption forms of the corpus.
TEMPLATES = {
    "world_objects": ("a photo of a {}.",),
    "world_objects_b": ("a photo of a {}.",),
    "world_objects_sketch": ("a photo of a {}.",),
    "world_objects_rare": ("a photo of a {}.",),
    "world_colors": ("a photo of a thing on a {} background.",),
    "world_textures": ("a photo of a thing on a {} background.",),
    "world_shapes": ("a photo of a thing next to a {}.",),
    "world_positions": ("a photo of a thing at the {}.",),
}


def stream_id(name: str) -> int:
    """A fixed integer per dataset name (random streams never overlap by name)."""
    return zlib.crc32(name.encode())


def dataset_names(world) -> list[str]:
    rare = [RARE_SET] if world.n_objects_rare else []
    return list(OBJECT_SETS) + rare + [f"world_{name}" for name in world.attribute_sets]


def canvas(world) -> Canvas:
    return Canvas(size=world.image_size, grid=world.grid, period=world.texture_period,
                  texture_shade=world.texture_shade, outline_px=world.outline_px)


def positions(world) -> tuple[str, ...]:
    return POSITION_NAMES[world.grid]


def check(world) -> None:
    """Fail early, in one line, on a world that cannot be drawn."""
    found = problems(world)
    if found:
        raise DearError(found[0])


def problems(world, count_emoji: bool = True) -> list[str]:
    """Every reason the world cannot be drawn, one line each (`count_emoji`: also the ~1 s emoji catalog count)."""
    found = []
    if world.grid not in POSITION_NAMES:
        found.append(f"{in_use()}: key 'world.grid' must be one of {sorted(POSITION_NAMES)}, got {world.grid}")
    for key, allowed, given in (("colors", COLORS, world.colors), ("textures", TEXTURES, world.textures),
                                ("shapes", SHAPES, world.shapes)):
        unknown = sorted(set(given) - set(allowed))
        if unknown or len(set(given)) != len(given) or len(given) < 2:
            found.append(f"{in_use()}: key 'world.{key}' must list >= 2 distinct values of "
                         f"{list(allowed)}; got {given}")
    needed = world.n_objects + world.n_objects_b + world.n_objects_rare
    if count_emoji and needed > len(catalog()):
        found.append(f"{in_use()}: world.n_objects + world.n_objects_b + world.n_objects_rare = {needed} exceeds "
                     f"the {len(catalog())} usable emoji; lower them")
    cell = world.image_size // world.grid if world.grid in POSITION_NAMES else None
    if cell is not None and (world.emoji_px_max > cell or world.shape_px_max > cell):
        found.append(f"{in_use()}: world.emoji_px_max and world.shape_px_max must fit in one grid cell "
                     f"({cell} px); lower them")
    return found


def object_classes(world) -> tuple[list[tuple[int, str]], list[tuple[int, str]]]:
    """(world_objects classes, world_objects_b classes): disjoint, each [(code point, name)]."""
    items = list(catalog())
    order = np.random.default_rng([world.seed, stream_id("objects")]).permutation(len(items))
    chosen = [items[i] for i in order[: world.n_objects + world.n_objects_b]]
    return chosen[: world.n_objects], chosen[world.n_objects:]


def rare_classes(world) -> list[tuple[int, str]]:
    """world_objects_rare classes: the next emoji of the same seeded order, disjoint from both sets above."""
    items = list(catalog())
    order = np.random.default_rng([world.seed, stream_id("objects")]).permutation(len(items))
    start = world.n_objects + world.n_objects_b
    return [items[i] for i in order[start: start + world.n_objects_rare]]


# --- scenes --------------------------------------------------------------------

def sample_scene(rng: np.random.Generator, world, objects: list[tuple[int, str]], style: str,
                 fixed: dict | None = None) -> Scene:
    """A random scene; `fixed` pins attributes ({"object": i, "color": "red", "position": 2, ...})."""
    fixed = fixed or {}
    n_cells = world.grid * world.grid
    obj = fixed.get("object", int(rng.integers(len(objects))))
    cell = fixed.get("position", int(rng.integers(n_cells)))
    others = [c for c in range(n_cells) if c != cell]
    jitter = world.jitter_px
    return Scene(
        point=objects[obj][0],
        cell=cell,
        shape=fixed.get("shape", world.shapes[int(rng.integers(len(world.shapes)))]),
        shape_cell=others[int(rng.integers(len(others)))],
        texture=fixed.get("texture", world.textures[int(rng.integers(len(world.textures)))]),
        color=fixed.get("color", world.colors[int(rng.integers(len(world.colors)))]),
        style=style,
        emoji_px=int(rng.integers(world.emoji_px_min, world.emoji_px_max + 1)),
        shape_px=int(rng.integers(world.shape_px_min, world.shape_px_max + 1)),
        emoji_shift=tuple(int(v) for v in rng.integers(-jitter, jitter + 1, size=2)),
        shape_shift=tuple(int(v) for v in rng.integers(-jitter, jitter + 1, size=2)),
        phase=tuple(int(v) for v in rng.integers(0, world.texture_period, size=2)),
        tint=tuple(int(v) for v in rng.integers(-world.color_jitter, world.color_jitter + 1, size=3)),
        noise_seed=int(rng.integers(2**31)),
    )


def attributes(scene: Scene, world, names: dict[int, str]) -> dict:
    """The true attribute values of a scene, as words."""
    return {
        "object": names[scene.point],
        "color": scene.color if scene.style == "photo" else "none",
        "shape": scene.shape,
        "texture": scene.texture,
        "position": positions(world)[scene.cell],
        "shape_position": positions(world)[scene.shape_cell],
        "style": scene.style,
    }


# --- datasets ------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class DatasetSpec:
    name: str
    classnames: list[str]
    label_attribute: str          # object | color | texture | shape | position
    objects: list[tuple[int, str]]
    style: str
    per_class: tuple[int, int, int]   # train, val, test images per class


def dataset_specs(world, every_attribute_set: bool = False) -> list[DatasetSpec]:
    """Specs of the materialized datasets (`every_attribute_set`: also the attribute sets left out)."""
    objects, objects_b = object_classes(world)
    names = lambda items: [name for _, name in items]  # noqa: E731
    specs = [
        DatasetSpec("world_objects", names(objects), "object", objects, "photo", tuple(world.objects_split)),
        DatasetSpec("world_objects_b", names(objects_b), "object", objects_b, "photo", tuple(world.objects_split)),
        DatasetSpec("world_objects_sketch", names(objects), "object", objects, "sketch", tuple(world.sketch_split)),
    ]
    if world.n_objects_rare:
        rare = rare_classes(world)
        specs.append(DatasetSpec(RARE_SET, names(rare), "object", rare, "photo", tuple(world.objects_split)))
    values = {"colors": list(world.colors), "textures": list(world.textures), "shapes": list(world.shapes),
              "positions": list(positions(world))}
    for set_name in (ATTRIBUTE_SETS if every_attribute_set else world.attribute_sets):
        specs.append(DatasetSpec(f"world_{set_name}", values[set_name], ATTRIBUTE_SETS[set_name], objects,
                                 "photo", tuple(world.attribute_split)))
    return specs


def dataset_scenes(world, spec: DatasetSpec, split: str) -> Iterator[tuple[int, int, Scene]]:
    """(label, index, scene) for every image of one split, class-balanced, in a fixed order."""
    count = spec.per_class[SPLITS.index(split)]
    for label in range(len(spec.classnames)):
        for k in range(count):
            index = label * count + k
            rng = np.random.default_rng([world.seed, stream_id(spec.name), SPLITS.index(split), index])
            yield label, index, sample_scene(rng, world, spec.objects, spec.style, _pin(spec, label, world))


def _pin(spec: DatasetSpec, label: int, world) -> dict:
    if spec.label_attribute == "object":
        return {"object": label}
    if spec.label_attribute == "position":
        return {"position": label}
    return {spec.label_attribute: spec.classnames[label]}


def test_scene_keys(world) -> set[tuple]:
    """Exact keys of every test scene of every dataset (the corpus must avoid them).

    Attribute sets left out of `world.attribute_sets` count too, so the corpus
    does not change when a set is dropped from the materialized world.
    """
    return {scene.key() for spec in dataset_specs(world, every_attribute_set=True)
            for _, _, scene in dataset_scenes(world, spec, "test")}


# --- captions and the pretraining corpus ---------------------------------------

def caption(scene: Scene, world, names: dict[int, str], rng: np.random.Generator, force: frozenset = frozenset(),
            rare: set[int] = frozenset()) -> str:
    """A caption naming the object and, each with its probability, the other attributes.

    Clause order is fixed ("a photo of a X at the P next to a S on a T C background."),
    so each attribute word sits in a predictable slot; a clause in `force` is always named.
    Objects in `rare` (world_objects_rare) are named with `caption_rare` instead of `caption_object`.
    """
    named = lambda attr, p: attr in force or rng.random() < p  # noqa: E731
    naming = world.caption_rare if scene.point in rare else world.caption_object
    noun = names[scene.point] if named("object", naming) else THING
    head = "a sketch of a" if scene.style == "sketch" else "a photo of a"
    parts = [f"{head} {noun}"]
    if named("position", world.caption_position):
        parts.append(f"at the {positions(world)[scene.cell]}")
    if named("shape", world.caption_shape):
        parts.append(f"next to a {scene.shape}")
    texture = scene.texture if named("texture", world.caption_texture) else None
    color = scene.color if scene.style == "photo" and named("color", world.caption_color) else None
    if texture or color:
        parts.append("on a " + " ".join(word for word in (texture, color) if word) + " background")
    return " ".join(parts) + "."


def caption_vocabulary(world) -> list[str]:
    """Every word or phrase a corpus caption can hold (`caption` builds captions from these only).

    Pretraining trains the token embeddings of these words alone (`dear.model.pretrain`).
    """
    objects, objects_b = object_classes(world)
    fixed = ["a photo of a", "a sketch of a", THING, "at the", "next to a", "on a", "background", "."]
    return fixed + [name for _, name in objects + objects_b + rare_classes(world)] + list(positions(world)) + list(world.shapes) \
        + list(world.textures) + list(world.colors)


def text_bank(world) -> list[tuple[str, str]]:
    """(text, concept) descriptions in the corpus's own grammar: one concept each, words the embedded model read.

    The packaged bank's general photo descriptions are mostly words the
    embedded CLIP never saw (their token embeddings are untrained), which
    TextSpan would pick as noise; `profile.text_bank: world` uses these.
    """
    objects, objects_b = object_classes(world)
    rows = [(f"a photo of a {name}.", "object") for _, name in objects + objects_b + rare_classes(world)]
    rows += [(f"a photo of a thing on a {value} background.", "color") for value in world.colors]
    rows += [(f"a photo of a thing on a {value} background.", "texture") for value in world.textures]
    rows += [(f"a photo of a thing next to a {value}.", "shape") for value in world.shapes]
    rows += [(f"a photo of a thing at the {value}.", "position") for value in positions(world)]
    rows += [("a photo of a thing.", "style"), ("a sketch of a thing.", "style")]
    return rows


TEXT_BANK_CONCEPTS = ("object", "color", "texture", "shape", "position", "style")  # the concepts text_bank labels


def text_bank_size(world) -> int:
    """len(text_bank(world)) without drawing the emoji catalog (~1 s): what `dear check` needs to know."""
    objects = world.n_objects + world.n_objects_b + world.n_objects_rare
    return objects + len(world.colors) + len(world.textures) + len(world.shapes) + len(positions(world)) + 2


TWIN_ATTRIBUTES = ("position", "shape", "texture", "color")


def corpus_batch(world, backbone, step: int, excluded: set[tuple]) -> tuple[np.ndarray, list[str]]:
    """Batch `step` of the pretraining corpus: images uint8 [B, H, W, 3] and their captions."""
    scenes, captions = corpus_scenes(world, backbone, step, excluded)
    grid = canvas(world)
    return np.stack([render(scene, grid) for scene in scenes]), captions


def corpus_scenes(world, backbone, step: int, excluded: set[tuple]) -> tuple[list[Scene], list[str]]:
    """Scenes and captions of corpus batch `step`; no scene's key is in `excluded`.

    A fraction `backbone.twin_fraction` of the batch comes as twins: a scene and a
    copy differing in one attribute (position, shape, texture or colour), both
    captions naming it, so the only way to tell the two apart is that attribute.
    """
    objects, objects_b = object_classes(world)
    pool = objects + objects_b + rare_classes(world)
    names = dict(pool)
    rare = {point for point, _ in rare_classes(world)}
    rng = np.random.default_rng([world.seed, stream_id("corpus"), step])
    n_twins = int(round(backbone.batch_size * backbone.twin_fraction / 2))
    weights = np.array([backbone.twin_weights[a] for a in TWIN_ATTRIBUTES], dtype=float)
    scenes, captions = [], []
    while len(scenes) < backbone.batch_size:
        style = "sketch" if rng.random() < world.corpus_sketch else "photo"
        scene = sample_scene(rng, world, pool, style)
        if scene.key() in excluded:
            continue
        if len(scenes) < 2 * n_twins:
            attr = TWIN_ATTRIBUTES[int(rng.choice(len(TWIN_ATTRIBUTES), p=weights / weights.sum()))]
            if attr == "color" and style == "sketch":
                attr = "texture"
            twin = _twin(scene, attr, rng, world)
            if twin.key() in excluded:
                continue
            force = frozenset({attr})
            scenes += [scene, twin]
            captions += [caption(scene, world, names, rng, force, rare), caption(twin, world, names, rng, force, rare)]
        else:
            scenes.append(scene)
            captions.append(caption(scene, world, names, rng, rare=rare))
    return scenes, captions


def _twin(scene: Scene, attr: str, rng: np.random.Generator, world) -> Scene:
    """A copy of `scene` with a different value of `attr` (and everything else kept)."""
    if attr == "position":
        cells = [c for c in range(world.grid ** 2) if c != scene.cell]
        cell = cells[int(rng.integers(len(cells)))]
        shape_cell = scene.shape_cell if scene.shape_cell != cell else scene.cell
        return dataclasses.replace(scene, cell=cell, shape_cell=shape_cell)
    values = {"shape": world.shapes, "texture": world.textures, "color": world.colors}[attr]
    options = [v for v in values if v != getattr(scene, attr)]
    return dataclasses.replace(scene, **{attr: options[int(rng.integers(len(options)))]})


# --- tiny settings for tests ---------------------------------------------------

def tiny_params() -> dict[str, dict]:
    """World, model and backbone sections small enough for a test (~20 s to train).

    Other helpers' tests reuse it: `dear.data.world.tiny(params)` returns a
    `Params` with these sections swapped in.
    """
    return {
        "world": {
            "seed": 0, "image_size": 32, "grid": 2, "n_objects": 8, "n_objects_b": 4, "n_objects_rare": 0,
            "colors": ["red", "green", "blue", "yellow"], "textures": ["plain", "striped", "checkered", "dotted"],
            "shapes": ["circle", "square", "triangle", "star"],
            "attribute_sets": ["colors", "textures", "shapes", "positions"],
            "emoji_px_min": 14, "emoji_px_max": 16, "shape_px_min": 12, "shape_px_max": 14, "jitter_px": 1,
            "texture_period": 4, "texture_shade": 0.55, "outline_px": 1, "color_jitter": 10,
            "objects_split": [4, 2, 4], "sketch_split": [1, 1, 4], "attribute_split": [4, 2, 6],
            "caption_object": 1.0, "caption_position": 0.3, "caption_shape": 0.3, "caption_color": 0.3,
            "caption_texture": 0.3, "caption_rare": 0.1, "corpus_sketch": 0.05,
        },
        "model": {"arch": "dear-world-tiny", "pretrained": "embedded", "cache_dir": None},
        "backbone": {
            "seed": 0, "steps": 300, "batch_size": 32, "lr": 2.0e-3, "weight_decay": 0.1, "warmup_fraction": 0.05,
            "init_temperature": 0.07,
            "precision": "fp32", "threads": 1, "eval_batch_size": 256,
            "sanity": {"enabled": True, "max_images_per_set": None},
            "augmentation": {"crop_scale": [1.0, 1.0], "flip_prob": 0.0, "interpolation": "bicubic"},
            "twin_fraction": 0.0,
            "twin_weights": {"position": 0.35, "shape": 0.35, "texture": 0.2, "color": 0.1},
        },
    }


def tiny(params):
    """`params` with the tiny world, model and backbone sections (for tests)."""
    small = tiny_params()  # each section validated by its own model class (the data layer never imports dear.config.params)
    return params.model_copy(update={key: type(getattr(params, key)).model_validate(small[key])
                                     for key in ("world", "model", "backbone")})
