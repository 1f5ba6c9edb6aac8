"""dear.report.stats: the t-interval over seeds, the paired bootstrap over test images, the verdict."""

import math

import numpy as np
import pytest

from dear.report.stats import image_interval, seed_interval, verdict


def test_seed_interval_is_students_t():
    # 3 values, mean 85, std 5: half-width t(0.975, 2) * 5 / sqrt(3) = 4.302653 * 2.886751 = 12.4207
    low, high = seed_interval([80.0, 85.0, 90.0], 0.95)
    assert (low, high) == (pytest.approx(85 - 12.4207, abs=1e-4), pytest.approx(85 + 12.4207, abs=1e-4))
    # the HM's interval: centred where told, with the values' spread
    assert seed_interval([80.0, 85.0, 90.0], 0.95, center=84.0)[0] == pytest.approx(84 - 12.4207, abs=1e-4)
    assert seed_interval([70.0, 70.0], 0.95) == (70.0, 70.0)
    assert all(math.isnan(v) for v in seed_interval([70.0], 0.95))
    narrower = seed_interval([80.0, 85.0, 90.0], 0.80)
    assert low < narrower[0] < narrower[1] < high


def _pair(n: int, both: int, only_method: int, only_baseline: int) -> np.ndarray:
    """[2, 1, n] hits of one seed: `both` images right for both, then some right for one of them only."""
    method = np.zeros(n, bool)
    baseline = np.zeros(n, bool)
    method[:both + only_method] = True
    baseline[:both] = True
    baseline[both + only_method:both + only_method + only_baseline] = True
    return np.stack([method, baseline])[:, None, :]


def _accuracy(accuracy):
    """One reported number: the accuracy averaged over the splits -> [1, 2, S, ...]."""
    return np.mean(accuracy, axis=0)[None]


def test_paired_bootstrap_sees_only_the_images_the_methods_disagree_on():
    # 1,000 images, both right on 500, the method alone right on 10 more: +1.0 point. Paired, only the 10
    # discordant images vary: sd ~ 100 * sqrt(10) / 1000 = 0.32, so about 1.0 ± 0.62. Two unpaired 50 % accuracies
    # on 1,000 images would give about ± 4.4.
    low, high = image_interval([_pair(1000, 500, 10, 0)], _accuracy, 0.95, 2000)
    assert 0.2 < low[0] < 0.6 and 1.4 < high[0] < 1.8
    same_low, same_high = image_interval([_pair(1000, 500, 0, 0)], _accuracy, 0.95, 500)
    assert (same_low[0], same_high[0]) == (0.0, 0.0)


def test_paired_bootstrap_resamples_every_split_and_is_seeded():
    # two splits, one where the method gains 10 images of 100, one where it loses 10 of 100: the mean over splits is 0
    hits = [_pair(100, 40, 10, 0), _pair(100, 40, 0, 10)]
    low, high = image_interval(hits, _accuracy, 0.95, 1000)
    assert low[0] < 0 < high[0]
    assert image_interval(hits, _accuracy, 0.95, 1000) == (low, high)  # same inputs, same interval


@pytest.mark.parametrize("seeds, images, expected", [
    ((0.5, 2.0), (0.1, 1.0), "better"),
    ((-2.0, -0.5), (-1.0, -0.1), "worse"),
    ((0.5, 2.0), (-0.1, 1.0), "within noise"),    # the test images do not rule out 0
    ((-0.5, 2.0), (0.1, 1.0), "within noise"),    # the seeds do not
    ((0.5, 2.0), (-1.0, -0.1), "within noise"),   # the two disagree
    ((math.nan, math.nan), (0.1, 1.0), "better (test images only: 1 seed)"),
    ((math.nan, math.nan), (-0.1, 1.0), "within noise"),
])
def test_verdict_needs_both_intervals_on_one_side(seeds, images, expected):
    assert verdict(seeds, images) == expected
