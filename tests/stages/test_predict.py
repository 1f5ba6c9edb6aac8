"""`dear predict`: a trained model labels new images; bad images are listed, not fatal unless all are bad."""

import csv
import shutil

import pyarrow.parquet as pq
import pytest

from dear.data.manifest import read_manifest
from dear.runtime.io import read_provenance, sha256_file
from tests import fake_run
from tests.fake_run import invoke, prepared_project
from tests.test_api import python_blocks


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    """A prepared fake dataset, a random tiny backbone, roles, and dear trained (base classes) and fused on it,
    laid out as a study's output root."""
    root = tmp_path_factory.mktemp("project")
    params = prepared_project(root)
    data = root / "data/world_objects"
    roles = fake_run.roles(root / "roles/world_objects/roles.parquet", sha256_file(root / "backbone/model.pt"))
    run = root / "runs/dear/world_objects"
    invoke("train", "--params", params, "--method", "dear", "--dataset", "world_objects", "--seed", 1,
           "--backbone", root / "backbone", "--fewshot", data / "fewshot-seed1.parquet", "--roles", roles,
           "--out", run / "train/seed1", "--checkpoint", root / "ckpt.pt")
    invoke("fuse", "--params", params, "--model", run / "train/seed1/model.pt", "--fewshot", data / "fewshot-seed1.parquet",
           "--backbone", root / "backbone", "--roles", roles, "--out", run / "fuse/seed1/fusion.json")
    return root, params


def predict(project, images, out, *extra, code: int = 0):
    root, params = project
    run = root / "runs/dear/world_objects"
    return invoke("predict", "--params", params, "--model", run / "train/seed1/model.pt", "--backbone", root / "backbone",
                  "--roles", root / "roles/world_objects/roles.parquet", "--fusion", run / "fuse/seed1/fusion.json",
                  "--images", images, "--out", out, *extra, code=code)


