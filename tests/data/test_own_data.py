"""A dataset of one's own (`data.custom`): the three formats, Dassl's carved validation split, base classes,
names and templates, and that no built-in dataset's recipe is got by naming."""

from __future__ import annotations

import json
import re
import random
import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
from PIL import Image
from typer.testing import CliRunner

from dear.cli import app
from dear.data import custom, datasets, fewshot
from dear.data.manifest import read_manifest
from dear.errors import DearError
from dear.config.keys import reads
from dear.methods import REGISTRY
from dear.methods.recipe import resolve
from dear.config.show import example_classes
from dear.config.params import load_params
from fake_coop import write_params
from tests.own_data import CLASSES, csv_copy, imagefolder

FOLDER = {"format": "imagefolder", "path": "mine"}
CSV = {"format": "csv", "path": "mine/images.csv"}


@pytest.fixture
def in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    csv_copy(imagefolder(tmp_path / "mine"))
    return tmp_path


def params_file(tmp_path: Path, name: str = "params.yaml", **declared) -> Path:
    declared = declared or {"mine": FOLDER}
    return write_params(tmp_path / name, root="nowhere", datasets=list(declared), custom=declared, shots=2,
                        seeds=[1, 2], workers=1, source="coop")


def prepare(tmp_path: Path, dataset: str = "mine", params: Path | None = None, **declared):
    params = params or params_file(tmp_path, **declared)
    return CliRunner().invoke(app, ["prepare", "--dataset", dataset, "--out", f"data/{dataset}", "--params",
                                    str(params)])


def ok(result) -> None:
    assert result.exit_code == 0, result.output


def tables(folder: Path) -> list:
    return [pq.read_table(folder / name) for name in ("manifest.parquet", "fewshot-seed1.parquet",
                                                      "fewshot-seed2.parquet")]


@pytest.mark.parametrize("rows", ["walk order", "shuffled", "sorted by full path"])
def test_imagefolder_and_its_csv_copy_give_identical_manifests_and_picks(in_tmp, rows):
    """Whatever the CSV's row order: the canonical order (split, label, folder, file name) decides, not the file."""
    lines = (in_tmp / "mine/images.csv").read_text().splitlines()
    body = {"walk order": lines[1:], "shuffled": random.Random(3).sample(lines[1:], len(lines) - 1),
            "sorted by full path": sorted(lines[1:])}[rows]
    (in_tmp / "mine/images.csv").write_text("\n".join([lines[0], *body]) + "\n")
    ok(prepare(in_tmp, "mine", mine=FOLDER, mine_csv=CSV))
    ok(prepare(in_tmp, "mine_csv", mine=FOLDER, mine_csv=CSV))
    for ours, theirs in zip(tables(in_tmp / "data/mine"), tables(in_tmp / "data/mine_csv")):
        assert ours.equals(theirs)
    manifest = read_manifest(in_tmp / "data/mine")
    names = sorted(name.replace("_", " ") for name in CLASSES)
    assert sorted(set(manifest["classname"].to_pylist())) == names
    by_label = dict(zip(manifest["label"].to_pylist(), manifest["classname"].to_pylist()))
    assert [by_label[label] for label in sorted(by_label)] == names  # ImageFolder: sorted folders
    splits = manifest["split"].to_pylist()
    assert splits.count("val") == len(CLASSES) and splits.count("test") == 3 * len(CLASSES)


def dassl_split_trainval(trainval: list[tuple[str, int]], seed: int, p_val: float = 0.2):
    """Dassl/CoOp's `split_trainval` (datasets/oxford_pets.py), as written there, on the global stream."""
    random.seed(seed)
    tracker = {}
    for idx, item in enumerate(trainval):
        tracker.setdefault(item[1], []).append(idx)
    train, val = [], []
    for label, idxs in tracker.items():
        n_val = round(len(idxs) * p_val)
        assert n_val > 0
        random.shuffle(idxs)
        for n, idx in enumerate(idxs):
            (val if n < n_val else train).append(trainval[idx])
    return train, val


