"""`dear prepare` on tiny fake datasets in CoOp's layout: every reader, bad inputs, determinism."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow.compute as pc
import pytest
from PIL import Image
from typer.testing import CliRunner

from dear.cli import app
from dear.data import coop, verify
from dear.data.manifest import classnames, read_fewshot, read_manifest, select
from dear.errors import DearError
from dear.runtime.io import read_parquet
from fake_coop import IMAGENET_SETS, JSON_LAYOUT, NAMES, WORLD, make_fake_dataset, wnid, write_params

N_CLASSES, PER_CLASS = 5, 3


def prepare(tmp_path: Path, dataset: str, out: str = "out", **data) -> object:
    """Run `dear prepare` in-process from tmp_path (relative data.root "data")."""
    data.setdefault("workers", 1)
    params = write_params(tmp_path / "params.yaml", root="data", datasets=[dataset], **data)
    return CliRunner().invoke(app, ["prepare", "--dataset", dataset, "--out", out, "--params", str(params)])


def assert_clean_failure(result, tmp_path: Path, *phrases: str, out: str = "out") -> None:
    """Exit 1, one `error:` line naming what is wrong, no traceback, nothing written."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    assert "Traceback" not in result.stderr
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    written = [p for p in (tmp_path / out).rglob("*") if p.is_file()] if (tmp_path / out).exists() else []
    assert written == []


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


# --- the registry agrees with CoOp's layout (written independently in fake_coop) ---

def test_registry_matches_coop_layout():
    for name, (image_dir, split_file) in JSON_LAYOUT.items():
        spec = coop.SPECS[name]
        assert (spec.folder, spec.image_dir, spec.split_file) == (name, image_dir, split_file)
    for name, image_dir in IMAGENET_SETS.items():
        assert (coop.SPECS[name].image_dir, coop.SPECS[name].test_only) == (image_dir, True)
    for name in WORLD:
        assert (coop.SPECS[name].image_dir, coop.SPECS[name].split_file) == ("images", f"split_zhou_{name}.json")
    assert coop.SPECS["imagenet"].val_from_train and not coop.SPECS["imagenet"].test_only
    assert set(coop.SPECS) == set(NAMES)


# --- every reader ---------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
def test_every_reader(in_tmp, name):
    make_fake_dataset("data", name, n_classes=N_CLASSES, per_class=PER_CLASS)
    result = prepare(in_tmp, name, seeds=[1], shots=2)
    assert result.exit_code == 0, result.output
    manifest = read_manifest("out")
    subset_only = name in ("imagenet-adversarial", "imagenet-rendition")
    n_classes = N_CLASSES // 2 if subset_only else N_CLASSES
    splits = {"imagenet": {"train", "test"}}.get(name, {"test"} if name in IMAGENET_SETS else {"train", "val", "test"})
    assert set(manifest["split"].to_pylist()) == splits
    assert manifest.num_rows == n_classes * PER_CLASS * len(splits)
    assert sorted(set(manifest["label"].to_pylist())) == list(range(n_classes))
    names = classnames(manifest)
    assert len(names) == n_classes and len(set(names)) == n_classes
    for path, width, height in zip(*(manifest[c].to_pylist() for c in ("path", "width", "height"))):
        assert path.startswith(f"data/{name}/")
        with Image.open(path) as image:
            assert image.size == (width, height)
    if name.startswith("imagenet"):
        expected = [2 * label + 1 for label in manifest["label"].to_pylist()] if subset_only \
            else manifest["label"].to_pylist()
        assert manifest["imagenet_label"].to_pylist() == expected
        assert all(f"/{wnid(i)}/" in p or f"/{i}/" in p
                   for i, p in zip(manifest["imagenet_label"].to_pylist(), manifest["path"].to_pylist()))
    else:
        assert manifest["imagenet_label"].null_count == manifest.num_rows
    shots = read_fewshot("out/fewshot-seed1.parquet")
    if name in IMAGENET_SETS:
        assert shots.num_rows == 0
    else:
        assert pc.sum(pc.equal(shots["fewshot_split"], "train")).as_py() == 2 * n_classes
        assert pc.sum(pc.equal(shots["fewshot_split"], "val")).as_py() == (n_classes if name == "imagenet"
                                                                           else 2 * n_classes)
        assert set(shots["split"].to_pylist()) <= {"train", "val"}
    assert read_parquet("out/excluded.parquet").num_rows == 0


