"""TextSpan (Gandelsman et al., ICLR 2024): a text basis per head (SPEC §2).

For a head with mean-centred contributions C [M, E] over M images:
1. project the text embeddings onto the span of C's top-r right singular
   vectors;
2. N times, pick the text t* whose projection C·t* has the largest variance
   over images, record the variance it explains, remove that direction from
   C and orthogonalize the remaining texts against t*.

Everything here depends on C only through its covariance S = CᵀC / M:
the right singular vectors of C are S's eigenvectors, var(C·t) = tᵀSt, and
removing a unit direction u from C maps S to (I−uuᵀ)S(I−uuᵀ). So the profile
pass streams images into S (`decompose.HeadStatistics`) and never holds C.
Texts projected onto the top-r span live there for good (removing a
direction of the span keeps them in it), so the greedy loop runs in r
coordinates: K·r² per pick instead of K·E².

Picks must not hang on float noise: the same images give covariances that
differ by ~1e-7 of themselves on a GPU or at another thread count, and an
exact argmax would let that noise choose between two texts that explain the
head equally well. Texts scoring within `TIE` (relative) of the best are a
tie, and a tie goes to the lower bank row, wherever the run happens. The
linear algebra runs on one BLAS thread (eigh of an E×E matrix: milliseconds).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from threadpoolctl import threadpool_limits

from dear.errors import DearError


TIE = 1e-5  # scores within this share of the best score are a tie (float noise is ~1e-7)


@dataclass(frozen=True)
class Pick:
    """One text chosen for a head."""

    index: int  # row of the text bank
    variance: float  # variance of the head's contributions along the text's direction (removed by this pick)
    share: float  # `variance` as a fraction of the head's total variance (trace of S before any pick)


def covariance(contributions: np.ndarray) -> np.ndarray:
    """Covariance over images (divided by M) of contributions [M, E] -> [E, E] float64."""
    centred = contributions - contributions.mean(0, keepdims=True)
    return centred.T.astype(np.float64) @ centred.astype(np.float64) / len(contributions)


def check_rank(rank: int, picks: int, n_images: int, dim: int, n_texts: int) -> None:
    """Fail cleanly when the SVD rank or the number of picks cannot be met."""
    found = rank_problems(rank, picks, n_images, dim, n_texts, f"{n_images} images")
    if found:
        raise DearError(found[0])


def rank_problems(rank: int, picks: int, n_images: int, dim: int | None, n_texts: int | None,
                  images_from: str) -> list[str]:
    """Every reason the SVD rank or the number of picks cannot be met (`dear check` and the profile stage).

    Mean-centring M images leaves at most M − 1 directions, so r ≤ min(M − 1, E);
    N picks need r ≥ N and a bank of ≥ N texts. `dim` or `n_texts` None: not known yet.
    """
    found = []
    if rank > n_images - 1:
        found.append(f"profile.svd_rank: rank {rank} needs at least {rank + 1} images (mean-centring removes one "
                     f"direction); got {images_from}; profile more images (profile.max_images) or lower "
                     "profile.svd_rank")
    if dim is not None and rank > dim:
        found.append(f"profile.svd_rank: rank {rank} exceeds the embedding dim {dim}; lower profile.svd_rank")
    possible = min(rank, n_images - 1, dim if dim is not None else rank)  # the rank any fix of the above allows
    if picks > rank:
        found.append(f"profile.texts_per_head: {picks} picks need svd_rank >= {picks}, got svd_rank {rank}; "
                     "lower profile.texts_per_head")
    elif picks > possible:  # said now, not after svd_rank is lowered to fit
        found.append(f"profile.texts_per_head: {picks} picks need svd_rank >= {picks}, but {images_from} and the "
                     f"embedding allow at most {possible}; lower profile.texts_per_head to {possible}, or profile "
                     "more images (profile.max_images)")
    if n_texts is not None and picks > n_texts:
        found.append(f"profile.texts_per_head: {picks} picks need a bank of >= {picks} texts, got {n_texts}; "
                     "lower profile.texts_per_head or add texts")
    return found


def text_span(cov: np.ndarray, texts: np.ndarray, rank: int, picks: int) -> list[Pick]:
    """The `picks` texts that best explain a head, greedily, with their variance.

    cov: [E, E] covariance of the head's contributions; texts: [K, E] text
    embeddings (normalized). Ties (scores within `TIE` of the best) go to the
    lower bank row, so float noise does not choose.
    """
    with threadpool_limits(limits=1):
        return _greedy(np.asarray(cov, dtype=np.float64), texts, rank, picks)


def _greedy(cov: np.ndarray, texts: np.ndarray, rank: int, picks: int) -> list[Pick]:
    total = float(np.trace(cov))
    eigenvalues, eigenvectors = np.linalg.eigh(cov)  # ascending
    top = np.argsort(-eigenvalues, kind="stable")[:rank]
    basis = eigenvectors[:, top]  # [E, r] top-r right singular vectors of C
    cov_r = basis.T @ cov @ basis  # [r, r]
    coords = np.asarray(texts, dtype=np.float64) @ basis  # [K, r] projected texts, in the basis
    chosen: list[Pick] = []
    available = np.ones(len(coords), dtype=bool)
    for _ in range(picks):
        scores = np.einsum("kr,rs,ks->k", coords, cov_r, coords)  # var(C t) per text
        scores[~available] = -np.inf
        index = int(np.flatnonzero(scores >= scores.max() - TIE * abs(scores.max()))[0])  # the lowest row of a tie
        norm = float(np.linalg.norm(coords[index]))
        if norm <= 1e-12:
            break  # no text has any component left in the span
        unit = coords[index] / norm  # [r]
        variance = float(unit @ cov_r @ unit)
        chosen.append(Pick(index=index, variance=variance, share=variance / total if total > 0 else 0.0))
        available[index] = False
        keep = np.eye(len(unit)) - np.outer(unit, unit)  # removes the direction
        cov_r = keep @ cov_r @ keep
        coords = coords - np.outer(coords @ unit, unit)
    return chosen
