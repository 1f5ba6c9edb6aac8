"""Few-shot subsets are exactly Dassl's; base/novel halves are CoOp's.

The reference below is an independent transcription of Dassl's
`DatasetBase.generate_fewshot_dataset` / `split_dataset_by_label` (repeat=False)
and CoOp's `OxfordPets.subsample_classes`, run on lists of Datum-like objects
with the global `random` module, as CoOp does after `random.seed(cfg.SEED)`.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import defaultdict

import numpy as np
import pytest
from typer.testing import CliRunner

from dear.cli import app
from dear.data import fewshot
from dear.data.manifest import read_fewshot, read_manifest
from fake_coop import make_fake_dataset, write_params


class Datum:
    def __init__(self, impath: str, label: int, classname: str = ""):
        self.impath, self.label, self.classname = impath, label, classname


def dassl_generate_fewshot_dataset(*data_sources, num_shots=-1, repeat=False):
    if num_shots < 1:
        return data_sources[0] if len(data_sources) == 1 else data_sources
    output = []
    for data_source in data_sources:
        tracker = defaultdict(list)
        for item in data_source:
            tracker[item.label].append(item)
        dataset = []
        for label, items in tracker.items():
            if len(items) >= num_shots:
                sampled_items = random.sample(items, num_shots)
            else:
                sampled_items = random.choices(items, k=num_shots) if repeat else items
            dataset.extend(sampled_items)
        output.append(dataset)
    return output[0] if len(output) == 1 else output


def coop_subsample_classes(*args, subsample="all"):
    if subsample == "all":
        return args
    labels = sorted({item.label for item in args[0]})
    m = math.ceil(len(labels) / 2)
    selected = labels[:m] if subsample == "base" else labels[m:]
    relabeler = {y: y_new for y_new, y in enumerate(selected)}
    return [[Datum(item.impath, relabeler[item.label], item.classname) for item in dataset if item.label in selected]
            for dataset in args]


def coop_fewshot(train, val, shots, seed):
    """CoOp's dataset __init__ after set_random_seed(seed): train shots, then min(shots, 4) val shots."""
    random.seed(seed)
    picked_train = dassl_generate_fewshot_dataset(train, num_shots=shots)
    picked_val = dassl_generate_fewshot_dataset(val, num_shots=min(shots, 4))
    return picked_train, picked_val


def random_labels(rng: np.random.Generator, n_classes: int, max_per_class: int) -> np.ndarray:
    counts = rng.integers(1, max_per_class + 1, size=n_classes)
    labels = np.repeat(np.arange(n_classes), counts)
    return labels[rng.permutation(labels.size)]  # shuffled: first appearance != label order


@pytest.mark.parametrize("case", range(12))
def test_dassl_sample_matches_reference(case):
    rng = np.random.default_rng(case)
    labels = random_labels(rng, n_classes=int(rng.integers(1, 30)), max_per_class=int(rng.integers(1, 40)))
    splits = rng.integers(0, 3, size=labels.size).astype(np.int8)  # 0 train, 1 val, 2 test
    shots = int(rng.choice([1, 2, 4, 8, 16]))
    seed = int(rng.integers(0, 10_000))
    items = [Datum(f"img{row}", int(label)) for row, label in enumerate(labels)]
    train = [items[row] for row in np.flatnonzero(splits == 0)]
    val = [items[row] for row in np.flatnonzero(splits == 1)]
    expected_train, expected_val = coop_fewshot(train, val, shots, seed)

    picked = fewshot.sample_fewshot(labels, splits, shots, min(shots, 4), seed, val_from_train=False)
    assert [items[row].impath for row in picked.train] == [item.impath for item in expected_train]
    assert [items[row].impath for row in picked.val] == [item.impath for item in expected_val]


def test_global_random_state_is_left_alone():
    """Sampling uses its own generator: other code's use of `random` cannot shift the picks."""
    labels = np.repeat(np.arange(5), 20)
    splits = np.zeros(labels.size, dtype=np.int8)
    first = fewshot.sample_fewshot(labels, splits, 4, 0, seed=3, val_from_train=False)
    random.seed(123)
    random.random()
    second = fewshot.sample_fewshot(labels, splits, 4, 0, seed=3, val_from_train=False)
    assert np.array_equal(first.train, second.train)
    assert first.val.size == 0


def test_val_from_train_never_reuses_train_shots_or_test():
    """ImageNet: validation shots are Dassl draws from each label's train rows left after the train draw."""
    rng = np.random.default_rng(7)
    labels = random_labels(rng, n_classes=12, max_per_class=30)
    splits = np.where(rng.random(labels.size) < 0.7, 0, 2).astype(np.int8)
    picked = fewshot.sample_fewshot(labels, splits, 16, 4, seed=5, val_from_train=True)

    random.seed(5)
    train_items = [Datum(str(row), int(labels[row])) for row in np.flatnonzero(splits == 0)]
    expected_train = dassl_generate_fewshot_dataset(train_items, num_shots=16)
    taken = {item.impath for item in expected_train}
    left = [item for item in train_items if item.impath not in taken]
    expected_val = dassl_generate_fewshot_dataset(left, num_shots=4)

    assert picked.train.tolist() == [int(item.impath) for item in expected_train]
    assert picked.val.tolist() == [int(item.impath) for item in expected_val]
    assert not set(picked.train.tolist()) & set(picked.val.tolist())
    assert np.all(splits[picked.val] == 0)
    assert picked.val.size > 0


