"""The backbone card's sanity check: zero-shot top-1 on every world test set, next to chance.

Optional (`backbone.sanity.enabled`: on for the embedded backbone, whose
card reports what it learned; off for real weights, which need no check on
emoji) and sized by `backbone.sanity.max_images_per_set` (a seeded sample).
Each set streams: images are decoded and encoded `eval_batch_size` at a
time, so memory holds one batch of pixels plus the set's features
[N, D], never a whole set's pixels. A progress bar per set, a log line
per finished set.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Iterator

import numpy as np
import torch
import torch.nn.functional as F

from dear.compute import device as devices
from dear.data.manifest import read_rgb
from dear.runtime.io import read_json
from dear.model.zeroshot import ZeroShotClassifier
from dear.runtime.progress import track

log = logging.getLogger("dear.backbone")


@torch.no_grad()
def world_zero_shot(model, tokenizer, preprocess, world: Path, world_card: dict, batch_size: int,
                    max_images: int | None = None, seed: int = 0, precision: str = "fp32") -> dict:
    """Zero-shot top-1 on every world test set (world_objects also by base/novel half), with chance."""
    device = model.logit_scale.device
    results = {}
    for name, entry in world_card["datasets"].items():
        split = read_json(world / name / f"split_zhou_{name}.json")["test"]
        items = sample(split, max_images, seed)
        classifier = ZeroShotClassifier(model, tokenizer, entry["classnames"], entry["templates"])
        paths = [world / name / "images" / impath for impath, _, _ in items]
        chunks = []
        for pixels in track(pixel_batches(paths, preprocess, batch_size), f"sanity {name}",
                            total=-(-len(paths) // batch_size), unit="batches"):
            with devices.autocast(device, precision):
                chunks.append(model.encode_image(pixels.to(device)).float())          # [B, D]
        logits = classifier.logits_of(F.normalize(torch.cat(chunks), dim=-1)).cpu()  # [N, C]
        labels = torch.tensor([label for _, label, _ in items])
        n = len(entry["classnames"])
        results[name] = {"top1": float((logits.argmax(-1) == labels).float().mean()), "chance": 1.0 / n,
                         "classes": n, "images": len(items), "images_in_set": len(split),
                         "templates": entry["templates"]}
        if name == "world_objects":
            results[name].update(base_novel(logits, labels))
        log.info("zero-shot %s: %.1f%% (chance %.1f%%) on %d images", name, 100 * results[name]["top1"],
                 100 / n, len(items))
    return results


def sample(items: list, max_images: int | None, seed: int) -> list:
    """All `items`, or a seeded sample of `max_images` of them in their original order."""
    if max_images is None or len(items) <= max_images:
        return items
    keep = np.random.default_rng(seed).choice(len(items), max_images, replace=False)
    return [items[i] for i in sorted(keep)]


def pixel_batches(paths: list[Path], preprocess, batch_size: int) -> Iterator[torch.Tensor]:
    """Preprocessed images [B, 3, H, W], `batch_size` at a time, in order."""
    for start in range(0, len(paths), batch_size):
        tensors = []
        for path in paths[start:start + batch_size]:
            tensors.append(preprocess(read_rgb(path)))
        yield torch.stack(tensors)


def base_novel(logits: torch.Tensor, labels: torch.Tensor) -> dict:
    """CoOp's base-to-novel protocol: first ceil(n/2) labels are base; each half is classified among its own classes."""
    n = logits.shape[1]
    cut = (n + 1) // 2
    base, novel = labels < cut, labels >= cut
    base_top1 = (logits[base][:, :cut].argmax(-1) == labels[base]).float().mean() if base.any() else None
    novel_top1 = (logits[novel][:, cut:].argmax(-1) + cut == labels[novel]).float().mean() if novel.any() else None
    return {"base_top1": _float(base_top1), "base_chance": 1.0 / cut,
            "novel_top1": _float(novel_top1), "novel_chance": 1.0 / (n - cut)}


def _float(value: torch.Tensor | None) -> float | None:
    """A top-1 as a float; None when a sample held no image of that half."""
    return None if value is None else float(value)