def test_the_carved_validation_split_is_dasslss_and_few_shot_picks_follow_it(in_tmp):
    ok(prepare(in_tmp))
    manifest = read_manifest(in_tmp / "data/mine").to_pylist()
    listed = [(row["path"], row["label"]) for row in manifest]
    trainval = sorted((p, lab) for p, lab in listed if "/train/" in p)  # ImageFolder order: class, then file
    train, val = dassl_split_trainval(trainval, seed=1)
    assert [(r["path"], r["label"]) for r in manifest if r["split"] == "train"] == train
    assert [(r["path"], r["label"]) for r in manifest if r["split"] == "val"] == val
    picks = pq.read_table(in_tmp / "data/mine/fewshot-seed1.parquet").to_pylist()
    rng = random.Random(1)
    expect = []
    for split, shots in (("train", 2), ("val", 2)):
        rows = [row for row in manifest if row["split"] == split]
        for label in dict.fromkeys(row["label"] for row in rows):
            items = [row["path"] for row in rows if row["label"] == label]
            expect += rng.sample(items, shots) if len(items) >= shots else items
    assert [row["path"] for row in picks] == expect


def other_images(source: Path, target: Path) -> None:
    """`source`'s folders and file names in `target`, each image mirrored: the same layout, other bytes."""
    for image in sorted(source.rglob("*.png")):
        copy = target / image.relative_to(source)
        copy.parent.mkdir(parents=True, exist_ok=True)
        with Image.open(image) as opened:
            opened.transpose(Image.Transpose.FLIP_LEFT_RIGHT).save(copy)


@pytest.mark.parametrize("folder", ["val", "validation"])
def test_a_val_folder_is_used_as_given(in_tmp, folder):
    other_images(in_tmp / "mine/test", in_tmp / f"mine/{folder}")
    ok(prepare(in_tmp))
    manifest = read_manifest(in_tmp / "data/mine").to_pylist()
    assert all(f"/{folder}/" in row["path"] for row in manifest if row["split"] == "val")
    assert [row["path"] for row in manifest if row["split"] == "train"] == \
        sorted(row["path"] for row in manifest if row["split"] == "train")


@pytest.mark.parametrize("given", ["list", "file"])
def test_base_classes_replace_the_first_sorted_half(in_tmp, given):
    chosen = ["red", "yellow", "dark purple"]  # keys or names
    if given == "file":
        (in_tmp / "base.txt").write_text("\n".join(chosen) + "\n")
    ok(prepare(in_tmp, mine={**FOLDER, "base_classes": chosen if given == "list" else "base.txt"}))
    manifest = read_manifest(in_tmp / "data/mine")
    pairs = set(zip(manifest["classname"].to_pylist(), manifest["subset"].to_pylist(),
                    manifest["subset_label"].to_pylist()))
    assert pairs == {("dark purple", "base", 0), ("red", "base", 1), ("yellow", "base", 2),
                     ("blue", "novel", 0), ("green", "novel", 1), ("orange", "novel", 2)}


def test_without_base_classes_the_halves_are_coops():
    is_novel, subset_label = fewshot.base_novel(5)
    assert is_novel.tolist() == [False, False, False, True, True] and subset_label.tolist() == [0, 1, 2, 0, 1]