@pytest.mark.parametrize("n_classes", [1, 2, 5, 10, 37, 47, 101])
def test_base_novel_relabelling_matches_coop(n_classes):
    is_novel, subset_label = fewshot.base_novel(n_classes)
    items = [Datum(str(label), label) for label in range(n_classes)]
    (base,) = coop_subsample_classes(items, subsample="base")
    (novel,) = coop_subsample_classes(items, subsample="new")
    assert [int(item.impath) for item in base] == np.flatnonzero(~is_novel).tolist()
    assert [int(item.impath) for item in novel] == np.flatnonzero(is_novel).tolist()
    assert [item.label for item in base] == subset_label[~is_novel].tolist()
    assert [item.label for item in novel] == subset_label[is_novel].tolist()


def test_prepare_fewshot_tables_match_coop_end_to_end(tmp_path, monkeypatch):
    """Through the CLI: each seed's table holds CoOp's picks (train, then val), base/novel as CoOp splits them."""
    monkeypatch.chdir(tmp_path)
    make_fake_dataset("data", "oxford_pets", n_classes=7, per_class=6, seed=4)
    params = write_params("params.yaml", root="data", datasets=["oxford_pets"], seeds=[1, 2], shots=4, workers=1)
    result = CliRunner().invoke(app, ["prepare", "--dataset", "oxford_pets", "--out", "out", "--params", str(params)])
    assert result.exit_code == 0, result.output

    split = json.loads((tmp_path / "data/oxford_pets/split_zhou_OxfordPets.json").read_text())
    image_dir = os.path.join("data", "oxford_pets", "images")
    datums = {name: [Datum(os.path.join(image_dir, p), y, c) for p, y, c in split[name]] for name in split}
    manifest = read_manifest("out")
    for seed in (1, 2):
        table = read_fewshot(f"out/fewshot-seed{seed}.parquet")
        train, val = coop_fewshot(datums["train"], datums["val"], shots=4, seed=seed)
        expected = [("train", d.impath) for d in train] + [("val", d.impath) for d in val]
        assert list(zip(table["fewshot_split"].to_pylist(), table["path"].to_pylist())) == expected
        assert table["path"].to_pylist() == manifest["path"].take(table["manifest_row"]).to_pylist()
        for subset, coop_name in (("base", "base"), ("novel", "new")):
            base_train, base_val = coop_subsample_classes(train, val, subsample=coop_name)
            rows = table.filter(np.array(table["subset"].to_pylist()) == subset)
            assert rows["subset_label"].to_pylist() == [d.label for d in base_train + base_val]


def test_prepare_writes_dassls_draw_for_every_shot_count_of_study_few_shot(tmp_path, monkeypatch):
    """study.few_shot: one table per K and seed, CoOp's picks with DATASET.NUM_SHOTS K (shot_K-seed_S.pkl): the draw
    depends on K, so a 2-shot table is not the first 2 shots of the 4-shot one; data.shots' tables stay as they were."""
    import yaml

    monkeypatch.chdir(tmp_path)
    make_fake_dataset("data", "oxford_pets", n_classes=7, per_class=6, seed=4)
    params = write_params("params.yaml", root="data", datasets=["oxford_pets"], seeds=[1, 2], shots=4, workers=1)
    raw = yaml.safe_load(params.read_text())
    raw["study"]["few_shot"] = {"datasets": ["oxford_pets"], "shots": [1, 2, 4]}
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    result = CliRunner().invoke(app, ["prepare", "--dataset", "oxford_pets", "--out", "out", "--params", str(params)])
    assert result.exit_code == 0, result.output

    split = json.loads((tmp_path / "data/oxford_pets/split_zhou_OxfordPets.json").read_text())
    image_dir = os.path.join("data", "oxford_pets", "images")
    datums = {name: [Datum(os.path.join(image_dir, p), y, c) for p, y, c in split[name]] for name in split}
    for seed in (1, 2):
        for shots in (1, 2, 4):
            table = read_fewshot(f"out/fewshot-shots{shots}-seed{seed}.parquet")
            train, val = coop_fewshot(datums["train"], datums["val"], shots=shots, seed=seed)
            expected = [("train", d.impath) for d in train] + [("val", d.impath) for d in val]
            assert list(zip(table["fewshot_split"].to_pylist(), table["path"].to_pylist())) == expected
        assert read_fewshot(f"out/fewshot-shots4-seed{seed}.parquet") == read_fewshot(f"out/fewshot-seed{seed}.parquet")
    two, four = (read_fewshot(f"out/fewshot-shots{k}-seed1.parquet") for k in (2, 4))
    firsts = [path for label in range(7) for path in
              [p for p, y, s in zip(four["path"].to_pylist(), four["label"].to_pylist(), four["fewshot_split"].to_pylist())
               if y == label and s == "train"][:2]]
    assert sorted(firsts) != sorted(p for p, s in zip(two["path"].to_pylist(), two["fewshot_split"].to_pylist())
                                    if s == "train")
    raw["study"]["few_shot"] = None  # off: no per-K table
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    assert CliRunner().invoke(app, ["prepare", "--dataset", "oxford_pets", "--out", "out", "--params",
                                    str(params)]).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "out").glob("fewshot-*")) == ["fewshot-seed1.parquet",
                                                                             "fewshot-seed2.parquet"]