def test_imagenet_classes_and_labels_follow_sorted_wnids(in_tmp):
    make_fake_dataset("data", "imagenet", n_classes=4, per_class=2)
    result = prepare(in_tmp, "imagenet", seeds=[1], shots=1)
    assert result.exit_code == 0, result.output
    manifest = read_manifest("out")
    assert classnames(manifest) == [f"thing number {label}" for label in range(4)]
    train = select(manifest, split="train")
    assert train["path"].to_pylist() == sorted(train["path"].to_pylist())
    assert select(manifest, split="test").num_rows == 8


def test_base_novel_columns(in_tmp):
    make_fake_dataset("data", "dtd", n_classes=5, per_class=1)
    assert prepare(in_tmp, "dtd", seeds=[1], shots=1).exit_code == 0
    manifest = read_manifest("out")
    by_label = {label: (subset, sub) for label, subset, sub in
                zip(*(manifest[c].to_pylist() for c in ("label", "subset", "subset_label")))}
    assert by_label == {0: ("base", 0), 1: ("base", 1), 2: ("base", 2), 3: ("novel", 0), 4: ("novel", 1)}
    assert classnames(manifest, "novel") == ["dtd class 3", "dtd class 4"]


def test_hash_content_and_verify_none(in_tmp):
    make_fake_dataset("data", "eurosat", n_classes=2, per_class=1)
    assert prepare(in_tmp, "eurosat", seeds=[1], shots=1, hash_content=True, verify="none").exit_code == 0
    manifest = read_manifest("out")
    assert manifest["width"].null_count == manifest.num_rows == manifest["height"].null_count
    for path, digest in zip(manifest["path"].to_pylist(), manifest["sha256"].to_pylist()):
        assert digest == hashlib.sha256(Path(path).read_bytes()).hexdigest()


def test_deterministic_byte_identical_outputs(in_tmp):
    make_fake_dataset("data", "caltech-101", n_classes=3, per_class=3)
    assert prepare(in_tmp, "caltech-101", out="a", seeds=[1, 2], shots=2).exit_code == 0
    assert prepare(in_tmp, "caltech-101", out="b", seeds=[1, 2], shots=2).exit_code == 0
    files = sorted(p.name for p in Path("a").iterdir() if p.is_file())
    assert files == ["excluded.parquet", "fewshot-seed1.parquet", "fewshot-seed2.parquet", "manifest.parquet"]
    for name in files + [f".digest/{name}.yaml" for name in files] + [".digest/folder.yaml"]:
        assert (Path("a") / name).read_bytes() == (Path("b") / name).read_bytes(), name
    assert read_fewshot("a/fewshot-seed1.parquet")["path"].to_pylist() != \
        read_fewshot("a/fewshot-seed2.parquet")["path"].to_pylist()


# --- bad images -------------------------------------------------------------------

def corrupt(path: Path, keep_fraction: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep_fraction)])


def test_corrupt_png_fails_with_decode_naming_the_file(in_tmp, monkeypatch):
    folder = make_fake_dataset("data", "oxford_pets", n_classes=3, per_class=4)
    bad = sorted((folder / "images").rglob("*.png"))[5]
    corrupt(bad, 0.6)  # header intact: only a full decode notices
    monkeypatch.setattr(verify, "CHUNK", 4)  # several chunks: the worker pool path
    result = prepare(in_tmp, "oxford_pets", verify="decode", workers=2)
    assert_clean_failure(result, in_tmp, "1 bad image(s)", str(bad), "data.skip_bad")


def test_a_truncated_test_image_passed_by_exists_gets_a_hint_that_works(in_tmp):
    """`data.verify: exists` reads headers: a truncated test JPEG passes prepare and fails where it is decoded.
    The message's remedy (verify: decode and skip_bad: true, prepare again) drops it."""
    from dear.data.manifest import read_rgb
    from dear.errors import DearError

    folder = make_fake_dataset("data", "imagenet", n_classes=3, per_class=4)
    bad = sorted((folder / "images" / "val").rglob("*.jpg"))[2]  # a test image of ImageNet (CoOp tests on val)
    bad.write_bytes(bad.read_bytes()[:-5])  # the header survives: `data.verify: exists` passes it
    assert prepare(in_tmp, "imagenet", shots=2).exit_code == 0
    assert str(bad) in read_manifest("out")["path"].to_pylist()
    with pytest.raises(DearError) as failed:
        read_rgb(bad)  # what evaluate (and fuse, train) do with each image
    assert "set data.verify: decode and data.skip_bad: true and rerun `dear prepare`" in str(failed.value)
    result = prepare(in_tmp, "imagenet", shots=2, verify="decode", skip_bad=True)
    assert result.exit_code == 0, result.output
    assert str(bad) not in read_manifest("out")["path"].to_pylist()
    assert read_parquet("out/excluded.parquet")["path"].to_pylist() == [str(bad)]


