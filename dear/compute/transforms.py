"""The pieces every image pipeline shares: interpolation modes by name, seeded CPU draws, Dassl's test transform.

Both the embedded backbone's pretraining (`dear.model.pretrain`) and the
trainer's shots and view bank (`dear.train`) draw augmentations from
(seed, ...) alone; they share these here rather than one importing the other.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from torchvision import transforms as T

INTERPOLATION = {"bicubic": T.InterpolationMode.BICUBIC, "bilinear": T.InterpolationMode.BILINEAR}


def derived_seed(*parts: int) -> int:
    """A 63-bit seed that depends only on `parts` (numpy's SeedSequence hashing)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(2, np.uint64)[0] >> np.uint64(1))


@contextlib.contextmanager
def cpu_seeded(seed: int):
    """Inside the block the global CPU generator starts from `seed` (what the image transforms draw from); its
    state is restored after. The same draws as `torch.manual_seed`, which also queues a seed for every lazy
    device backend with a captured stack: 0.13 ms a call here (0.006 ms this way), once per shot and view."""
    with torch.random.fork_rng(devices=[]):
        torch.default_generator.manual_seed(seed)
        yield


def test_transform(interpolation: str, size: int, mean, std) -> T.Compose:
    """Dassl's test transform: resize the short side to `size`, centre crop, normalize (fuse and evaluate use it)."""
    return T.Compose([
        T.Resize(size, interpolation=INTERPOLATION[interpolation]),
        T.CenterCrop(size),
        T.ToTensor(),
        T.Normalize(mean, std),
    ])
