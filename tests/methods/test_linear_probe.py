"""Linear-probe CLIP: lpclip's C search, its features, and its runs through train / fuse / evaluate.

`lpclip_search` below restates KaiyangZhou/CoOp@61a9cd3 lpclip/linear_probe.py's search for one seed and
shot count (search_list, then `binary_search` for num_step rounds, the last round's classifier kept), written
for this test from their code: ours must try the same C values, in the same order, and keep the same one.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pyarrow.parquet as pq
import pytest
import torch
import yaml

from dear.data.manifest import classnames, read_manifest
from dear.errors import DearError
from dear.methods import REGISTRY, linear_probe
from dear.methods.recipe import load
from dear.methods.trained import load_trained, save_trained
from tests.fake_coop import make_fake_dataset
from tests.fake_run import invoke, prepared_project
from tests.floats import assert_same_up_to_rounding
from tests.methods_tools import MIXED_ROLES, Backbone, build
from tests.tiny_clip import tiny_clip

LPCLIP_GRID = [1e6, 1e4, 1e2, 1, 1e-2, 1e-4, 1e-6]  # linear_probe.py: search_list
LPCLIP_STEPS = 8  # linear_probe.sh: --num_step 8


def lpclip_search(fit_score, search_list=LPCLIP_GRID, num_step=LPCLIP_STEPS):
    """Their loop: fit_score(c) -> (classifier, val accuracy). Returns (every C fitted, c_final, clf_final)."""
    tried = []

    def score(c):
        tried.append(c)
        return fit_score(c)

    acc_list = [score(c_weight)[1] for c_weight in search_list]
    peak_idx = np.argmax(acc_list)
    c_peak = search_list[peak_idx]
    c_left, c_right = 1e-1 * c_peak, 1e1 * c_peak
    final = {}

    def binary_search(c_left, c_right):
        clf_left, acc_left = score(c_left)
        clf_right, acc_right = score(c_right)
        if acc_left < acc_right:
            final.update(c=c_right, clf=clf_right)
            c_left = 0.5 * (np.log10(c_right) + np.log10(c_left))
            c_right = np.log10(c_right)
        else:
            final.update(c=c_left, clf=clf_left)
            c_right = 0.5 * (np.log10(c_right) + np.log10(c_left))
            c_left = np.log10(c_left)
        return np.power(10, c_left), np.power(10, c_right)

    for _ in range(num_step):
        c_left, c_right = binary_search(c_left, c_right)
    return tried, final["c"], final["clf"]


def test_the_recipe_is_lpclips():
    recipe = load("linear_probe")
    values = {key: value for layer in recipe.recipe for key, value in layer.values.items()}
    assert values == {"c_grid": LPCLIP_GRID, "max_iter": 1000, "search_steps": LPCLIP_STEPS,
                      "interpolation": "bicubic", "precision": "fp16"}
    assert all("lpclip/" in layer.source or "rn50_val.yaml" in layer.source for layer in recipe.recipe)
    assert not recipe.trains  # no Dassl trainer keys: nothing trains by gradient


@pytest.mark.parametrize("peak", [-7.0, -1.3, 0.3, 2.0, 5.5])
def test_refine_tries_lpclips_c_values_in_order(peak):
    """An accuracy that peaks at 10**peak: the exact C values their loop fits, and the C it keeps."""
    def fit_score(c):
        return f"clf@{c!r}", round(-abs(np.log10(c) - peak), 6)

    theirs, c_final, clf_final = lpclip_search(fit_score)
    ours = []
    c, clf = linear_probe.refine(lambda c: (ours.append(c), fit_score(c))[1], LPCLIP_GRID, LPCLIP_STEPS)
    assert ours == theirs and len(ours) == 7 + 2 * 8  # the same floats, not merely close ones
    assert c == c_final and clf == clf_final


def test_the_first_rounds_c_values_written_out():
    """Peak at C = 1 with the right end always better: 0.1|10, then 1|10, 10**0.5|10, 10**0.75|10, ..."""
    tried = []
    linear_probe.refine(lambda c: (tried.append(c), (None, c if c >= 0.99 else -1.0))[1], [1.0, 1e-6], 3)
    assert tried[:2] == [1, 1e-6]
    assert tried[2:] == [0.1, 10.0, 1.0, 10.0, 10 ** 0.5, 10.0]


def test_ties_keep_the_left_end_and_the_first_best_of_the_grid():
    tried = []
    c, _ = linear_probe.refine(lambda c: (tried.append(c), (None, 0.5))[1], LPCLIP_GRID, 2)
    assert tried[7:9] == [1e5, 1e7]  # every C equally good: np.argmax's first, 1e6, starts the refinement
    assert c == tried[-2]  # a tie keeps the left end


def test_search_is_their_sklearn_search_on_a_tiny_feature_set():
    from sklearn.linear_model import LogisticRegression

    rng = np.random.default_rng(0)
    centers = rng.normal(size=(3, 6))
    def draw(n):
        y = np.repeat(np.arange(3), n)
        return centers[y] + 1.5 * rng.normal(size=(len(y), 6)), y
    (train_x, train_y), (val_x, val_y), (test_x, _) = draw(4), draw(4), draw(20)

    def theirs(c):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            clf = LogisticRegression(solver="lbfgs", max_iter=1000, penalty="l2", C=c).fit(train_x, train_y)
        return clf, sum(clf.predict(val_x) == val_y) / len(val_y)

    tried, c_final, clf_final = lpclip_search(theirs)
    found = linear_probe.search(train_x, train_y, val_x, val_y, LPCLIP_GRID, LPCLIP_STEPS, 1000)
    assert [c for c, _ in found.tried] == tried and found.c == c_final
    np.testing.assert_array_equal(found.classifier.predict(test_x), clf_final.predict(test_x))
    np.testing.assert_allclose(found.classifier.coef_, clf_final.coef_)
    weight, bias = linear_probe.weights(found.classifier, 3)
    np.testing.assert_array_equal((test_x @ weight.T + bias).argmax(1), clf_final.predict(test_x))


def test_two_classes_get_two_rows_that_predict_as_sklearn():
    from sklearn.linear_model import LogisticRegression

    x = np.array([[0.0, 1.0], [1.0, 0.0], [0.2, 0.9], [0.9, 0.1]])
    clf = LogisticRegression(C=1.0).fit(x, [0, 1, 0, 1])
    weight, bias = linear_probe.weights(clf, 2)
    assert weight.shape == (2, 2)
    np.testing.assert_array_equal((x @ weight.T + bias).argmax(1), clf.predict(x))


@pytest.fixture(scope="module")
def clip():
    return tiny_clip()


def test_features_are_the_unnormalized_image_embedding(clip):
    """lpclip's `clip_model.visual(image)`: the projected embedding, not divided by its norm."""
    model = build(clip, "linear_probe")
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        ours = model.encode(model.image_prefix(images))
    assert ours.shape == (3, 1, 32)
    assert_same_up_to_rounding(ours[:, 0], clip.encode_image(images))  # the last block on CLS rows alone: tests/floats.py
    assert not torch.allclose(ours[:, 0].norm(dim=-1), torch.ones(3))


