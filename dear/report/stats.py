"""The report's uncertainty: t-intervals over seeds and a paired bootstrap over test images, both from scipy.

Two sources of noise move a number of this study, and each interval names
the one it measures:

- **seeds** (`seed_interval`): a seed draws the few-shot sample, the
  initialization and the batch order. The seeds' values are treated as a
  sample from that distribution: mean ± the half-width of Student's t
  interval, t_{n-1} · s / √n (`scipy.stats.t`). For a paired difference the
  values are per-seed differences on the same seed (a paired t-interval).
- **test images** (`image_interval`): the test set is one draw of images.
  Resampling the test images of every split with replacement, the same
  images for both methods and every seed (the pairing), gives a percentile
  bootstrap interval of the difference (`scipy.stats.bootstrap`), with the
  seeds held fixed.

`verdict` calls a difference better or worse only when both intervals
exclude zero on the same side (docs/report.md says why).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
from scipy import stats

BOOTSTRAP_SEED = 0  # the resampling is seeded: the same inputs give the same report, byte for byte
BATCH = 64          # resamples evaluated at once: [2, seeds, BATCH, images] booleans per split


def seed_interval(values: Sequence[float], confidence: float, center: float | None = None) -> tuple[float, float]:
    """Student's t interval of the mean of `values` (NaN, NaN with fewer than two).

    `center` replaces the values' mean as the interval's centre (an HM of
    means is not the mean of the per-seed HMs; its half-width is theirs).
    """
    array = np.asarray(values, dtype=float)
    if len(array) < 2:
        return np.nan, np.nan
    mid = float(array.mean()) if center is None else float(center)
    spread = float(stats.sem(array))
    if spread == 0.0:
        return mid, mid
    low, high = stats.t.interval(confidence, len(array) - 1, loc=mid, scale=spread)
    return float(low), float(high)


Metric = Callable[[list[np.ndarray]], np.ndarray]


def image_interval(hits: list[np.ndarray], metrics: Metric, confidence: float,
                   resamples: int) -> tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of mean-over-seeds (method - baseline), resampling test images.

    hits: one boolean array [2, S, n_k] per split k (row 0 the method, row 1
    the baseline; S common seeds; n_k test images in the same order for both).
    metrics: per-split accuracies (a list of [2, S, ...] arrays, in percent)
    -> [M, 2, S, ...], the M reported numbers (e.g. Base, Novel, HM).
    Returns (low, high), each [M]. The observations scipy resamples are the
    image indices of each split, so every resample takes the same images
    for both methods and all seeds.
    """
    def statistic(*indices: np.ndarray, axis: int = -1) -> np.ndarray:
        accuracy = [100.0 * split[:, :, index].mean(axis=-1) for split, index in zip(hits, indices)]  # [2, S, ...]
        values = metrics(accuracy)                                                                 # [M, 2, S, ...]
        return (values[:, 0] - values[:, 1]).mean(axis=1)                                          # [M, ...]

    result = stats.bootstrap([np.arange(split.shape[-1]) for split in hits], statistic, n_resamples=resamples,
                             vectorized=True, paired=False, confidence_level=confidence, method="percentile",
                             batch=BATCH, rng=np.random.default_rng(BOOTSTRAP_SEED))
    return np.atleast_1d(result.confidence_interval.low), np.atleast_1d(result.confidence_interval.high)


def verdict(seeds: tuple[float, float], images: tuple[float, float]) -> str:
    """'better' / 'worse' when both intervals exclude 0 on one side, else 'within noise'.

    With one seed there is no seed interval: the verdict rests on the test
    images alone and says so.
    """
    if np.isnan(seeds).any():
        side = _side(images)
        return f"{side} (test images only: 1 seed)" if side != "within noise" else side
    side = _side(seeds)
    return side if side == _side(images) else "within noise"


def _side(interval: tuple[float, float]) -> str:
    low, high = interval
    return "better" if low > 0 else "worse" if high < 0 else "within noise"