def test_coop_json_at_any_path_and_csv_labels_with_names(in_tmp):
    """The same files declared as a folder, as a split JSON elsewhere and as a CSV of integer labels named by
    `classnames`, their rows shuffled: one manifest and the same few-shot picks (the canonical order)."""
    folder = prepare_ok(in_tmp, "mine")
    manifest = read_manifest(folder)
    rows = [row for row in manifest.to_pylist()]
    declared = {"train": "train", "val": "train", "test": "test"}  # val was carved from train/: declared train
    shuffled = random.Random(7).sample(rows, len(rows))
    split = {s: [[str(Path(r["path"]).relative_to("mine")), r["label"], r["classname"].replace(" ", "_")]
                 for r in shuffled if declared[r["split"]] == s] for s in ("train", "test")}
    (in_tmp / "splits").mkdir()
    (in_tmp / "splits/my_split.json").write_text(json.dumps(split))
    names = dict(zip(manifest["label"].to_pylist(), manifest["classname"].to_pylist()))
    with open(in_tmp / "mine/labels.csv", "w") as handle:
        handle.write("path,label,split\n" + "".join(f"{Path(r['path']).relative_to('mine')},{r['label']},"
                                                    f"{declared[r['split']]}\n" for r in shuffled))
    declared = {"mine": FOLDER, "mine_json": {"format": "coop-json", "path": "splits/my_split.json", "images": "mine"},
                "mine_labels": {"format": "csv", "path": "mine/labels.csv", "classnames": names}}
    for name in ("mine_json", "mine_labels"):
        ok(prepare(in_tmp, name, **declared))
        for ours, theirs in zip(tables(folder), tables(in_tmp / f"data/{name}")):
            assert ours.equals(theirs), name


def prepare_ok(tmp_path: Path, name: str) -> Path:
    ok(prepare(tmp_path, name))
    return tmp_path / f"data/{name}"


def test_classnames_and_hidden_or_other_files(in_tmp):
    (in_tmp / "mine/train/red/.DS_Store").write_text("x")
    (in_tmp / "mine/train/red/notes.txt").write_text("x")
    (in_tmp / "names.txt").write_text("dark_purple aubergine\nred crimson red\n")
    result = prepare(in_tmp, mine={**FOLDER, "classnames": "names.txt"})
    ok(result)
    assert "skipped 2 file(s) that are hidden or not images" in result.stderr
    names = set(read_manifest(in_tmp / "data/mine")["classname"].to_pylist())
    assert {"aubergine", "crimson red", "dark purple"} & names == {"aubergine", "crimson red"}


def test_fewer_images_than_shots_is_a_warning(in_tmp):
    params = params_file(in_tmp)
    params.write_text(params.read_text().replace("shots: 2", "shots: 8"))
    result = prepare(in_tmp, params=params)
    ok(result)
    assert "data.shots is 8 but 6 of 6 classes have fewer training images" in result.stderr


# --- no built-in dataset's recipe by naming, and the template reaches every recipe that has one --------------

@pytest.mark.parametrize("name", ["eurosat", "oxford_pets", "world_objects"])
def test_a_built_in_name_is_refused(tmp_path, name):
    with pytest.raises(DearError, match=f"'{name}' is a built-in dataset's name"):
        load_params(params_file(tmp_path, **{name: FOLDER}))


def test_a_dataset_of_ones_own_gets_the_neutral_recipe_and_its_template(tmp_path):
    params = load_params(params_file(tmp_path, mine={**FOLDER, "template": "a close photo of a {}."}))
    for method in REGISTRY:
        recipe = params.train.recipe(method, "mine", "base_to_novel")
        neutral = resolve(params.train.recipes, method, "", "base_to_novel")
        for key, setting in recipe.settings.items():
            if key == "template":
                assert setting.value == "a close photo of a {}." and setting.source == "data.custom.mine.template"
            elif key == "min_steps":  # the one value of ours for every dataset of one's own (dassl.yaml `own`)
                assert setting.kind == "ours" and neutral.settings[key].value is None
            elif key in ("roles_table", "roles_threshold"):  # a `+roles` variant's: the study's profile, any dataset
                assert setting.source.startswith("profile.")
            else:
                assert setting == neutral.settings[key], (method, key)
        if "template" in recipe.settings:
            assert "data.custom.mine.template" in reads(params, "train", method, "mine")
    assert reads(params, "prepare", dataset="mine")["data.custom.mine.template"] == "a close photo of a {}."


def test_unknown_dataset_says_how_to_declare_one(in_tmp):
    params = params_file(in_tmp)
    result = CliRunner().invoke(app, ["check", "--params", str(params), "--set", "data.datasets=[mine, shapes8]"])
    assert "declare a dataset of your own under data.custom.shapes8" in result.output


