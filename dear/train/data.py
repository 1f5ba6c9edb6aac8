"""The base classes' training shots, CoOp's augmentations, and a deterministic batch order.

Every random choice of a step (which images, which crop, which flip) is
derived from (seed, epoch, slot) alone, not from a generator that advances:
a resumed run, or one with a different `train.workers`, sees exactly the
same batches as an uninterrupted one.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torchvision import transforms as T

from dear.compute import cpus
from dear.data import manifest
from dear.data.manifest import read_fewshot, select
from dear.errors import DearError, from_workers
from dear.methods.recipe import steps_per_epoch
from dear.compute.transforms import INTERPOLATION, cpu_seeded, derived_seed

@dataclass(frozen=True)
class Shots:
    """Training images of the base classes: paths [n], labels [n] (subset_label), class names by label."""

    paths: list[str]
    labels: list[int]
    classnames: list[str]

    def per_class(self) -> list[int]:
        """[fewest, most] training shots of one class: fewer than data.shots where a class has fewer images."""
        counts = np.bincount(self.labels, minlength=len(self.classnames))
        return [int(counts.min()), int(counts.max())]


def training_shots(path: Path, subset: str = "base") -> Shots:
    """Training shots of `subset` ("base": labels are subset_label; "all": every class, labels are label).

    Checked: every class of the subset has at least one shot and one name.
    """
    table = select(read_fewshot(path), subset=None if subset == "all" else subset, fewshot_split="train")
    if table.num_rows == 0:
        raise DearError(f"{path}: no training shots of {subset} classes; rerun `dear prepare`")
    labels = table["label" if subset == "all" else "subset_label"].to_pylist()
    names: dict[int, str] = {}
    for label, name in zip(labels, table["classname"].to_pylist()):
        if names.setdefault(label, name) != name:
            raise DearError(f"{path}: label {label} has two class names ({names[label]!r}, {name!r}); rerun `dear prepare`")
    missing = sorted(set(range(max(names) + 1)) - set(names))
    if missing or min(names) < 0:
        raise DearError(f"{path}: {subset} classes {missing[:10]} have no training shots ({len(missing)} missing); "
                        "every class needs at least one shot: rerun `dear prepare` or check the dataset")
    return Shots(paths=table["path"].to_pylist(), labels=labels, classnames=[names[i] for i in range(len(names))])


def check_images_exist(shots: Shots, source: Path) -> None:
    manifest.check_images_exist(shots.paths, source, "training image")


def train_transform(aug, size: int, mean, std) -> T.Compose:
    """Dassl's training transform: random resized crop, horizontal flip, normalize.

    `aug`: anything with crop_scale, flip_prob and interpolation (a method's recipe, the backbone's section).
    """
    return T.Compose([
        T.RandomResizedCrop(size, scale=tuple(aug.crop_scale), interpolation=INTERPOLATION[aug.interpolation]),
        T.RandomHorizontalFlip(aug.flip_prob),
        T.ToTensor(),
        T.Normalize(mean, std),
    ])


def unaugmented_transform(interpolation: str, size: int, mean, std) -> T.Compose:
    """Dassl's `to_tensor` of the unaugmented image img0 (DatasetWrapper, RETURN_IMG0): resized to size x size
    (INPUT.SIZE (224, 224): the aspect ratio not kept, nothing cropped), normalize."""
    return T.Compose([
        T.Resize((size, size), interpolation=INTERPOLATION[interpolation]),
        T.ToTensor(),
        T.Normalize(mean, std),
    ])


@dataclass(frozen=True)
class Views:
    """A batch whose images are each seen in k augmented views (Dassl's K_TRANSFORMS, TAC's loader), the rows
    view-major as their parse_batch_train's torch.cat(batch["img"]): row v B + i is view v of image i."""

    pixels: torch.Tensor  # [k B, 3, S, S]
    img0: torch.Tensor | None  # [B, 3, S, S] the unaugmented images (RETURN_IMG0), or None
    k: int

    @classmethod
    def of(cls, item: dict) -> "Views":
        """From a collated batch {"views": [B, k, 3, S, S], "img0": [B, 3, S, S] (optional)}."""
        views = item["views"]
        return cls(views.transpose(0, 1).flatten(0, 1), item.get("img0"), views.shape[1])

    def to(self, device) -> "Views":
        return Views(self.pixels.to(device, non_blocking=True),
                     None if self.img0 is None else self.img0.to(device, non_blocking=True), self.k)