def test_fit_scores_only_its_classes_and_round_trips_through_model_pt(clip, tmp_path):
    model = build(clip, "linear_probe", c_grid=[1.0, 0.01], search_steps=1)
    torch.manual_seed(0)
    names = ["cat", "dog", "fox"]
    train, val = torch.randn(9, 1, 32), torch.randn(6, 1, 32)
    found = model.fit(train, [0, 1, 2] * 3, val, [0, 1, 2] * 2, names)
    assert [c for c, _ in found.tried] == [1.0, 0.01, 0.1, 10.0] and found.c in (0.1, 10.0)
    logits = model.logits(train, names)[:, 0]
    np.testing.assert_array_equal(logits.argmax(1).numpy(), found.classifier.predict(train[:, 0].double().numpy()))
    assert model.can_score(["fox", "cat"]) and not model.can_score(["cat", "wolf"])
    torch.testing.assert_close(model.logits(train, ["fox", "cat"]), logits[:, None, [2, 0]])
    with pytest.raises(DearError, match="not fitted on"):
        model.logits(train, ["wolf"])
    save_trained(tmp_path / "model.pt", model, {"backbone_sha256": "abc", "roles_sha256": None})
    again = load_trained(tmp_path / "model.pt", Backbone(clip))
    torch.testing.assert_close(again.logits(train, names), logits[:, None].reshape(9, 1, 3))
    assert float(again.c) == found.c and again.tried.shape == (4, 2)