def test_recipe_examples_are_the_datasets_own_base_classes(in_tmp):
    params = load_params(params_file(in_tmp, mine={**FOLDER, "base_classes": ["red", "yellow"]}))
    assert example_classes(params, "mine") == (["red", "yellow"], True)  # not prepared: read from the folders
    demo = load_params(Path(__file__).resolve().parents[2] / "params.yaml")
    names, own = example_classes(demo.model_copy(update={"output_root": str(in_tmp)}), "world_objects")
    assert own and "golden_retriever" not in names


def test_custom_listing_checks_cost_no_images(in_tmp):
    listing = datasets.read(custom.declaration("mine", load_params(params_file(in_tmp)).data.custom["mine"]))
    assert len(listing.paths) == 9 * len(CLASSES) and listing.base is None
    assert np.array_equal(np.unique(listing.labels), np.arange(len(CLASSES)))


def test_the_layout_benchmark_prepares_the_same_files_both_ways(tmp_path, capsys):
    import sys
    import types

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import prepare_scale

    args = types.SimpleNamespace(files=120, classes=6, seeds=[1], workers=1, dir=tmp_path / "bench", keep=True)
    prepare_scale.compare_layouts(args)
    printed = capsys.readouterr().out
    assert "ratio ImageFolder / JSON:" in printed and printed.count("120 rows") == 2
    manifests = [read_manifest(tmp_path / "bench/out" / name) for name in ("world_objects", "mine")]
    assert sorted(name.replace("_", " ") for name in manifests[0]["classname"].to_pylist()) == \
        sorted(manifests[1]["classname"].to_pylist())  # folder names are read with "_" as a space


def test_a_domain_shift_target_of_ones_own_maps_its_classes_to_the_sources(in_tmp):
    shutil.copytree(in_tmp / "mine", in_tmp / "sketch")
    for split in ("train", "test"):
        (in_tmp / f"sketch/{split}/red").rename(in_tmp / f"sketch/{split}/rouge")
    transfer = "study.transfer={source: mine, cross_dataset: [], domain_generalization: [sketch]}"
    base = ["check", "--params", str(params_file(in_tmp)), "--set", "data.datasets=[mine, sketch]", "--set", transfer]
    unmapped = CliRunner().invoke(app, [*base, "--set", "data.custom.sketch={format: imagefolder, path: sketch}"])
    assert unmapped.exit_code == 1
    assert "data.custom.sketch: class 'rouge' (1 such) is not a class of the source mine" in unmapped.output
    declared = "data.custom.sketch={format: imagefolder, path: sketch, classnames: {rouge: red}}"
    mapped = CliRunner().invoke(app, [*base, "--set", declared])
    assert mapped.exit_code == 0, mapped.output


@pytest.mark.parametrize("name", ["my data", "shapes/8", "{x}", ".hidden"])
def test_a_name_that_cannot_be_a_path_or_stage_is_refused(tmp_path, name):
    with pytest.raises(DearError, match="cannot name a dataset"):
        load_params(params_file(tmp_path, **{name: FOLDER}))


def test_one_csv_file_per_split_gives_the_same_manifest(in_tmp):
    lines = (in_tmp / "mine/images.csv").read_text().splitlines()
    for split in ("train", "test"):
        rows = [line.rsplit(",", 1)[0] for line in lines[1:] if line.endswith("," + split)]
        (in_tmp / f"mine/{split}.csv").write_text("path,classname\n" + "\n".join(rows) + "\n")
    declared = {"mine": FOLDER, "mine_split": {"format": "csv", "path": "mine",
                                               "splits": {"train": "train.csv", "test": "test.csv"}}}
    ok(prepare(in_tmp, "mine", **declared))
    ok(prepare(in_tmp, "mine_split", **declared))
    for ours, theirs in zip(tables(in_tmp / "data/mine"), tables(in_tmp / "data/mine_split")):
        assert ours.equals(theirs)


