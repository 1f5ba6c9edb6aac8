"""Concept distributions, entropy, roles, and the text bank (SPEC §3)."""

import math

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from dear.data.world_scene import COLORS, POSITION_NAMES, SHAPES, TEXTURES
from dear.errors import DearError
from dear.model import concepts as cpt
from dear.model.textbank import load_bank

NAMES = ["color", "shape", "texture", "object", "position", "scene"]


def test_entropy_of_hand_made_distributions():
    assert cpt.entropy_bits([1.0, 0.0, 0.0]) == 0.0
    assert cpt.entropy_bits([0.5, 0.5]) == pytest.approx(1.0)
    assert cpt.entropy_bits([0.25] * 4) == pytest.approx(2.0)
    assert cpt.entropy_bits([0.75, 0.25]) == round(-(0.75 * math.log2(0.75) + 0.25 * math.log2(0.25)), 4)


def test_labels_do_not_hang_on_float_noise():
    """Entropies to 4 decimals and concept shares within 1e-5 tie: noise of ~1e-7 (a GPU, a thread count) is absorbed."""
    assert cpt.entropy_bits([0.5 + 1e-8, 0.5 - 1e-8]) == cpt.entropy_bits([0.5, 0.5]) == 1.0
    limits = cpt.thresholds([0.1, 0.9, 0.9 + 1e-9, 1.5], "quantile", 0.25, 0.75)
    noisy = [cpt.role(h, limits) for h in map(lambda h: cpt.entropy_bits([h / 2, 1 - h / 2]), [0.9, 0.9 + 1e-9])]
    assert noisy[0] == noisy[1]
    assert cpt.dominant({"color": 0.5 + 1e-7, "shape": 0.5 - 1e-7}, ["shape", "color"]) == "shape"


def test_distribution_uniform_and_variance_weights():
    picks = ["color", "color", "shape", "color"]
    uniform = cpt.distribution(picks, [1, 1, 1, 1], NAMES)
    assert uniform["color"] == 0.75 and uniform["shape"] == 0.25 and uniform["scene"] == 0.0
    weighted = cpt.distribution(picks, [0.1, 0.1, 0.6, 0.2], NAMES)
    assert weighted["shape"] == pytest.approx(0.6) and weighted["color"] == pytest.approx(0.4)
    assert sum(weighted.values()) == pytest.approx(1.0)


def test_dominant_concept_ties_go_to_the_first_pick():
    p = cpt.distribution(["shape", "color", "color", "shape"], [1] * 4, NAMES)
    assert cpt.dominant(p, ["shape", "color", "color", "shape"]) == "shape"


def test_absolute_thresholds_and_roles():
    limits = cpt.thresholds([0.2, 1.0, 3.0], "absolute", 0.5, 2.0)
    assert [cpt.role(h, limits) for h in (0.2, 0.5, 1.0, 2.0, 3.0)] == [
        "attribute", "attribute", "mixed", "generalization", "generalization"]


def test_quantile_thresholds_split_the_heads():
    entropies = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]
    limits = cpt.thresholds(entropies, "quantile", 0.25, 0.75)
    roles = [cpt.role(h, limits) for h in entropies]
    assert roles == ["attribute"] * 2 + ["mixed"] * 4 + ["generalization"] * 2


def test_bad_thresholds_are_a_clean_error():
    with pytest.raises(DearError, match="low"):
        cpt.thresholds([1.0], "absolute", 2.0, 1.0)


def test_mask_role_isolates_non_core_attribute_heads():
    assert cpt.mask_role("attribute", "color") == "attribute"
    assert cpt.mask_role("attribute", "scene") == "generalization"
    assert cpt.mask_role("mixed", "scene") == "mixed"
    assert cpt.mask_role("generalization", "color") == "generalization"


# --- the text bank ------------------------------------------------------------------

ALLOWED = ["color", "shape", "texture", "object", "position", "scene", "count", "style", "material", "action",
           "lighting", "weather", "size"]


def test_default_bank_covers_concepts_and_the_world_vocabulary():
    bank = load_bank("default", ALLOWED)
    assert len(bank) >= 3000
    assert set(bank.concepts) == set(ALLOWED)
    texts = "\n".join(bank.texts)
    for word in list(COLORS) + list(TEXTURES) + list(SHAPES) + list(POSITION_NAMES[3]):
        assert f" {word} " in texts or f" {word}." in texts, word
    assert "a photo of a thing on a striped background.\ttexture" not in texts  # concept is a separate field
    assert bank.concepts[bank.texts.index("a photo of a thing on a striped background.")] == "texture"


def _tsv(tmp_path, lines):
    path = tmp_path / "bank.tsv"
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_user_bank_with_an_unknown_concept_names_the_line(tmp_path):
    path = _tsv(tmp_path, ["text\tconcept", "a red thing\tcolor", "a dog\tanimal"])
    with pytest.raises(DearError, match=r"line 3: unknown concept 'animal'"):
        load_bank(path, ALLOWED)


@pytest.mark.parametrize("line, message", [("a red thing", "line 3: expected 2 tab-separated fields"),
                                           ("a\tb\tc", "line 3: expected 2"), ("\tcolor", "line 3: empty text"),
                                           ("a red thing\tcolor", "line 3: text 'a red thing' repeats line 2")])
def test_malformed_bank_lines_name_the_line(tmp_path, line, message):
    path = _tsv(tmp_path, ["text\tconcept", "a red thing\tcolor", line])
    with pytest.raises(DearError, match=message):
        load_bank(path, ALLOWED)


def test_bank_without_header_or_missing_file(tmp_path):
    with pytest.raises(DearError, match="line 1: header"):
        load_bank(_tsv(tmp_path, ["a red thing\tcolor"]), ALLOWED)
    with pytest.raises(DearError, match="not found"):
        load_bank(str(tmp_path / "nope.tsv"), ALLOWED)


def test_parquet_bank(tmp_path):
    path = tmp_path / "bank.parquet"
    pq.write_table(pa.table({"text": ["a red thing", "a square"], "concept": ["color", "shape"]}), path)
    bank = load_bank(str(path), ALLOWED)
    assert bank.texts == ("a red thing", "a square") and bank.concepts == ("color", "shape")
    pq.write_table(pa.table({"text": ["a red thing"], "concept": ["colour"]}), path)
    with pytest.raises(DearError, match="row 1: unknown concept 'colour'"):
        load_bank(str(path), ALLOWED)


@pytest.mark.slow
@pytest.mark.xdist_group("minilm")
def test_cluster_mode_names_clusters_by_majority_label():
    words = {"color": ["red", "blue", "green", "yellow", "purple", "orange"],
             "position": ["top left", "bottom right", "top right", "bottom left", "upper left", "lower right"]}
    texts, labels = [], []
    for concept, values in words.items():
        template = "a {} background." if concept == "color" else "something at the {} corner."
        texts += [template.format(v) for v in values]
        labels += [concept] * len(values)
    labels[0] = "position"  # one mislabelled text: the majority names the cluster anyway
    named = cpt.cluster_concepts(texts, labels, min_cluster_size=3, min_samples=1)
    assert named[1:6] == ["color"] * 5 and named[6:] == ["position"] * 6
    assert named[0] in ("color", cpt.NOISE)
