"""A fixed bank of augmented views per training image, their frozen blocks computed once.

With a recipe's `views: V` (ours), image i has V augmented views (each drawn with a seed of
its own from (run seed, view, i)), and epoch e trains on view e mod V. The
image blocks below the first token layer never depend on a learnable tensor,
so their output for a view - and the untouched model's CLS feature that the
image regularizer compares with - is the same at every step: it is computed
once per view and reused in every later epoch that uses the view (exact
reuse: the same numbers as recomputing them). `views: null` keeps the
recipe's fresh view of every image in every epoch (no cache).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from PIL import Image

from dear.data.manifest import read_rgb
from dear.train.data import Shots
from dear.compute.transforms import cpu_seeded, derived_seed

VIEW_STREAM = 7  # keeps view seeds apart from the per-epoch augmentation seeds of dear.train.data


@dataclass
class View:
    prefix: torch.Tensor  # [n, 1+N, D] output of the frozen blocks
    frozen_cls: torch.Tensor | None  # [n, E] the untouched model's CLS feature


class ViewCache:
    """Frozen-block outputs of V augmented views of every shot, computed on first use."""

    def __init__(self, model, shots: Shots, transform, views: int, seed: int, batch_size: int, autocast):
        self.model, self.transform, self.views, self.seed = model, transform, views, seed
        self.batch_size, self.autocast = batch_size, autocast
        self.with_frozen = model.needs_frozen_image  # the method's loss compares with the untouched image feature
        self.images = [_decoded(path) for path in shots.paths]  # decoded once
        self._views: dict[int, View] = {}

    def batch(self, epoch: int, rows: list[int]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """(prefix [B, 1+N, D], frozen CLS [B, E] or None) of `rows` in the view of `epoch`."""
        view = self._view(epoch % self.views)
        index = torch.tensor(rows, device=view.prefix.device)
        frozen = view.frozen_cls[index] if view.frozen_cls is not None else None
        return view.prefix[index], frozen

    @torch.no_grad()
    def _view(self, v: int) -> View:
        if v not in self._views:
            device = self.model.device
            prefixes, frozen = [], []
            for start in range(0, len(self.images), self.batch_size):
                pixels = torch.stack([self._augmented(v, i) for i in range(start, min(start + self.batch_size,
                                                                                       len(self.images)))])
                with self.autocast:
                    prefix = self.model.image_prefix(pixels.to(device))  # [b, 1+N, D]
                    prefixes.append(prefix)
                    if self.with_frozen:
                        frozen.append(self.model.frozen_image(prefix))
            self._views[v] = View(torch.cat(prefixes), torch.cat(frozen) if frozen else None)
        return self._views[v]

    def _augmented(self, v: int, i: int) -> torch.Tensor:
        with cpu_seeded(derived_seed(self.seed, VIEW_STREAM, v, i)):
            return self.transform(self.images[i])  # [3, S, S]


def _decoded(path: str) -> Image.Image:
    return read_rgb(path)  # a missing or undecodable shot is one line naming it