def test_garbage_file_fails_with_exists(in_tmp):
    folder = make_fake_dataset("data", "food-101", n_classes=2, per_class=2)
    bad = sorted((folder / "images").rglob("*.png"))[0]
    bad.write_bytes(b"not an image at all")
    assert_clean_failure(prepare(in_tmp, "food-101"), in_tmp, str(bad), "unreadable")


def test_missing_files_are_named_up_to_max_listed(in_tmp):
    folder = make_fake_dataset("data", "ucf101", n_classes=2, per_class=3)
    gone = sorted((folder / "UCF-101-midframes").rglob("*.png"))[:3]
    for path in gone:
        path.unlink()
    result = prepare(in_tmp, "ucf101", max_listed=1)
    assert_clean_failure(result, in_tmp, "3 bad image(s)", "missing", "and 2 more")


def test_skip_bad_drops_and_lists_bad_files(in_tmp):
    folder = make_fake_dataset("data", "sun397", n_classes=3, per_class=4)
    images = sorted((folder / "SUN397").rglob("*.png"))
    images[0].unlink()
    images[1].write_bytes(b"garbage")
    result = prepare(in_tmp, "sun397", skip_bad=True, seeds=[1], shots=8)
    assert result.exit_code == 0, result.output
    assert "dropped 2 bad image(s)" in result.stderr
    excluded = read_parquet("out/excluded.parquet")
    bad_paths = {str(p) for p in images[:2]}
    assert set(excluded["path"].to_pylist()) == bad_paths
    assert sorted(excluded["reason"].to_pylist())[0] == "missing"
    manifest = read_manifest("out")
    assert manifest.num_rows == 3 * 4 * 3 - 2
    assert not bad_paths & set(manifest["path"].to_pylist())
    assert not bad_paths & set(read_fewshot("out/fewshot-seed1.parquet")["path"].to_pylist())


def test_skip_bad_cannot_drop_a_whole_class(in_tmp):
    folder = make_fake_dataset("data", "dtd", n_classes=2, per_class=1)
    for path in (folder / "images" / "c001").iterdir():
        path.unlink()
    assert_clean_failure(prepare(in_tmp, "dtd", skip_bad=True), in_tmp, "class 1", "dtd class 1")


# --- bad layouts ------------------------------------------------------------------

def test_missing_split_file(in_tmp):
    folder = make_fake_dataset("data", "oxford_pets", n_classes=2, per_class=1)
    (folder / "split_zhou_OxfordPets.json").unlink()
    assert_clean_failure(prepare(in_tmp, "oxford_pets"), in_tmp,
                         "data/oxford_pets/split_zhou_OxfordPets.json", "DATASETS.md#oxfordpets")


def test_missing_root_and_missing_dataset_folder(in_tmp):
    assert_clean_failure(prepare(in_tmp, "eurosat"), in_tmp, "data: data.root not found", "data/eurosat")
    Path("data").mkdir()
    assert_clean_failure(prepare(in_tmp, "eurosat"), in_tmp, "data/eurosat: dataset folder not found",
                         "DATASETS.md#eurosat")
    assert_clean_failure(prepare(in_tmp, "world_colors"), in_tmp, "data/world_colors", "embedded world")


def test_unknown_dataset(in_tmp):
    assert_clean_failure(prepare(in_tmp, "mnist"), in_tmp, "mnist: unknown dataset", "oxford_pets")


def test_imagenet_classnames_with_a_missing_line(in_tmp):
    folder = make_fake_dataset("data", "imagenet", n_classes=4, per_class=1)
    lines = (folder / "classnames.txt").read_text().splitlines()
    (folder / "classnames.txt").write_text("\n".join(lines[:-1]) + "\n")
    assert_clean_failure(prepare(in_tmp, "imagenet"), in_tmp, "4 class folders", "lists 3 wnids", wnid(3))


def test_split_labels_not_contiguous(in_tmp):
    folder = make_fake_dataset("data", "oxford_flowers", n_classes=3, per_class=1)
    split_file = folder / "split_zhou_OxfordFlowers.json"
    split = json.loads(split_file.read_text())
    for entries in split.values():
        for entry in entries:
            if entry[1] == 1:
                entry[1], entry[2] = 3, "renamed"
    split_file.write_text(json.dumps(split))
    assert_clean_failure(prepare(in_tmp, "oxford_flowers"), in_tmp, "split_zhou_OxfordFlowers.json",
                         "label 1 has no image")


