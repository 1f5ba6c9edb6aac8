"""Dataset readers for CoOp's layout (CoOp's DATASETS.md), and the registry of names.

A reader turns `<data.root>/<folder>/...` into a `Listing`: one path, label and
split per image, in a fixed order, without opening any image. Readers follow
CoOp's `datasets/*.py` (same folders, same split files, same labels), except
that ImageNet's file lists are sorted instead of `os.listdir` order, so the
listing is the same on every machine.

A dataset of one's own (any folder, ImageFolder, CSV or a CoOp-style split
JSON at any path) needs no code: it is declared under `data.custom` and read
by `dear.data.custom` (docs/your-data.md); `read_dataset` dispatches to it.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from dear.data.manifest import SPLITS
from dear.errors import DearError
from dear.params import in_use

DATASETS_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md"
SPLIT_CODE = {name: code for code, name in enumerate(SPLITS)}


@dataclass
class Listing:
    """Every image of a dataset, as parallel columns (no image is opened)."""

    paths: list[str]              # [N] root/folder/image_dir/impath
    labels: np.ndarray            # [N] int32, the dataset's labels 0..n-1
    splits: np.ndarray            # [N] int8, index into SPLITS
    classnames: list[str]         # [n] label -> class name
    imagenet_labels: np.ndarray | None  # [N] int32 for the ImageNet family, else None
    source: Path                  # the file that defines labels and splits (hashed into provenance)
    base: np.ndarray | None = None  # [n] bool, True for a base class (data.custom's base_classes); None: CoOp's half


@dataclass(frozen=True)
class DatasetSpec:
    """Where a dataset lives under `data.root` and which reader understands it."""

    folder: str                   # folder under data.root (DATASETS.md's name)
    image_dir: str                # image folder inside it ("" = the dataset folder itself)
    split_file: str               # the file that defines the split (json, classnames.txt, variants.txt)
    reader: Callable[["DatasetSpec", Path], Listing]
    howto: str                    # how to obtain it, for error messages
    test_only: bool = False       # domain-shift sets: every image is a test image
    val_from_train: bool = False  # no val split of its own: validation shots come from train
    coop_classes: int | None = None  # class count of CoOp's copy (a warning if it differs)
    own: bool = False             # a dataset of one's own: `folder` is its declared path, not under data.root

    def dataset_dir(self, root: Path) -> Path:
        return Path(self.folder) if self.own else root / self.folder

    def image_root(self, root: Path) -> Path:
        return root / self.folder / self.image_dir if self.image_dir else root / self.folder


def read_dataset(name: str, root: str | Path, custom: dict | None = None) -> tuple[DatasetSpec, Listing]:
    """Find `name` in `custom` (data.custom) or the registry and list it; every problem is a one-line DearError."""
    if custom and name in custom:
        from dear.data import custom as own

        spec = own.spec(name, custom[name])
        return spec, spec.reader(spec, Path(root))
    spec = spec_for(name)
    root = Path(root)
    folder = spec.dataset_dir(root)
    if not root.is_dir():
        raise DearError(f"{root}: data.root not found (expected {folder} inside it); "
                        f"set data.root in {in_use()}, then {spec.howto}")
    if not folder.is_dir():
        raise DearError(f"{folder}: dataset folder not found (data.root is {root}); {spec.howto}")
    split_file = folder / spec.split_file
    if not split_file.is_file():
        raise DearError(f"{split_file}: {spec.split_file} not found; {spec.howto}")
    if not spec.image_root(root).is_dir():
        raise DearError(f"{spec.image_root(root)}: image folder not found; {spec.howto}")
    listing = spec.reader(spec, root)
    _check_labels(listing, split_file)
    return spec, listing


def spec_for(name: str) -> DatasetSpec:
    if name not in SPECS:
        raise DearError(f"--dataset {name}: unknown dataset; known: {', '.join(sorted(SPECS))}; a dataset of "
                        f"your own: declare it under data.custom in {in_use()} (docs/your-data.md)")
    return SPECS[name]


# --- CoOp split JSON (ten of the base-to-novel datasets, and the embedded world) ---

def read_split_json(spec: DatasetSpec, root: Path) -> Listing:
    """`split_zhou_<Name>.json`: labels and class names as the file gives them."""
    split_file = spec.dataset_dir(root) / spec.split_file
    try:
        split = json.loads(split_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DearError(f"{split_file}: not valid JSON ({err}); download it again ({DATASETS_MD})")
    if not isinstance(split, dict) or not all(isinstance(split.get(key), list) for key in SPLITS):
        raise DearError(f"{split_file}: expected an object with lists 'train', 'val' and 'test'; "
                        f"use CoOp's file ({DATASETS_MD})")
    prefix = str(spec.image_root(root))
    paths, labels, splits, names = [], [], [], {}
    for split_name in SPLITS:
        for position, item in enumerate(split[split_name]):
            impath, label, classname = _json_item(item, split_file, split_name, position)
            _same_name(names, label, classname, split_file)
            paths.append(os.path.join(prefix, impath))
            labels.append(label)
            splits.append(SPLIT_CODE[split_name])
    return _listing(paths, labels, splits, names, split_file)


def _json_item(item: object, split_file: Path, split_name: str, position: int) -> tuple[str, int, str]:
    ok = (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)
          and isinstance(item[1], int) and not isinstance(item[1], bool) and isinstance(item[2], str))
    if not ok:
        raise DearError(f"{split_file}: entry {position} of '{split_name}' is {str(item)[:80]}, "
                        "expected [impath, integer label, classname]; use CoOp's file")
    return item[0], item[1], item[2]


def _same_name(names: dict[int, str], label: int, classname: str, source: Path) -> None:
    known = names.setdefault(label, classname)
    if known != classname:
        raise DearError(f"{source}: label {label} is named both {known!r} and {classname!r}; "
                        "each label needs one class name")


# --- FGVC-Aircraft: variants.txt + images_variant_<split>.txt (CoOp has no JSON for it) ---

def read_fgvc_aircraft(spec: DatasetSpec, root: Path) -> Listing:
    """Labels are line numbers of `variants.txt`; split files list `<image id> <variant>`."""
    folder = spec.dataset_dir(root)
    variants_file = folder / spec.split_file
    variants = [line.strip() for line in variants_file.read_text().splitlines() if line.strip()]
    label_of = {name: label for label, name in enumerate(variants)}
    if len(label_of) != len(variants):
        raise DearError(f"{variants_file}: a variant is listed twice; use the file from fgvc-aircraft-2013b")
    prefix = str(spec.image_root(root))
    paths, labels, splits = [], [], []
    for split_name in SPLITS:
        list_file = folder / f"images_variant_{split_name}.txt"
        if not list_file.is_file():
            raise DearError(f"{list_file}: not found; {spec.howto}")
        for number, line in enumerate(list_file.read_text().splitlines(), start=1):
            if not line.strip():
                continue
            image_id, _, variant = line.strip().partition(" ")
            if variant not in label_of:
                raise DearError(f"{list_file}: line {number}: variant {variant!r} is not in {variants_file.name}")
            paths.append(os.path.join(prefix, image_id + ".jpg"))
            labels.append(label_of[variant])
            splits.append(SPLIT_CODE[split_name])
    return _listing(paths, labels, splits, dict(enumerate(variants)), variants_file)


# --- ImageNet family: wnid folders + classnames.txt ---------------------------------

def read_classnames(path: Path) -> dict[str, str]:
    """`classnames.txt`: "<wnid> <class name>" per line, wnids sorted (ImageNet's label order)."""
    names: dict[str, str] = {}
    for number, line in enumerate(path.read_text().splitlines(), start=1):
        if not line.strip():
            continue
        wnid, _, classname = line.strip().partition(" ")
        if not classname:
            raise DearError(f"{path}: line {number} is {line.strip()!r}, expected '<wnid> <class name>'; "
                            f"use CoOp's classnames.txt ({DATASETS_MD}#imagenet)")
        if wnid in names:
            raise DearError(f"{path}: wnid {wnid} is listed twice (line {number}); use CoOp's classnames.txt")
        names[wnid] = classname
    if list(names) != sorted(names):
        raise DearError(f"{path}: wnids are not in sorted order, so line numbers are not ImageNet's labels; "
                        "use CoOp's classnames.txt")
    return names


def _class_folders(folder: Path) -> list[str]:
    """Sorted non-hidden sub-folders (CoOp: sorted folders; files such as README.txt are skipped)."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_dir() and not entry.name.startswith("."))


def _image_files(folder: Path) -> list[str]:
    """Sorted non-hidden files: CoOp uses `os.listdir` order, which differs between machines."""
    return sorted(entry.name for entry in os.scandir(folder) if entry.is_file() and not entry.name.startswith("."))


def read_imagenet(spec: DatasetSpec, root: Path) -> Listing:
    """images/train/<wnid>/ is the train split, images/val/<wnid>/ the test split (no val split)."""
    classnames_file = spec.dataset_dir(root) / spec.split_file
    names = read_classnames(classnames_file)
    image_root = spec.image_root(root)
    train_dir, test_dir = image_root / "train", image_root / "val"
    for needed in (train_dir, test_dir):
        if not needed.is_dir():
            raise DearError(f"{needed}: not found; {spec.howto}")
    wnids = _class_folders(train_dir)
    if wnids != list(names):
        raise DearError(f"{train_dir}: {len(wnids)} class folders but {classnames_file.name} lists {len(names)} "
                        f"wnids{_first_difference(wnids, list(names))}; they must match one to one")
    label_of = {wnid: label for label, wnid in enumerate(wnids)}
    paths, labels, splits = [], [], []
    for split_name, split_dir in (("train", train_dir), ("test", test_dir)):
        for wnid in _class_folders(split_dir):
            if wnid not in label_of:
                raise DearError(f"{split_dir / wnid}: not a class of {train_dir}; remove it")
            files = _image_files(split_dir / wnid)
            prefix = str(split_dir / wnid)
            paths.extend(os.path.join(prefix, name) for name in files)
            labels.extend([label_of[wnid]] * len(files))
            splits.extend([SPLIT_CODE[split_name]] * len(files))
    listing = _listing(paths, labels, splits, dict(enumerate(names.values())), classnames_file)
    listing.imagenet_labels = listing.labels.copy()
    return listing


def read_imagenet_v2(spec: DatasetSpec, root: Path) -> Listing:
    """Folders named by ImageNet label index 0..n-1 (CoOp: `range(1000)`); test only."""
    classnames_file = spec.dataset_dir(root) / spec.split_file
    names = list(read_classnames(classnames_file).values())
    image_root = spec.image_root(root)
    paths, labels = [], []
    for label in range(len(names)):
        class_dir = image_root / str(label)
        if not class_dir.is_dir():
            raise DearError(f"{class_dir}: not found ({classnames_file.name} lists {len(names)} classes, "
                            f"so folders 0..{len(names) - 1} are expected); {spec.howto}")
        files = _image_files(class_dir)
        paths.extend(os.path.join(str(class_dir), name) for name in files)
        labels.extend([label] * len(files))
    extra = sorted(set(_class_folders(image_root)) - {str(label) for label in range(len(names))})
    if extra:
        raise DearError(f"{image_root / extra[0]}: no such class in {classnames_file.name} "
                        f"({len(names)} classes); remove it or use CoOp's classnames.txt")
    listing = _listing(paths, labels, [SPLIT_CODE["test"]] * len(paths), dict(enumerate(names)), classnames_file)
    listing.imagenet_labels = listing.labels.copy()
    return listing


def read_imagenet_subset(spec: DatasetSpec, root: Path) -> Listing:
    """wnid folders, possibly a subset of ImageNet's classes (ImageNet-A/-R: 200); test only.

    As in CoOp, `label` numbers the dataset's own sorted folders 0..k-1, so a model
    over exactly these k class names can be scored; `imagenet_label` keeps the
    class's index among ImageNet's classes (line of classnames.txt).
    """
    classnames_file = spec.dataset_dir(root) / spec.split_file
    names = read_classnames(classnames_file)
    imagenet_label = {wnid: label for label, wnid in enumerate(names)}
    image_root = spec.image_root(root)
    wnids = _class_folders(image_root)
    unknown = [wnid for wnid in wnids if wnid not in imagenet_label]
    if unknown:
        raise DearError(f"{image_root / unknown[0]}: wnid not in {classnames_file} "
                        f"({len(unknown)} such folders); use ImageNet's classnames.txt")
    paths, labels, in_imagenet = [], [], []
    for label, wnid in enumerate(wnids):
        files = _image_files(image_root / wnid)
        paths.extend(os.path.join(str(image_root / wnid), name) for name in files)
        labels.extend([label] * len(files))
        in_imagenet.extend([imagenet_label[wnid]] * len(files))
    listing = _listing(paths, labels, [SPLIT_CODE["test"]] * len(paths),
                       {label: names[wnid] for label, wnid in enumerate(wnids)}, classnames_file)
    listing.imagenet_labels = np.asarray(in_imagenet, dtype=np.int32)
    return listing


def _first_difference(found: list[str], listed: list[str]) -> str:
    only_found = sorted(set(found) - set(listed))
    only_listed = sorted(set(listed) - set(found))
    if only_found:
        return f" ({only_found[0]} has a folder but no line)"
    if only_listed:
        return f" ({only_listed[0]} has a line but no folder)"
    return ""


# --- shared checks ------------------------------------------------------------------

def _listing(paths: list[str], labels: list[int], splits: list[int], names: dict[int, str], source: Path) -> Listing:
    if not paths:
        raise DearError(f"{source}: the dataset has no images; check the folder against {DATASETS_MD}")
    label_array = np.asarray(labels, dtype=np.int64)
    classnames = [names.get(label, "") for label in range(max(names) + 1)] if names else []
    return Listing(paths=paths, labels=label_array, splits=np.asarray(splits, dtype=np.int8),
                   classnames=classnames, imagenet_labels=None, source=source)


def _check_labels(listing: Listing, source: Path) -> None:
    """Labels must be exactly 0..n-1, every one used, every one with a name."""
    present = np.unique(listing.labels)
    n_classes = len(listing.classnames)
    if present[0] < 0 or present[-1] >= n_classes or len(present) != n_classes:
        missing = sorted(set(range(n_classes)) - set(present.tolist()))
        detail = f"label {missing[0]} has no image" if missing else f"labels run from {present[0]} to {present[-1]}"
        raise DearError(f"{source}: labels must be 0..n-1 with every class present, but {detail} "
                        f"({len(present)} distinct labels); use CoOp's unmodified file")
    listing.labels = listing.labels.astype(np.int32)


# --- the registry -------------------------------------------------------------------

def _coop_howto(anchor: str) -> str:
    return f"lay it out as in CoOp's DATASETS.md ({DATASETS_MD}#{anchor})"


def _json(folder: str, image_dir: str, split_file: str, anchor: str, classes: int | None) -> DatasetSpec:
    return DatasetSpec(folder, image_dir, split_file, read_split_json, _coop_howto(anchor), coop_classes=classes)


def _world(name: str) -> DatasetSpec:
    howto = "build the embedded world first (data.source: embedded; docs/world.md)"
    return DatasetSpec(name, "images", f"split_zhou_{name}.json", read_split_json, howto)


def _imagenet_set(folder: str, image_dir: str, reader: Callable, anchor: str, classes: int) -> DatasetSpec:
    return DatasetSpec(folder, image_dir, "classnames.txt", reader, _coop_howto(anchor),
                       test_only=True, coop_classes=classes)


SPECS: dict[str, DatasetSpec] = {
    "imagenet": DatasetSpec("imagenet", "images", "classnames.txt", read_imagenet, _coop_howto("imagenet"),
                            val_from_train=True, coop_classes=1000),
    "caltech-101": _json("caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json", "caltech101", 100),
    "oxford_pets": _json("oxford_pets", "images", "split_zhou_OxfordPets.json", "oxfordpets", 37),
    "stanford_cars": _json("stanford_cars", "", "split_zhou_StanfordCars.json", "stanfordcars", 196),
    "oxford_flowers": _json("oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json", "flowers102", 102),
    "food-101": _json("food-101", "images", "split_zhou_Food101.json", "food101", 101),
    "fgvc_aircraft": DatasetSpec("fgvc_aircraft", "images", "variants.txt", read_fgvc_aircraft,
                                 _coop_howto("fgvcaircraft"), coop_classes=100),
    "sun397": _json("sun397", "SUN397", "split_zhou_SUN397.json", "sun397", 397),
    "dtd": _json("dtd", "images", "split_zhou_DescribableTextures.json", "dtd", 47),
    "eurosat": _json("eurosat", "2750", "split_zhou_EuroSAT.json", "eurosat", 10),
    "ucf101": _json("ucf101", "UCF-101-midframes", "split_zhou_UCF101.json", "ucf101", 101),
    "imagenetv2": _imagenet_set("imagenetv2", "imagenetv2-matched-frequency-format-val", read_imagenet_v2,
                                "imagenetv2", 1000),
    "imagenet-sketch": _imagenet_set("imagenet-sketch", "images", read_imagenet_subset, "imagenet-sketch", 1000),
    "imagenet-adversarial": _imagenet_set("imagenet-adversarial", "imagenet-a", read_imagenet_subset,
                                          "imagenet-a", 200),
    "imagenet-rendition": _imagenet_set("imagenet-rendition", "imagenet-r", read_imagenet_subset,
                                        "imagenet-r", 200),
    **{name: _world(name) for name in (
        "world_objects", "world_objects_b", "world_objects_sketch", "world_objects_rare", "world_colors",
        "world_textures", "world_shapes", "world_positions")},
}