@pytest.mark.parametrize("extra, words", [({"images": "mine"}, "does not read 'images'"),
                                          ({"format": "coop-json", "path": "x.json", "splits": {"test": "t"}},
                                           "does not read 'splits'"),
                                          ({"template": "a photo."}, "must hold {} once")])
def test_a_key_its_format_ignores_or_a_template_without_a_slot_is_refused(tmp_path, extra, words):
    with pytest.raises(DearError, match=re.escape(words)):
        load_params(params_file(tmp_path, mine={**FOLDER, **extra}))


def test_a_names_or_base_classes_file_is_read_by_its_content(in_tmp):
    """The config names the file; its lines are the values: an edited file makes prepare's values (its values
    file in both engines, the record dear.pipeline.stale compares) differ, so prepare and what reads it rerun."""
    (in_tmp / "names.txt").write_text("".join(f"{key} {key.replace('_', ' ')}\n" for key in CLASSES))
    keys = sorted(CLASSES)
    (in_tmp / "base.txt").write_text(f"{keys[0]}\n")
    params = load_params(params_file(in_tmp, mine={**FOLDER, "classnames": "names.txt", "base_classes": "base.txt"}))
    before = reads(params, "prepare", dataset="mine")
    assert set(before) >= {"data.custom.mine.classnames#sha256", "data.custom.mine.base_classes#sha256"}
    (in_tmp / "base.txt").write_text(f"{keys[1]}\n")
    after = reads(params, "prepare", dataset="mine")
    assert {key for key in before if before[key] != after[key]} == {"data.custom.mine.base_classes#sha256"}
    assert "data.custom.mine.classnames#sha256" not in reads(params, "train", "coop", "mine")


# --- bad data beyond paths: content, truncation, classes without images, a row's typo --------------------------