def test_only_the_linear_probe_scores_some_class_lists_and_the_registry_says_why(clip):
    from dear.methods.base import MethodModel

    for name, entry in REGISTRY.items():
        model = build(clip, name, MIXED_ROLES)
        assert bool(entry.scores) == (type(model).can_score is not MethodModel.can_score) == (name == "linear_probe")
        assert type(model).fits_features == (name == "linear_probe")


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A prepared fake dataset, a random tiny backbone, and a linear probe trained, fused and evaluated on it."""
    root = tmp_path_factory.mktemp("lp")
    params = prepared_project(root, {"linear_probe": {"search_steps": 2}})
    run = root / "runs/linear_probe/world_objects"
    fewshot = root / "data/world_objects/fewshot-seed1.parquet"
    invoke("train", "--params", params, "--method", "linear_probe", "--dataset", "world_objects", "--seed", 1,
           "--backbone", root / "backbone", "--fewshot", fewshot, "--out", run / "train", "--checkpoint",
           root / "ckpt.pt")
    invoke("fuse", "--params", params, "--model", run / "train/model.pt", "--fewshot", fewshot,
           "--backbone", root / "backbone", "--out", run / "fusion.json")
    invoke("evaluate", "--params", params, "--model", run / "train/model.pt", "--fusion", run / "fusion.json",
           "--source", root / "data/world_objects", "--classes", "base", "--data", root / "data",
           "--backbone", root / "backbone", "--out", run / "eval")
    return root, run


def test_train_fits_with_an_empty_log_and_the_search_in_model_pt(project):
    root, run = project
    assert pq.read_table(run / "train/train_log.parquet").num_rows == 0
    payload = torch.load(run / "train/model.pt", weights_only=False)
    state = payload["state"]
    assert state["probe.weight"].shape[0] == 2 and state["probe.tried"].shape == (7 + 2 * 2, 2)
    base = classnames(read_manifest(root / "data/world_objects"), subset="base")
    assert json.loads(bytes(state["probe.classnames"].tolist()).decode()) == base
    assert not (root / "ckpt.pt").exists()


def test_fuse_passes_through_and_evaluate_scores_base_classes_only(project):
    root, run = project
    fusion = json.loads((run / "fusion.json").read_text())
    assert fusion["alpha"] == [1.0] and not fusion["refit"]
    table = pq.read_table(run / "eval/eval.parquet").to_pandas()
    assert set(table["split"]) == {"base"} and set(table["stream"]) == {"output", "fused", "cls"}
    metrics = json.loads((run / "eval/metrics.json").read_text())["base_to_novel"]["world_objects"]
    assert metrics["base"] is not None and metrics["novel"] is None and metrics["hm"] is None


def test_transfer_scores_the_source_and_leaves_other_datasets_classes_unscored(project, tmp_path):
    """Trained on all classes of the source: scored there; a target with other class names gets no rows
    (the report's "—", with the registry's reason); a target with its classes would be scored on their rows."""
    root, run = project
    make_fake_dataset(root / "raw", "world_objects_b", n_classes=3, per_class=2)
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["data"]["datasets"] = ["world_objects", "world_objects_b"]
    raw["study"]["transfer"] = {"source": "world_objects", "cross_dataset": ["world_objects_b"],
                                "domain_generalization": []}
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    invoke("prepare", "--params", params, "--dataset", "world_objects_b", "--out", root / "data/world_objects_b")
    fewshot = root / "data/world_objects/fewshot-seed1.parquet"
    invoke("train", "--params", params, "--method", "linear_probe", "--dataset", "world_objects", "--seed", 1,
           "--backbone", root / "backbone", "--fewshot", fewshot, "--classes", "all", "--out", tmp_path / "train",
           "--checkpoint", tmp_path / "ckpt.pt")
    invoke("fuse", "--params", params, "--model", tmp_path / "train/model.pt", "--fewshot", fewshot, "--classes", "all",
           "--backbone", root / "backbone", "--out", tmp_path / "fusion.json")
    result = invoke("evaluate", "--params", params, "--model", tmp_path / "train/model.pt", "--fusion",
                    tmp_path / "fusion.json", "--source", root / "data/world_objects", "--classes", "all", "--data",
                    root / "data", "--backbone", root / "backbone", "--out", tmp_path / "eval")
    table = pq.read_table(tmp_path / "eval/eval.parquet").to_pandas()
    assert set(table["target"]) == {"world_objects"} and set(table["protocol"]) == {"cross_dataset"}
    assert table[table["stream"] == "output"]["label"].tolist() == [0, 1, 2, 3]
    assert "cross_dataset world_objects_b all not scored: a linear probe has a classifier only" in result.output


def test_the_few_shot_protocol_end_to_end_with_the_linear_probe_in_the_report(project, tmp_path):
    """prepare's K-shot table, train/fuse/evaluate --shots K --classes all, then the report's few-shot table."""
    root, _ = project
    raw = yaml.safe_load((root / "params.yaml").read_text())
    raw["study"]["few_shot"] = {"datasets": ["world_objects"], "shots": [1, 2]}
    raw["study"]["methods"] = ["zeroshot", "linear_probe"]  # the report shows the study's methods (dear check)
    raw["report"].update(methods=["zeroshot", "linear_probe"], compare="linear_probe")
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    invoke("prepare", "--params", params, "--dataset", "world_objects", "--out", tmp_path / "data/world_objects")
    evals = []
    for k in (1, 2):
        fewshot = tmp_path / f"data/world_objects/fewshot-shots{k}-seed1.parquet"
        run = tmp_path / f"fewshot/linear_probe/world_objects/shots{k}"
        invoke("train", "--params", params, "--method", "linear_probe", "--dataset", "world_objects", "--seed", 1,
               "--backbone", root / "backbone", "--fewshot", fewshot, "--classes", "all", "--shots", k,
               "--out", run / "train", "--checkpoint", tmp_path / "ckpt.pt")
        assert torch.load(run / "train/model.pt", weights_only=False)["state"]["probe.weight"].shape[0] == 4  # all
        invoke("fuse", "--params", params, "--model", run / "train/model.pt", "--fewshot", fewshot, "--classes", "all",
               "--backbone", root / "backbone", "--out", run / "fusion.json")
        invoke("evaluate", "--params", params, "--model", run / "train/model.pt", "--fusion", run / "fusion.json",
               "--source", tmp_path / "data/world_objects", "--classes", "all", "--shots", k, "--data",
               tmp_path / "data", "--backbone", root / "backbone", "--out", run / "eval")
        evals.append(run / "eval/eval.parquet")
        assert set(pq.read_table(evals[-1]).to_pandas()["protocol"]) == {f"few_shot_{k}"}
    invoke("report", "--params", params, "--out", tmp_path / "report", "--evals", *evals)
    markdown = (tmp_path / "report/results.md").read_text()
    table = markdown.split("## Few-shot learning", 1)[1].split("### world_objects", 1)[0]
    assert "| Method | 1 shot | 2 shots | n |" in table and "| linear_probe | " in table
    assert "| zeroshot | — | — | 0 |" in table  # listed, not run: missing, never 0
    assert (tmp_path / "report/few_shot.png").read_bytes().startswith(b"\x89PNG")
