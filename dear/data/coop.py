"""The built-in datasets: CoOp's fifteen (CoOp's DATASETS.md) and the embedded world, declared as data.

Each entry of `SPECS` says where a dataset lives under `data.root`, which
format of `dear.data.formats` reads it and its per-dataset facts; nothing
here reads a file. `declaration` resolves an entry under `data.root` into the
`Declaration` every dataset becomes (a dataset of one's own too:
`dear.data.custom`), read by the same readers and checks
(`dear.data.datasets.read`). CoOp's split JSON is the `coop-json` format;
ImageNet, its domain-shift sets and FGVC-Aircraft have layouts of their own
(`dear.data.formats.coop_layouts`). Readers follow CoOp's `datasets/*.py`
(same folders, same split files, same labels), except that ImageNet's file
lists are sorted instead of `os.listdir` order, so the listing is the same on
every machine. CoOp's splits are the reference every paper scores on: their
order (Dassl draws the shots from it), their names and their content are
taken as they are (`Declaration`'s facts).

A dataset of one's own (any folder, ImageFolder, CSV or a CoOp-style split
JSON at any path) needs no code: it is declared under `data.custom`
(docs/your-data.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dear.data.declaration import Declaration
from dear.errors import DearError
from dear.runtime.paramsfile import in_use

DATASETS_MD = "https://github.com/KaiyangZhou/CoOp/blob/main/DATASETS.md"


@dataclass(frozen=True)
class DatasetSpec:
    """Where a built-in dataset lives under `data.root`, which format reads it, and its facts."""

    folder: str                   # folder under data.root (DATASETS.md's name)
    image_dir: str                # image folder inside it ("" = the dataset folder itself)
    split_file: str               # the file that defines the split (json, classnames.txt, variants.txt)
    format: str                   # a key of dear.data.formats.FORMATS
    howto: str                    # how to obtain it, for error messages
    test_only: bool = False       # domain-shift sets: every image is a test image
    val_from_train: bool = False  # no val split of its own: validation shots come from train
    coop_classes: int | None = None  # class count of CoOp's copy (a warning if it differs)

    def dataset_dir(self, root: Path) -> Path:
        return root / self.folder

    def image_root(self, root: Path) -> Path:
        return root / self.folder / self.image_dir if self.image_dir else root / self.folder


def spec_for(name: str) -> DatasetSpec:
    if name not in SPECS:
        raise DearError(f"--dataset {name}: unknown dataset; known: {', '.join(sorted(SPECS))}; a dataset of "
                        f"your own: declare it under data.custom in {in_use()} (docs/your-data.md)")
    return SPECS[name]


def declaration(name: str, root: str | Path) -> Declaration:
    """The built-in dataset `name` under `root`, its folders checked first: one line naming the missing one."""
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
    return Declaration(name=name, key=name, format=spec.format, path=str(split_file), dataset_dir=folder,
                       howto=spec.howto, images=str(spec.image_root(root)), test_only=spec.test_only,
                       val_from_train=spec.val_from_train, coop_classes=spec.coop_classes,
                       order="listed", spaced_names=False, carve_val=False, check_content=False)


# --- the registry -------------------------------------------------------------------

def _coop_howto(anchor: str) -> str:
    return f"lay it out as in CoOp's DATASETS.md ({DATASETS_MD}#{anchor})"


def _json(folder: str, image_dir: str, split_file: str, anchor: str, classes: int | None) -> DatasetSpec:
    return DatasetSpec(folder, image_dir, split_file, "coop-json", _coop_howto(anchor), coop_classes=classes)


def _world(name: str) -> DatasetSpec:
    howto = "build the embedded world first (data.source: embedded; docs/world.md)"
    return DatasetSpec(name, "images", f"split_zhou_{name}.json", "coop-json", howto)


def _imagenet_set(folder: str, image_dir: str, layout: str, anchor: str, classes: int) -> DatasetSpec:
    return DatasetSpec(folder, image_dir, "classnames.txt", layout, _coop_howto(anchor),
                       test_only=True, coop_classes=classes)


SPECS: dict[str, DatasetSpec] = {
    "imagenet": DatasetSpec("imagenet", "images", "classnames.txt", "coop-imagenet", _coop_howto("imagenet"),
                            val_from_train=True, coop_classes=1000),
    "caltech-101": _json("caltech-101", "101_ObjectCategories", "split_zhou_Caltech101.json", "caltech101", 100),
    "oxford_pets": _json("oxford_pets", "images", "split_zhou_OxfordPets.json", "oxfordpets", 37),
    "stanford_cars": _json("stanford_cars", "", "split_zhou_StanfordCars.json", "stanfordcars", 196),
    "oxford_flowers": _json("oxford_flowers", "jpg", "split_zhou_OxfordFlowers.json", "flowers102", 102),
    "food-101": _json("food-101", "images", "split_zhou_Food101.json", "food101", 101),
    "fgvc_aircraft": DatasetSpec("fgvc_aircraft", "images", "variants.txt", "coop-fgvc",
                                 _coop_howto("fgvcaircraft"), coop_classes=100),
    "sun397": _json("sun397", "SUN397", "split_zhou_SUN397.json", "sun397", 397),
    "dtd": _json("dtd", "images", "split_zhou_DescribableTextures.json", "dtd", 47),
    "eurosat": _json("eurosat", "2750", "split_zhou_EuroSAT.json", "eurosat", 10),
    "ucf101": _json("ucf101", "UCF-101-midframes", "split_zhou_UCF101.json", "ucf101", 101),
    "imagenetv2": _imagenet_set("imagenetv2", "imagenetv2-matched-frequency-format-val", "coop-imagenet-v2",
                                "imagenetv2", 1000),
    "imagenet-sketch": _imagenet_set("imagenet-sketch", "images", "coop-imagenet-subset", "imagenet-sketch", 1000),
    "imagenet-adversarial": _imagenet_set("imagenet-adversarial", "imagenet-a", "coop-imagenet-subset",
                                          "imagenet-a", 200),
    "imagenet-rendition": _imagenet_set("imagenet-rendition", "imagenet-r", "coop-imagenet-subset",
                                        "imagenet-r", 200),
    **{name: _world(name) for name in (
        "world_objects", "world_objects_b", "world_objects_sketch", "world_objects_rare", "world_colors",
        "world_textures", "world_shapes", "world_positions")},
}