def failure(result) -> str:
    """The one `error:` line of a clean failure (exit 1, nothing written)."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    return errors[0]


def as_json(root: Path) -> dict:
    """`root/split.json`: the images of images.csv as a CoOp split file (labels: sorted class names)."""
    lines = [line.split(",") for line in (root / "images.csv").read_text().splitlines()[1:]]
    classes = sorted({name for _, name, _ in lines})
    split = {s: [[path, classes.index(name), name] for path, name, row_split in lines if row_split == s]
             for s in ("train", "test")}
    (root / "split.json").write_text(json.dumps(split))
    return {"format": "coop-json", "path": "mine/split.json"}


@pytest.mark.parametrize("form", ["imagefolder", "csv", "coop-json", "hashed"])
def test_the_same_image_under_another_name_in_two_splits_is_refused(in_tmp, form):
    shutil.copyfile(in_tmp / "mine/train/red/red_002.png", in_tmp / "mine/test/red/another_name.png")
    csv_copy(in_tmp / "mine")
    declared = {"imagefolder": FOLDER, "hashed": FOLDER, "csv": CSV, "coop-json": as_json(in_tmp / "mine")}[form]
    params = params_file(in_tmp, mine=declared)
    if form == "hashed":  # data.hash_content: every sha256 is known, the groups come from it
        params.write_text(params.read_text().replace("hash_content: false", "hash_content: true"))
    line = failure(prepare(in_tmp, params=params))
    assert "mine/test/red/another_name.png" in line and "the same bytes as mine/train/red/red_002.png" in line
    assert "in test and train" in line and "delete one copy" in line
    assert not (in_tmp / "data/mine").exists()


def test_copies_within_one_split_are_a_warning_and_nothing_is_read_with_verify_none(in_tmp):
    shutil.copyfile(in_tmp / "mine/train/red/red_002.png", in_tmp / "mine/train/red/again.png")
    result = prepare(in_tmp)
    ok(result)
    assert "1 image(s) repeat another of the same split byte for byte" in result.stderr
    shutil.copyfile(in_tmp / "mine/train/red/red_002.png", in_tmp / "mine/test/red/again.png")
    params = params_file(in_tmp)
    params.write_text(params.read_text().replace("verify: exists", "verify: none"))
    ok(prepare(in_tmp, params=params))  # verify none opens no file: no content is compared (documented)


def test_built_in_splits_are_taken_as_published(tmp_path, monkeypatch):
    """CoOp's splits are the reference every paper scores on: the fake ones repeat bytes across splits (an image's
    content depends on its label and index only), and a truncated file passes `exists` as before."""
    from fake_coop import make_fake_dataset

    monkeypatch.chdir(tmp_path)
    make_fake_dataset("data", "oxford_pets", n_classes=3, per_class=3)
    params = write_params(tmp_path / "params.yaml", root="data", datasets=["oxford_pets"], workers=1)
    ok(CliRunner().invoke(app, ["prepare", "--dataset", "oxford_pets", "--out", "out", "--params", str(params)]))


@pytest.mark.parametrize("cut", ["half", "300 bytes"])
def test_a_truncated_image_is_caught_by_the_default_check(in_tmp, cut):
    """`data.verify: exists` reads each file's end for a dataset of one's own: a cut PNG or JPEG is refused before
    training; a complete JPEG with bytes after its end (some cameras write them) passes."""
    bad = in_tmp / "mine/test/green/green_001.png"
    data = bad.read_bytes()
    bad.write_bytes(data[: len(data) // 2] if cut == "half" else data[:300])
    jpeg = in_tmp / "mine/train/blue/blue_000.png"
    with Image.open(jpeg) as image:
        image.save(jpeg.with_suffix(".jpg"), quality=90)
    jpeg.unlink()
    with open(jpeg.with_suffix(".jpg"), "ab") as handle:
        handle.write(b"\0" * 64)
    line = failure(prepare(in_tmp))
    assert "mine/test/green/green_001.png: unreadable (image file is truncated" in line and "data.skip_bad" in line
    bad.write_bytes(data)
    ok(prepare(in_tmp))


def test_a_class_without_test_images_is_refused(in_tmp):
    shutil.rmtree(in_tmp / "mine/test/green")
    line = failure(prepare(in_tmp))
    assert "mine/test/green: class 'green' has no test image (its images: 6 train)" in line
    assert "move some of its images to mine/test/green/" in line and "has no accuracy" in line


def test_a_class_missing_from_a_given_val_split_is_a_warning(in_tmp):
    other_images(in_tmp / "mine/test", in_tmp / "mine/val")
    for name in ("green", "red"):
        shutil.rmtree(in_tmp / f"mine/val/{name}")
    result = prepare(in_tmp)
    ok(result)
    assert "2 class(es) have no image in the val split (e.g. 'green')" in result.stderr


@pytest.mark.parametrize("split", ["test", "train"])
def test_a_class_name_typo_in_a_csv_row_names_the_row(in_tmp, split):
    lines = (in_tmp / "mine/images.csv").read_text().splitlines()
    number = next(n for n, line in enumerate(lines, start=1) if line.endswith(f",green,{split}"))
    lines[number - 1] = lines[number - 1].replace(",green,", ",gren,")
    (in_tmp / "mine/images.csv").write_text("\n".join(lines) + "\n")
    line = failure(prepare(in_tmp, mine=CSV))
    missing = "training" if split == "test" else "test"
    assert f"mine/images.csv:{number}: class 'gren' has no {missing} image (its images: 1 {split})" in line
    assert "a typo of 'green'?" in line and "fix the class name in this row" in line


def test_the_data_checks_benchmark_catches_what_it_times(tmp_path, capsys):
    import sys
    import types

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    import data_checks

    args = types.SimpleNamespace(images=6, files=60, planted=3, workers=1, repeat=1, dir=tmp_path)
    data_checks.measure_verify(args)
    data_checks.measure_duplicates(args)
    printed = capsys.readouterr().out
    assert "catches: half a JPEG, a JPEG without its last 5 bytes, 300 bytes of a PNG" in printed  # header + end
    assert "catches: 300 bytes of a PNG" in printed  # PIL's verify() decodes no JPEG data
    assert "found 3 groups of identical files, the planted ones: True" in printed