@dataclass(frozen=True)
class Schedule:
    """Which samples each step reads: a fresh permutation per epoch, cut in batches as Dassl's loader does.

    Dassl: `drop_last = is_train and len(data_source) >= batch_size`: the last short
    batch is dropped when the shots hold at least one full batch (304 shots at
    batch 32: 9 steps), and kept as the only batch when they do not. `drop_last`
    False keeps it (a plain DataLoader's default: Tip-Adapter's and CLIP-LoRA's
    loaders, 304 shots at batch 32: 10 steps). `steps`: the run stops after this
    many steps, in the middle of an epoch if it falls there (CLIP-LoRA's
    `count_iters == total_iters`); None: after `epochs` whole epochs.
    """

    n: int
    batch_size: int
    epochs: int
    seed: int
    drop_last: bool | None = None  # None: Dassl's rule above
    steps: int | None = None

    @property
    def drops_last(self) -> bool:
        return self.n >= self.batch_size and self.drop_last is not False

    @property
    def steps_per_epoch(self) -> int:
        return steps_per_epoch(self.n, self.batch_size, self.drop_last)

    @property
    def total_steps(self) -> int:
        return self.steps if self.steps is not None else self.steps_per_epoch * self.epochs

    def order(self, epoch: int) -> list[int]:
        generator = torch.Generator().manual_seed(derived_seed(self.seed, epoch, 0))
        return torch.randperm(self.n, generator=generator).tolist()

    def batches(self, start_step: int):
        """Lists of (epoch, slot) per step, from `start_step` to the end (a DataLoader batch sampler)."""
        for step in range(start_step, self.total_steps):
            epoch, b = divmod(step, self.steps_per_epoch)
            first = b * self.batch_size
            yield [(epoch, slot) for slot in range(first, min(first + self.batch_size, self.n))]  # full unless n < B


class ShotImages(torch.utils.data.Dataset):
    """Item (epoch, slot): the image at that slot of the epoch's order, augmented with a seed of its own; with
    `views` k > 1 or an `img0` transform, {"views": its k views [k, 3, S, S] (view v > 0 drawn with a seed of
    its own), "img0": the unaugmented image} (Dassl's DatasetWrapper with K_TRANSFORMS and RETURN_IMG0)."""

    def __init__(self, shots: Shots, schedule: Schedule, transform, views: int = 1, img0=None):
        self.shots, self.schedule, self.transform = shots, schedule, transform
        self.views, self.img0 = views, img0
        self._orders: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return self.schedule.n

    def __getitem__(self, item: tuple[int, int]):
        epoch, slot = item
        if epoch not in self._orders:
            self._orders = {epoch: self.schedule.order(epoch)}
        row = self._orders[epoch][slot]
        image = manifest.read_rgb(self.shots.paths[row])
        with cpu_seeded(derived_seed(self.schedule.seed, epoch, slot + 1)):
            pixels = self.transform(image)  # [3, S, S]
        if self.views == 1 and self.img0 is None:
            return pixels, self.shots.labels[row]
        views = [pixels]
        for view in range(1, self.views):
            with cpu_seeded(derived_seed(self.schedule.seed, epoch, slot + 1, view)):
                views.append(self.transform(image))
        item = {"views": torch.stack(views)}  # [k, 3, S, S]
        if self.img0 is not None:
            item["img0"] = self.img0(image)  # [3, S, S]
        return item, self.shots.labels[row]


PASS_STREAM = 0x5EED_CA  # the augmentation draws of `ShotPasses`, apart from the epochs' (seed, epoch, slot)


class ShotPasses(torch.utils.data.Dataset):
    """Item (pass, row): shot `row` in a view of its own for augmented pass `pass` (Tip-Adapter-F's cache), its
    draws from (seed, PASS_STREAM, pass, row) alone."""

    def __init__(self, shots: Shots, transform, seed: int):
        self.shots, self.transform, self.seed = shots, transform, seed

    def __len__(self) -> int:
        return len(self.shots.paths)

    def __getitem__(self, item: tuple[int, int]):
        index, row = item
        image = manifest.read_rgb(self.shots.paths[row])
        with cpu_seeded(derived_seed(self.seed, PASS_STREAM, index, row)):
            pixels = self.transform(image)  # [3, S, S]
        return index, pixels, self.shots.labels[row]


def passes(dataset: ShotPasses, count: int, batch_size: int, workers: int):
    """Batches (pass [B], pixels [B, 3, S, S], labels [B]) of `count` passes over the shots, each in shot order."""
    n = len(dataset)
    batches = [[(index, row) for row in range(first, min(first + batch_size, n))]
               for index in range(count) for first in range(0, n, batch_size)]
    return from_workers(torch.utils.data.DataLoader(dataset, batch_sampler=batches,
                                                    num_workers=cpus.processes(workers)))


def loader(dataset: ShotImages, start_step: int, workers: int, pin_memory: bool = False):
    """Batches from `start_step` on; the batch contents do not depend on `workers`."""
    return from_workers(torch.utils.data.DataLoader(dataset, batch_sampler=list(dataset.schedule.batches(start_step)),
                                                    num_workers=cpus.processes(workers), pin_memory=pin_memory))