def test_predict_labels_a_folder_with_the_trained_classes(project, tmp_path):
    root, _ = project
    manifest = read_manifest(root / "data/world_objects")
    test = [row for row in manifest.to_pylist() if row["split"] == "test"]
    folder = tmp_path / "new"
    for i, row in enumerate(test):
        (folder / f"sub{i % 2}").mkdir(parents=True, exist_ok=True)
        shutil.copy(row["path"], folder / f"sub{i % 2}" / f"{i}.png")
    (folder / ".hidden.png").write_bytes(b"not scored")
    predict(project, folder, tmp_path / "out", "--top-k", 2)
    table = pq.read_table(tmp_path / "out/predictions.parquet").to_pylist()
    base = sorted({row["classname"] for row in manifest.to_pylist() if row["subset"] == "base"})
    assert len(table) == len(test) and all(row["error"] is None for row in table)
    assert all(len(row["classes"]) == 2 and set(row["classes"]) <= set(base) for row in table)
    assert all(1.0 >= row["probabilities"][0] >= row["probabilities"][1] > 0 for row in table)
    with open(tmp_path / "out/predictions.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [row["path"] for row in rows] == [row["path"] for row in table]
    assert list(rows[0]) == ["path", "class_1", "probability_1", "rule_1", "class_2", "probability_2", "rule_2",
                             "error"]
    assert {row["rule_1"] for row in rows} == {"seen"}
    made_by = read_provenance(tmp_path / "out/predictions.parquet")
    assert made_by["seen"] is True and made_by["classnames"] == base and made_by["method"] == "dear"
    assert made_by["inputs_sha256"]["model"] == sha256_file(root / "runs/dear/world_objects/train/seed1/model.pt")


def test_a_bad_image_is_listed_and_the_rest_are_labelled(project, tmp_path):
    root, _ = project
    good = read_manifest(root / "data/world_objects").to_pylist()[0]["path"]
    (tmp_path / "images").mkdir()
    shutil.copy(good, tmp_path / "images/good.png")
    (tmp_path / "images/broken.png").write_bytes(b"\x89PNG\r\n\x1a\n truncated")
    (tmp_path / "list.txt").write_text("# new photos\nimages/good.png\nimages/broken.png\nimages/gone.png\n")
    predict(project, tmp_path / "list.txt", tmp_path / "out")
    rows = pq.read_table(tmp_path / "out/predictions.parquet").to_pylist()
    assert [row["path"].rsplit("/", 1)[1] for row in rows] == ["good.png", "broken.png", "gone.png"]
    assert rows[0]["error"] is None and len(rows[0]["classes"]) == 2  # 2 base classes: top-5 cut to 2
    assert "broken.png: not a readable image" in rows[1]["error"] and rows[1]["classes"] == []
    assert "gone.png" in rows[2]["error"]


def test_each_class_is_scored_by_the_rule_evaluate_uses_for_it(project, tmp_path):
    """Issue 39: a list of every class switched the trained ones to the unseen-class rule too (4 of 6 images became
    one novel class). By class, a trained class keeps its score: among the trained classes the probabilities are
    those of the trained list alone, so an image's top class changes only to a class never trained on."""
    root, params = project
    manifest = read_manifest(root / "data/world_objects").to_pylist()
    every = sorted({row["classname"] for row in manifest})
    base = sorted({row["classname"] for row in manifest if row["subset"] == "base"})
    (tmp_path / "classes.txt").write_text("\n".join(every) + "\n")
    (tmp_path / "base.txt").write_text("\n".join(base) + "\n")
    images = [row["path"] for row in manifest if row["split"] == "test" and row["subset"] == "base"]
    (tmp_path / "images.txt").write_text("\n".join(images) + "\n")
    predict(project, tmp_path / "images.txt", tmp_path / "alone", "--class-list", tmp_path / "base.txt",
            "--top-k", len(base))
    predict(project, tmp_path / "images.txt", tmp_path / "mixed", "--class-list", tmp_path / "classes.txt",
            "--top-k", len(every))
    alone = pq.read_table(tmp_path / "alone/predictions.parquet").to_pylist()
    mixed = pq.read_table(tmp_path / "mixed/predictions.parquet").to_pylist()
    for before, after in zip(alone, mixed):
        assert after["rules"] == ["seen" if name in base else "unseen" for name in after["classes"]]
        trained = {name: p for name, p in zip(after["classes"], after["probabilities"]) if name in base}
        share = sum(trained.values())
        assert {name: p / share for name, p in trained.items()} == pytest.approx(
            dict(zip(before["classes"], before["probabilities"])), rel=1e-4)
        assert after["classes"][0] == before["classes"][0] or after["classes"][0] not in base
    made_by = read_provenance(tmp_path / "mixed/predictions.parquet")
    assert made_by["rule"] == "by-class" and made_by["seen"] is False
    assert made_by["class_rules"] == {name: "seen" if name in base else "unseen" for name in every}
    with open(tmp_path / "mixed/predictions.csv") as handle:
        first = next(csv.DictReader(handle))
    assert first["rule_1"] == mixed[0]["rules"][0]

    # --rule unseen: every class by the unseen-class rule (what a mixed list did before), said in every row
    predict(project, images[0], tmp_path / "unseen", "--class-list", tmp_path / "classes.txt", "--rule", "unseen")
    row = pq.read_table(tmp_path / "unseen/predictions.parquet").to_pylist()[0]
    assert set(row["rules"]) == {"unseen"}
    result = predict(project, images[0], tmp_path / "bad", "--rule", "fused", code=1)
    assert "--rule: 'fused' is not a rule; use one of by-class, seen, unseen" in result.output
    assert not (tmp_path / "bad").exists()


def test_all_images_bad_is_an_error_and_writes_nothing(project, tmp_path):
    (tmp_path / "images").mkdir()
    (tmp_path / "images/a.png").write_text("not an image")
    result = predict(project, tmp_path / "images", tmp_path / "out", code=1)
    assert "none of the 1 image(s) could be read" in result.output
    assert not (tmp_path / "out").exists()


def test_the_api_page_loads_a_pipeline_model(project, monkeypatch, capsys):
    root, _ = project
    monkeypatch.chdir(root)
    shutil.copy(read_manifest(root / "data/world_objects").to_pylist()[0]["path"], root / "photo.png")
    exec(compile(python_blocks("api.md")[1], "docs/api.md", "exec"), {"__name__": "__main__"})
    name, _, predicted = capsys.readouterr().out.strip().splitlines()[-1].partition(" ")
    base = {row["classname"] for row in read_manifest(root / "data/world_objects").to_pylist() if row["subset"] == "base"}
    assert name == "dear" and predicted in base


def test_load_trained_without_roles_names_the_argument(project):
    from dear import api
    from dear.errors import DearError

    root, _ = project
    with pytest.raises(DearError, match=r"method dear needs the roles table it was trained with; pass it: "
                                        r"load_trained\(model_pt, backbone, roles="):
        api.load_trained(root / "runs/dear/world_objects/train/seed1/model.pt", root / "backbone")
