"""fuse and evaluate: α fitted where the answer is known, validation rows only, counts per class."""

import json

import pyarrow.parquet as pq
import pytest
import torch
import yaml

from dear.scoring import evaluation
from dear.data.manifest import classnames, read_fewshot, read_manifest, select
from dear.runtime.io import read_provenance, sha256_file
from dear.stages.fuse import fit_alpha
from tests.fake_coop import make_fake_dataset
from tests.fake_run import invoke, prepared_project


def test_alpha_moves_to_the_only_informative_stream():
    torch.manual_seed(0)
    labels = torch.randint(0, 5, (400,))
    informative = torch.randn(400, 5) + 4.0 * torch.nn.functional.one_hot(labels, 5)  # [N, C]
    noise = 3.0 * torch.randn(400, 5)
    logits = torch.stack([noise, informative], 1)  # [N, 2, C]: stream 1 is the useful one
    alpha = fit_alpha(logits, labels.tolist(), torch.tensor([0.7, 0.3]), iterations=100)
    assert alpha[1] > 0.9 and torch.isclose(alpha.sum(), torch.tensor(1.0))


def test_symmetric_streams_get_equal_weights():
    torch.manual_seed(1)
    labels = torch.randint(0, 4, (600,))
    hot = torch.nn.functional.one_hot(labels, 4).float()
    a, b = torch.randn(600, 4), torch.randn(600, 4)
    logits = torch.stack([a + 2 * hot, b + 2 * hot], 1)
    swapped = torch.stack([b + 2 * hot, a + 2 * hot], 1)
    both = torch.cat([logits, swapped])  # each stream is the other's mirror image: the optimum is α = (½, ½)
    alpha = fit_alpha(both, labels.tolist() * 2, torch.tensor([0.9, 0.1]), iterations=100)
    torch.testing.assert_close(alpha, torch.tensor([0.5, 0.5]), atol=1e-3, rtol=0)


