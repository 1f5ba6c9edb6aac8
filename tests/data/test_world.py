"""The embedded world: deterministic, labels true to the pixels, corpus disjoint from test images."""

from __future__ import annotations

import hashlib
import io
import json
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from dear.cli import app
from dear.data import world as world_data
from dear.data.world_scene import COLORS
from dear.config.params import load_params
from dear.stages import world as world_stage

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def params():
    return world_data.tiny(load_params(ROOT / "params.yaml"))


@pytest.fixture(scope="module")
def tiny_world(params, tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("world") / "world"
    world_stage.run(params, world_stage.Inputs(), world_stage.Outputs(folder=folder))
    return folder


def _tree(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_world_is_byte_identical_for_the_same_seed(params, tiny_world, tmp_path):
    again = tmp_path / "again"
    world_stage.run(params, world_stage.Inputs(), world_stage.Outputs(folder=again))
    first, second = _tree(tiny_world), _tree(again)
    assert first.keys() == second.keys()
    assert [name for name in first if first[name] != second[name]] == []
    other = params.model_copy(update={"world": params.world.model_copy(update={"seed": 1})})
    reseeded = tmp_path / "reseeded"
    world_stage.run(other, world_stage.Inputs(), world_stage.Outputs(folder=reseeded))
    assert _tree(reseeded)["world_colors/attributes.parquet"] != first["world_colors/attributes.parquet"]


def test_every_dataset_is_in_coop_layout(params, tiny_world):
    card = json.loads((tiny_world / "card.json").read_text())
    assert set(card["datasets"]) == set(world_data.dataset_names(params.world))
    objects = card["datasets"]["world_objects"]["classnames"]
    assert not set(objects) & set(card["datasets"]["world_objects_b"]["classnames"])
    assert card["datasets"]["world_objects_sketch"]["classnames"] == objects
    for name, entry in card["datasets"].items():
        split = json.loads((tiny_world / name / f"split_zhou_{name}.json").read_text())
        for rows in split.values():
            for impath, label, classname in rows:
                assert entry["classnames"][label] == classname
                assert (tiny_world / name / "images" / impath).is_file()
        table = pq.read_table(tiny_world / name / "attributes.parquet").to_pandas()
        assert len(table) == sum(len(rows) for rows in split.values())


def _attributes(folder: Path, name: str):
    table = pq.read_table(folder / name / "attributes.parquet").to_pandas()
    pixels = [np.asarray(Image.open(folder / name / "images" / p).convert("RGB")) for p in table.impath]
    return table, pixels


def test_background_colour_is_the_recorded_one(params, tiny_world):
    table, pixels = _attributes(tiny_world, "world_colors")
    plain = table.index[table.texture == "plain"]
    assert len(plain) >= 10
    for i in plain:
        values, counts = np.unique(pixels[i].reshape(-1, 3), axis=0, return_counts=True)
        background = values[counts.argmax()].astype(int)      # the most common pixel is the background
        assert np.abs(background - COLORS[table.color[i]]).max() <= params.world.color_jitter
        assert table.color[i] == table.classname[i]


def test_shape_sits_in_its_recorded_cell(params, tiny_world):
    table, pixels = _attributes(tiny_world, "world_positions")
    grid, cell = params.world.grid, params.world.image_size // params.world.grid
    cells = world_data.positions(params.world)
    hits = 0
    for i, image in enumerate(pixels):
        white = (image.min(axis=-1) > 235).reshape(grid, cell, grid, cell).sum(axis=(1, 3)).reshape(-1)
        hits += cells[int(white.argmax())] == table.shape_position[i]
        assert table.position[i] != table.shape_position[i]
    assert hits / len(pixels) >= 0.95


def _pixel_hash(pixels: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(pixels).tobytes()).hexdigest()


def test_corpus_never_contains_a_test_image(params, tiny_world):
    test_hashes = set()
    for name in world_data.dataset_names(params.world):
        split = json.loads((tiny_world / name / f"split_zhou_{name}.json").read_text())
        for impath, _, _ in split["test"]:
            test_hashes.add(_pixel_hash(np.asarray(Image.open(tiny_world / name / "images" / impath).convert("RGB"))))
    excluded = world_data.test_scene_keys(params.world)
    assert len(excluded) >= len(test_hashes)
    corpus = set()
    for step in range(params.backbone.steps):
        images, captions = world_data.corpus_batch(params.world, params.backbone, step, excluded)
        assert len(captions) == len(images) == params.backbone.batch_size
        corpus.update(_pixel_hash(image) for image in images)
    assert len(corpus) > 0.9 * params.backbone.steps * params.backbone.batch_size
    assert not corpus & test_hashes


def test_corpus_skips_excluded_scenes(params):
    """The exclusion is what makes disjointness hold by construction: an excluded scene is redrawn."""
    scenes, _ = world_data.corpus_scenes(params.world, params.backbone, 0, set())
    banned = {scenes[0].key(), scenes[-1].key()}
    again, _ = world_data.corpus_scenes(params.world, params.backbone, 0, banned)
    assert len(again) == len(scenes)
    assert not {scene.key() for scene in again} & banned


def test_scene_keys_and_cached_textures_are_what_they_replace(params):
    """The corpus's fast paths: a key is `dataclasses.astuple`, a cached texture is the freshly drawn one."""
    import dataclasses

    from dear.data import world_scene

    scenes, _ = world_data.corpus_scenes(params.world, params.backbone, 3, set())
    assert all(scene.key() == dataclasses.astuple(scene) for scene in scenes)
    for texture in world_scene.TEXTURES:
        cached = world_scene.texture_mask(texture, 32, 8, (3, 5), noise_seed=7)
        again = world_scene.texture_mask(texture, 32, 8, (3, 5), noise_seed=7)
        fresh = (np.random.default_rng(7).random((32, 32)) < 0.5 if texture == "noisy"
                 else world_scene._periodic(texture, 32, 8, (3, 5)))
        assert np.array_equal(cached, fresh) and np.array_equal(again, fresh)
        if texture != "noisy":
            assert again is cached and not cached.flags.writeable  # shared: nobody may draw on it


def test_captions_name_attributes_in_fixed_slots(params):
    with_twins = params.backbone.model_copy(update={"twin_fraction": 0.5})
    scenes, captions = world_data.corpus_scenes(params.world, with_twins, 3, set())
    for text in captions:
        assert text.startswith(("a photo of a ", "a sketch of a ")) and text.endswith(".")
    twins = int(round(with_twins.batch_size * with_twins.twin_fraction / 2))
    assert twins > 0
    for k in range(twins):   # a twin differs from its scene in exactly one attribute, and its caption says so
        first, second = scenes[2 * k], scenes[2 * k + 1]
        differing = [f for f in ("cell", "shape", "texture", "color") if getattr(first, f) != getattr(second, f)]
        assert len(differing) == 1 and first.point == second.point
        assert captions[2 * k] != captions[2 * k + 1]


def test_bad_world_params_fail_in_one_line(tmp_path):
    import yaml

    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["world"]["colors"] = ["red", "mauve"]
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["world", "--params", str(bad), "--out", str(tmp_path / "world")])
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "world.colors" in result.output
    assert not (tmp_path / "world").exists()


def test_rare_objects_are_drawn_as_often_as_others_but_named_at_their_own_rate(params):
    """world_objects_rare: its own disjoint classes, in the corpus images, named with caption_rare only."""
    rare_world = params.world.model_copy(update={"n_objects_rare": 4, "caption_rare": 0.0, "caption_object": 1.0})
    objects, objects_b = world_data.object_classes(rare_world)
    rare = world_data.rare_classes(rare_world)
    assert len(rare) == 4 and not {p for p, _ in rare} & {p for p, _ in objects + objects_b}
    assert world_data.RARE_SET in world_data.dataset_names(rare_world)
    shown, named = 0, 0
    for step in range(20):
        scenes, captions = world_data.corpus_scenes(rare_world, params.backbone, step, set())
        for scene, text in zip(scenes, captions):
            if scene.point in {p for p, _ in rare}:
                shown += 1
                named += any(f" {name} " in f" {text[:-1]} " for _, name in rare)
    assert shown > 0.15 * 20 * params.backbone.batch_size and named == 0
    assert {name for _, name in rare} <= set(world_data.caption_vocabulary(rare_world))
