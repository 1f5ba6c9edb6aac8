"""Tiny fake datasets in CoOp's layout (DATASETS.md), for tests of any stage.

    from fake_coop import make_fake_dataset, write_params
    make_fake_dataset(tmp_path / "data", "oxford_pets", n_classes=4, per_class=3)
    params = write_params(tmp_path / "params.yaml", root=tmp_path / "data", datasets=["oxford_pets"])

The layout table below is written from CoOp's DATASETS.md and `datasets/*.py`
independently of `dear.data.coop`, so reading a fake dataset also tests the
registry. Images are small PNG/JPEG files with a size that depends on label
and index (so width/height columns can be checked); split lists are shuffled
so that Dassl's "order of first appearance" differs from label order.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

import yaml
from PIL import Image

REPO = Path(__file__).resolve().parents[1]

# name -> (image dir inside the dataset folder, split file) for CoOp's JSON-split datasets
JSON_LAYOUT = {
    "caltech-101": ("101_ObjectCategories", "split_zhou_Caltech101.json"),
    "oxford_pets": ("images", "split_zhou_OxfordPets.json"),
    "stanford_cars": ("", "split_zhou_StanfordCars.json"),
    "oxford_flowers": ("jpg", "split_zhou_OxfordFlowers.json"),
    "food-101": ("images", "split_zhou_Food101.json"),
    "sun397": ("SUN397", "split_zhou_SUN397.json"),
    "dtd": ("images", "split_zhou_DescribableTextures.json"),
    "eurosat": ("2750", "split_zhou_EuroSAT.json"),
    "ucf101": ("UCF-101-midframes", "split_zhou_UCF101.json"),
}
WORLD = ("world_objects", "world_objects_b", "world_objects_sketch", "world_objects_rare", "world_colors",
         "world_textures", "world_shapes", "world_positions")
# domain-shift sets: image dir; ImageNet-A/-R hold a subset of the classes
IMAGENET_SETS = {
    "imagenetv2": "imagenetv2-matched-frequency-format-val",
    "imagenet-sketch": "images",
    "imagenet-adversarial": "imagenet-a",
    "imagenet-rendition": "imagenet-r",
}
NAMES = ("imagenet", "fgvc_aircraft", *JSON_LAYOUT, *WORLD, *IMAGENET_SETS)


def make_fake_dataset(root: str | Path, name: str, n_classes: int = 4, per_class: int = 3, seed: int = 0) -> Path:
    """Write dataset `name` under `root/name` with `per_class` images per class and split; return its folder.

    ImageNet gets `per_class` train and `per_class` val (= test) images per class;
    ImageNet-A/-R keep every other class of the `n_classes` in classnames.txt.
    """
    folder = Path(root) / name
    rng = random.Random(seed)
    if name in JSON_LAYOUT or name in WORLD:
        image_dir, split_file = JSON_LAYOUT.get(name, ("images", f"split_zhou_{name}.json"))
        _json_dataset(folder, image_dir, split_file, name, n_classes, per_class, rng)
    elif name == "fgvc_aircraft":
        _fgvc(folder, n_classes, per_class, rng)
    elif name == "imagenet":
        _imagenet(folder, n_classes, per_class)
    elif name in IMAGENET_SETS:
        _imagenet_set(folder, name, n_classes, per_class)
    else:
        raise ValueError(f"no fake for {name!r}; known: {NAMES}")
    return folder


def image_size(label: int, index: int) -> tuple[int, int]:
    """(width, height) of fake image `index` of class `label`."""
    return 8 + label % 3, 6 + index % 2


def write_image(path: Path, label: int, index: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    colour = ((37 * label) % 256, (91 * index) % 256, (53 * (label + index)) % 256)
    image = Image.new("RGB", image_size(label, index), colour)
    image.save(path, format="JPEG" if path.suffix == ".jpg" else "PNG")


def wnid(label: int) -> str:
    return f"n{label:08d}"


def write_classnames(folder: Path, n_classes: int) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    lines = [f"{wnid(label)} thing number {label}" for label in range(n_classes)]
    (folder / "classnames.txt").write_text("\n".join(lines) + "\n")


def _json_dataset(folder: Path, image_dir: str, split_file: str, name: str, n_classes: int,
                  per_class: int, rng: random.Random) -> None:
    split = {}
    for split_name in ("train", "val", "test"):
        entries = []
        for label in range(n_classes):
            for index in range(per_class):
                sub = {"train": "cars_train", "val": "cars_train", "test": "cars_test"}[split_name] \
                    if name == "stanford_cars" else f"c{label:03d}"
                impath = f"{sub}/{split_name}_{label}_{index}.png"
                write_image(folder / image_dir / impath, label, index)
                entries.append([impath, label, f"{name} class {label}"])
        rng.shuffle(entries)
        split[split_name] = entries
    (folder / split_file).write_text(json.dumps(split))


def _fgvc(folder: Path, n_classes: int, per_class: int, rng: random.Random) -> None:
    variants = [f"Jet-{label}00" for label in range(n_classes)]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "variants.txt").write_text("\n".join(variants) + "\n")
    number = 1000000
    for split_name in ("train", "val", "test"):
        lines = []
        for label, variant in enumerate(variants):
            for index in range(per_class):
                number += 1
                write_image(folder / "images" / f"{number}.jpg", label, index)
                lines.append(f"{number} {variant}")
        rng.shuffle(lines)
        (folder / f"images_variant_{split_name}.txt").write_text("\n".join(lines) + "\n")


def _imagenet(folder: Path, n_classes: int, per_class: int) -> None:
    write_classnames(folder, n_classes)
    for split_dir in ("train", "val"):
        for label in range(n_classes):
            for index in range(per_class):
                write_image(folder / "images" / split_dir / wnid(label) / f"{split_dir}_{index:04d}.jpg", label, index)


def _imagenet_set(folder: Path, name: str, n_classes: int, per_class: int) -> None:
    write_classnames(folder, n_classes)
    image_root = folder / IMAGENET_SETS[name]
    subset = name in ("imagenet-adversarial", "imagenet-rendition")
    for label in range(n_classes):
        if subset and label % 2 == 0:
            continue
        class_dir = str(label) if name == "imagenetv2" else wnid(label)
        for index in range(per_class):
            write_image(image_root / class_dir / f"{index:04d}.png", label, index)
    if subset:
        (image_root / "README.txt").write_text("a file CoOp's reader skips\n")


def write_params(path: str | Path, root: str | Path, datasets: list[str], **data: object) -> Path:
    """A copy of the repository's params.yaml with `data.root`, `data.datasets` and any `data.<key>` overridden."""
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    params["data"].update({"root": str(root), "datasets": list(datasets), **data})
    # the study and the profile may only use prepared datasets (a params rule): point them at the first
    params["study"].update(base_to_novel=list(datasets[:1]),
                           transfer={"source": datasets[0], "cross_dataset": [], "domain_generalization": []})
    params["profile"]["dataset"] = datasets[0]
    path = Path(path)
    path.write_text(yaml.safe_dump(params, sort_keys=False))
    return path