def test_per_class_hits_keep_each_image_in_list_order():
    logits = torch.tensor([[2.0, 0.0, 0.0], [0.0, 3.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 1.0]])
    # image 2 (class 1) is predicted as class 0; class 1's images are images 1 and 2, in that order
    assert evaluation.per_class_hits(logits, [0, 1, 1, 2], 3) == [[True], [True, False], [True]]


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A prepared fake dataset, a random tiny backbone, and a trained dear_nomask run on it."""
    root = tmp_path_factory.mktemp("project")
    params = prepared_project(root)
    run = root / "runs/dear_nomask/world_objects/seed1"
    invoke("train", "--params", params, "--method", "dear_nomask", "--dataset", "world_objects", "--seed", 1,
           "--backbone", root / "backbone", "--fewshot", root / "data/world_objects/fewshot-seed1.parquet",
           "--out", run, "--checkpoint", root / "ckpt.pt")
    return root, params, run


def test_fuse_reads_only_validation_shots(project, monkeypatch):
    root, params, run = project
    read = []
    original = evaluation._Images.__getitem__

    def spy(self, index):
        read.append(self.paths[index])
        return original(self, index)

    monkeypatch.setattr(evaluation._Images, "__getitem__", spy)
    fewshot = root / "data/world_objects/fewshot-seed1.parquet"
    invoke("fuse", "--params", params, "--model", run / "model.pt", "--fewshot", fewshot,
           "--backbone", root / "backbone", "--out", run / "fusion.json")
    val = select(read_fewshot(fewshot), subset="base", fewshot_split="val")["path"].to_pylist()
    assert sorted(read) == sorted(val) and val
    test = set(select(read_manifest(root / "data/world_objects"), split="test")["path"].to_pylist())
    assert not test & set(read)
    fusion = json.loads((run / "fusion.json").read_text())
    assert len(fusion["alpha"]) == 6 and abs(sum(fusion["alpha"]) - 1) < 1e-6
    assert fusion["n_val"] == len(val) and fusion["mode"] == "refit"


def test_evaluate_counts_every_test_image_once(project):
    root, params, run = project
    if not (run / "fusion.json").exists():
        test_fuse_reads_only_validation_shots(project, pytest.MonkeyPatch())
    invoke("evaluate", "--params", params, "--model", run / "model.pt", "--fusion", run / "fusion.json",
           "--source", root / "data/world_objects", "--classes", "base", "--data", root / "data",
           "--backbone", root / "backbone", "--out", run.parent / "eval")  # a folder of its own: it is replaced whole
    table = pq.read_table(run.parent / "eval" / "eval.parquet").to_pandas()
    manifest = read_manifest(root / "data/world_objects").to_pandas()
    test = manifest[manifest["split"] == "test"]
    # the method's output, the fused logits everywhere, each stream's own predictions: CLS and DeAR's five attribute streams
    assert set(table["stream"]) == {"output", "fused", "cls", "color", "shape", "texture", "object", "position"}
    assert (table["hits"].map(len) == table["total"]).all() and (table["hits"].map(sum) == table["correct"]).all()
    for stream, rows in table.groupby("stream"):
        for subset in ("base", "novel"):
            counted = rows[rows["split"] == subset]
            assert counted["total"].sum() == (test["subset"] == subset).sum()
            assert list(counted["classname"]) == classnames(read_manifest(root / "data/world_objects"), subset=subset)
    output, cls, fused = (table[table["stream"] == name].reset_index(drop=True) for name in ("output", "cls", "fused"))
    novel = output["split"] == "novel"  # fusion.novel: cls (MMRL's decoupled inference); fused: the other way
    assert output.loc[novel, "hits"].map(list).tolist() == cls.loc[novel, "hits"].map(list).tolist()
    assert output.loc[~novel, "hits"].map(list).tolist() == fused.loc[~novel, "hits"].map(list).tolist()
    made_by = read_provenance(run.parent / "eval" / "eval.parquet")
    assert made_by["inputs_sha256"]["manifest:world_objects"] == sha256_file(root / "data/world_objects/manifest.parquet")
    assert set(made_by["test_images_sha256"]) == {"base_to_novel/world_objects/base", "base_to_novel/world_objects/novel"}
    metrics = json.loads((run.parent / "eval" / "metrics.json").read_text())
    assert set(metrics["base_to_novel"]["world_objects"]) == {"base", "novel", "hm"}


def test_transfer_targets_are_scored_on_their_own_class_list(project, tmp_path):
    """A target holding a subset of classes (like ImageNet-A/-R) is scored over that subset only."""
    root, params, run = project
    raw = yaml.safe_load(params.read_text())
    make_fake_dataset(root / "raw", "world_objects_b", n_classes=3, per_class=2)
    raw["data"]["datasets"] = ["world_objects", "world_objects_b"]
    raw["study"]["transfer"] = {"source": "world_objects", "cross_dataset": ["world_objects_b"], "domain_generalization": []}
    transfer_params = tmp_path / "params.yaml"
    transfer_params.write_text(yaml.safe_dump(raw, sort_keys=False))
    invoke("prepare", "--params", transfer_params, "--dataset", "world_objects_b", "--out", root / "data/world_objects_b")
    fusion = tmp_path / "fusion.json"
    fusion.write_text(json.dumps({"alpha": [1.0, 0, 0, 0, 0, 0]}))
    invoke("evaluate", "--params", transfer_params, "--model", run / "model.pt", "--fusion", fusion,
           "--source", root / "data/world_objects", "--classes", "all", "--data", root / "data",
           "--backbone", root / "backbone", "--out", tmp_path / "out")
    table = pq.read_table(tmp_path / "out/eval.parquet").to_pandas()
    table = table[table["stream"] == "output"]
    target = table[table["target"] == "world_objects_b"]
    assert sorted(target["label"]) == [0, 1, 2] and target["total"].sum() == 6
    assert set(table["protocol"]) == {"cross_dataset"}
    assert set(table[table["target"] == "world_objects"]["label"]) == {0, 1, 2, 3}


def test_evaluate_rejects_a_fusion_file_without_alpha(project, tmp_path):
    root, params, run = project
    bad = tmp_path / "fusion.json"
    bad.write_text("{}")
    result = invoke("evaluate", "--params", params, "--model", run / "model.pt", "--fusion", bad,
                    "--source", root / "data/world_objects", "--backbone", root / "backbone", "--out", tmp_path / "out",
                    code=1)
    assert "no 'alpha'" in result.output
    assert not (tmp_path / "out").exists()


def test_a_second_model_on_the_same_backbone_reuses_the_frozen_blocks(project, monkeypatch):
    """The next seed of an evaluate job runs only the blocks from its first token layer on, with equal features."""
    from dear.compute.device import Precision
    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained

    root, params, run = project
    monkeypatch.setattr(evaluation, "_kept", {})
    precision = Precision("fp32", torch.device("cpu"))
    images = evaluation.image_set(*(read_manifest(root / "data/world_objects"),) * 2, "test", "all",
                                  root / "data/world_objects")
    models = [load_trained(run / "model.pt", load_backbone(root / "backbone")) for _ in range(2)]
    transform = evaluation.eval_transform(models[0])
    prefix_calls = []
    for model in models:
        original = model.image_prefix
        monkeypatch.setattr(model, "image_prefix", lambda x, f=original: prefix_calls.append(len(x)) or f(x))

    def encode(model, reuse):
        return evaluation.encode_images(model, images, transform, 2, 0, precision, "test", reuse)

    plain = encode(models[1], None)
    assert sum(prefix_calls) == len(images)
    same = evaluation.Reuse("sha-a", megabytes=64)
    first, second = encode(models[0], same), encode(models[1], same)
    assert sum(prefix_calls) == 2 * len(images)  # the second model took the first one's frozen output
    assert torch.equal(first, encode(models[0], None)) and torch.equal(second, plain)
    encode(models[1], evaluation.Reuse("sha-b", megabytes=64))  # another backbone computes its own
    assert sum(prefix_calls) == 4 * len(images)
    monkeypatch.setattr(evaluation, "_kept", {})
    nothing = evaluation.Reuse("sha-a", megabytes=0)
    encode(models[0], nothing), encode(models[1], nothing)  # no room: every model recomputes
    assert sum(prefix_calls) == 6 * len(images) and evaluation._kept == {}



def test_a_few_shot_run_trains_k_shots_of_every_class_and_is_scored_on_all_of_them(project, tmp_path):
    """study.few_shot: prepare's K-shot table, `dear train --classes all --shots K`, fuse on its own validation
    shots, `dear evaluate --shots K`: every class of the dataset's test split, protocol few_shot_<K>."""
    from dear.methods.trained import read_trained

    root, params, _ = project
    raw = yaml.safe_load(params.read_text())
    raw["study"]["few_shot"] = {"datasets": ["world_objects"], "shots": [1]}
    few = tmp_path / "params.yaml"
    few.write_text(yaml.safe_dump(raw, sort_keys=False))
    data = tmp_path / "data/world_objects"
    invoke("prepare", "--params", few, "--dataset", "world_objects", "--out", data)
    table = data / "fewshot-shots1-seed1.parquet"
    run = tmp_path / "fewshot/coop/world_objects/shots1"
    invoke("train", "--params", few, "--method", "coop", "--dataset", "world_objects", "--classes", "all", "--shots", 1,
           "--seed", 1, "--backbone", root / "backbone", "--fewshot", table, "--out", run / "train/seed1",
           "--checkpoint", tmp_path / "ckpt.pt")
    trained = read_trained(run / "train/seed1/model.pt")
    assert trained["shots"] == 1 and trained["classes"] == "all" and len(trained["classnames"]) == 4
    assert trained["recipe"]["protocol"] == "few_shot" and trained["recipe"]["shots"] == 1
    assert trained["recipe"]["settings"]["n_ctx"]["value"] == 16  # CoOp's few-shot context: 16 random vectors
    invoke("fuse", "--params", few, "--model", run / "train/seed1/model.pt", "--fewshot", table, "--classes", "all",
           "--backbone", root / "backbone", "--out", run / "fuse/seed1/fusion.json")
    invoke("evaluate", "--params", few, "--model", run / "train/seed1/model.pt", "--fusion",
           run / "fuse/seed1/fusion.json", "--source", data, "--classes", "all", "--shots", 1, "--data", data.parent,
           "--backbone", root / "backbone", "--out", run / "eval/seed1")
    scored = pq.read_table(run / "eval/seed1/eval.parquet").to_pandas()
    output = scored[scored["stream"] == "output"]
    test = select(read_manifest(data), split="test")
    assert set(scored["protocol"]) == {"few_shot_1"} and set(output["split"]) == {"all"}
    assert sorted(output["label"]) == [0, 1, 2, 3] and output["total"].sum() == test.num_rows
    assert (output["source"] == output["target"]).all()
    metrics = json.loads((run / "eval/seed1/metrics.json").read_text())
    assert set(metrics) == {"few_shot_1"} and set(metrics["few_shot_1"]["world_objects"]) == {"accuracy"}