def test_split_label_with_two_names(in_tmp):
    folder = make_fake_dataset("data", "world_shapes", n_classes=2, per_class=2)
    split_file = folder / "split_zhou_world_shapes.json"
    split = json.loads(split_file.read_text())
    split["test"][0][2] = "another name"
    split_file.write_text(json.dumps(split))
    assert_clean_failure(prepare(in_tmp, "world_shapes"), in_tmp, "is named both")


def test_imagenetv2_missing_class_folder(in_tmp):
    folder = make_fake_dataset("data", "imagenetv2", n_classes=3, per_class=1)
    shutil.rmtree(folder / IMAGENET_SETS["imagenetv2"] / "2")
    assert_clean_failure(prepare(in_tmp, "imagenetv2"), in_tmp, "format-val/2: not found", "folders 0..2")


def test_imagenet_r_folder_not_in_classnames(in_tmp):
    folder = make_fake_dataset("data", "imagenet-rendition", n_classes=4, per_class=1)
    (folder / "imagenet-r" / "n99999999").mkdir()
    assert_clean_failure(prepare(in_tmp, "imagenet-rendition"), in_tmp, "n99999999", "not in")


def test_fgvc_unknown_variant(in_tmp):
    folder = make_fake_dataset("data", "fgvc_aircraft", n_classes=2, per_class=1)
    with open(folder / "images_variant_test.txt", "a") as handle:
        handle.write("1234567 Concorde\n")
    assert_clean_failure(prepare(in_tmp, "fgvc_aircraft"), in_tmp, "images_variant_test.txt", "'Concorde'")


@pytest.mark.parametrize(("key", "value", "phrase"), [
    ("shots", "16", "key 'data.shots' must be int"),
    ("verify", "maybe", "key 'data.verify' must be one of decode | exists | none"),
    ("workers", 1.5, "key 'data.workers' must be int"),
    ("skip_bad", "yes", "key 'data.skip_bad' must be bool"),
    ("seeds", 1, "key 'data.seeds' must be a list of int"),
])
def test_wrong_param_types(in_tmp, key, value, phrase):
    make_fake_dataset("data", "eurosat", n_classes=2, per_class=1)
    assert_clean_failure(prepare(in_tmp, "eurosat", **{key: value}), in_tmp, "params.yaml", phrase)


def test_console_script_exit_code_and_single_line(in_tmp):
    """The installed `dear` entry point, in a subprocess: exit 1, the error on one line."""
    params = write_params(in_tmp / "params.yaml", root="nowhere", datasets=["dtd"])
    dear = Path(sys.executable).with_name("dear")
    done = subprocess.run([str(dear), "prepare", "--dataset", "dtd", "--out", "out", "--params", str(params)],
                          capture_output=True, text=True, cwd=in_tmp, timeout=60)
    assert done.returncode == 1
    errors = [line for line in done.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "nowhere: data.root not found" in errors[0], done.stderr
    assert not (in_tmp / "out").exists()


def test_worker_pool_gives_the_same_results_as_one_process(in_tmp, monkeypatch):
    folder = make_fake_dataset("data", "world_objects", n_classes=3, per_class=3)
    paths = sorted(str(p) for p in (folder / "images").rglob("*.png"))
    Path(paths[4]).unlink()
    Path(paths[9]).write_bytes(b"\x89PNG broken")
    monkeypatch.setattr(verify, "CHUNK", 5)
    one = verify.check_images(paths, "decode", True, workers=1)
    pool = verify.check_images(paths, "decode", True, workers=2)
    assert one.reasons == pool.reasons and sorted(one.reasons) == [4, 9]
    assert one.reasons[4] == "missing" and one.reasons[9].startswith("unreadable")
    assert np.array_equal(one.width, pool.width) and np.array_equal(one.height, pool.height)
    assert one.sha256 == pool.sha256 and one.sha256[0] is not None and one.sha256[4] is None
    assert one.width[4] == -1 and one.width[0] > 0


def _die(bounds):
    os._exit(9)  # a worker killed mid-chunk, as the OOM killer would


def test_a_worker_that_dies_is_an_error_not_a_hang(in_tmp, monkeypatch):
    folder = make_fake_dataset("data", "world_objects", n_classes=2, per_class=3)
    paths = sorted(str(p) for p in (folder / "images").rglob("*.png"))
    monkeypatch.setattr(verify, "CHUNK", 2)
    monkeypatch.setattr(verify, "_check_range", _die)
    with pytest.raises(DearError, match="a worker process died before it finished .*data.workers: 1"):
        verify.check_images(paths, "decode", True, workers=2)
