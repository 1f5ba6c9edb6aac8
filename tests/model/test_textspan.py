"""TextSpan on constructed heads whose answer is known (SPEC §2)."""

import numpy as np
import pytest

from dear.errors import DearError
from dear.model.textspan import check_rank, covariance, rank_problems, text_span


def _unit_rows(rng, k, e):
    rows = rng.standard_normal((k, e))
    return rows / np.linalg.norm(rows, axis=1, keepdims=True)


def test_head_built_from_two_texts_picks_them_first():
    rng = np.random.default_rng(0)
    texts = _unit_rows(rng, 60, 24)  # [K, E]
    a, b = rng.standard_normal((2, 500))
    head = np.outer(3.0 * a, texts[11]) + np.outer(1.0 * b, texts[42]) + 0.01 * rng.standard_normal((500, 24))
    picks = text_span(covariance(head), texts, rank=10, picks=4)
    assert [p.index for p in picks[:2]] == [11, 42]
    assert picks[0].variance > picks[1].variance > 10 * picks[2].variance
    assert picks[0].share + picks[1].share == pytest.approx(1.0, abs=0.01)
    assert len({p.index for p in picks}) == 4  # never the same text twice


def _reference_textspan(data, texts, rank, picks):
    """TextSpan on the full matrix, written the direct way (no covariance trick)."""
    data = data - data.mean(0)
    _, _, vh = np.linalg.svd(data, full_matrices=False)
    basis = vh[:rank].T
    texts = texts @ basis @ basis.T
    chosen = []
    for _ in range(picks):
        scores = (data @ texts.T).var(axis=0)
        scores[chosen] = -np.inf
        best = int(np.argmax(scores))
        chosen.append(best)
        unit = texts[best] / np.linalg.norm(texts[best])
        data = data - np.outer(data @ unit, unit)
        texts = texts - np.outer(texts @ unit, unit)
    return chosen


def test_streaming_form_matches_the_direct_algorithm():
    rng = np.random.default_rng(1)
    texts = _unit_rows(rng, 200, 32)
    data = rng.standard_normal((300, 32)) @ rng.standard_normal((32, 32))  # correlated contributions
    fast = [p.index for p in text_span(covariance(data), texts, rank=12, picks=8)]
    assert fast == _reference_textspan(data, texts, rank=12, picks=8)


def test_texts_outside_the_top_rank_span_are_not_picked():
    rng = np.random.default_rng(2)
    basis = np.eye(16)
    head = np.outer(rng.standard_normal(400) * 5, basis[0]) + np.outer(rng.standard_normal(400), basis[1])
    texts = np.stack([basis[1], basis[0] * 0.5 + basis[5] * 0.866, basis[7]])
    picks = text_span(covariance(head), texts, rank=1, picks=1)
    assert picks[0].index == 1  # only direction 0 survives the rank-1 projection


def test_rank_larger_than_images_allow_is_a_clean_error():
    with pytest.raises(DearError, match="svd_rank: rank 80 needs at least 81 images"):
        check_rank(rank=80, picks=20, n_images=50, dim=512, n_texts=1000)
    with pytest.raises(DearError, match="rank 80 exceeds the embedding dim 64"):
        check_rank(rank=80, picks=20, n_images=500, dim=64, n_texts=1000)
    with pytest.raises(DearError, match="texts_per_head: 20 picks need svd_rank >= 20"):
        check_rank(rank=10, picks=20, n_images=500, dim=64, n_texts=1000)
    with pytest.raises(DearError, match="texts_per_head: 20 picks need a bank of >= 20 texts, got 5"):
        check_rank(rank=30, picks=20, n_images=500, dim=64, n_texts=5)
    check_rank(rank=80, picks=20, n_images=81, dim=512, n_texts=1000)


def test_every_rank_problem_is_listed():
    found = rank_problems(rank=80, picks=90, n_images=50, dim=64, n_texts=10, images_from="50 images")
    assert [line.split(":")[0] for line in found] == ["profile.svd_rank"] * 2 + ["profile.texts_per_head"] * 2
    assert rank_problems(rank=80, picks=20, n_images=81, dim=None, n_texts=None, images_from="81 images") == []


def test_float_noise_does_not_choose_between_texts_that_explain_a_head_equally():
    """Two texts tied up to float noise: the lower bank row wins whichever the noise favours, and the picks
    of a covariance moved by ~1e-7 of itself (a GPU, another thread count) are the same."""
    rng = np.random.default_rng(1)
    texts = _unit_rows(rng, 40, 16)
    texts[7] = texts[23]  # one direction, two rows
    head = np.outer(rng.standard_normal(400), texts[23]) + 0.1 * rng.standard_normal((400, 16))
    cov = covariance(head)
    for noise in (1e-7, -1e-7):
        texts_moved = texts.copy()
        texts_moved[23] *= 1 + noise  # row 23 now scores a hair above or below row 7
        assert text_span(cov, texts_moved, rank=8, picks=1)[0].index == 7
    shaken = cov * (1 + 1e-7 * rng.standard_normal(cov.shape))
    shaken = (shaken + shaken.T) / 2
    assert [p.index for p in text_span(shaken, texts, 8, 6)] == [p.index for p in text_span(cov, texts, 8, 6)]
