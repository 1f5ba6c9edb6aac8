"""Outputs appear whole or not at all, are checked before the work, and nothing silently wrong gets through.

The mechanism (`dear.runtime.io.output_folder`, `check_outputs`) on its own, then what
it is for: prepare's folder never mixes runs, a read-only output is found
before training, the few-shot picks are decoded, fuse never keeps a worse α.
"""

from __future__ import annotations

import errno
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
from typer.testing import CliRunner

from dear.runtime import io
from dear.cli import app
from dear.errors import DearError
from dear.runtime.io import DIGESTS
from fake_coop import make_fake_dataset, write_params
from tests import fake_run
from tests.bad_inputs import read_only

OWNS = ("a.txt", "part-*.txt")


def write_folder(folder: Path, files: dict[str, str]) -> None:
    with io.output_folder(folder, OWNS) as staging:
        for name, text in files.items():
            io.write_text(staging / name, text)


def contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


@pytest.mark.parametrize("exchange", [True, False], ids=["renameat2", "two-renames"])
def test_output_folder_replaces_the_old_one_whole(tmp_path, monkeypatch, exchange):
    if not exchange:  # a filesystem without RENAME_EXCHANGE
        monkeypatch.setattr(io, "_exchange", lambda a, b: False)
    out = tmp_path / "out"
    write_folder(out, {"a.txt": "old", "part-7.txt": "an earlier run's part"})
    (out / ".gitignore").write_text("/a.txt\n")  # DVC's, kept
    write_folder(out, {"a.txt": "new", "part-1.txt": "new part"})
    assert contents(out) == {".gitignore": "/a.txt\n", "a.txt": "new", "part-1.txt": "new part"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # no staging or old folder left
    assert out.stat().st_mode & 0o777 == 0o777 & ~io._UMASK


def test_an_output_folder_that_is_a_link_is_replaced_where_it_points(tmp_path):
    scratch, link = tmp_path / "scratch" / "out", tmp_path / "out"
    write_folder(scratch, {"a.txt": "old"})
    link.symlink_to(scratch)
    write_folder(link, {"a.txt": "new"})
    assert link.is_symlink() and contents(scratch) == {"a.txt": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out", "scratch"]


def test_a_failure_while_writing_keeps_the_old_folder_untouched(tmp_path):
    out = tmp_path / "out"
    write_folder(out, {"a.txt": "old", "part-1.txt": "old part"})
    with pytest.raises(RuntimeError):
        with io.output_folder(out, OWNS) as staging:
            io.write_text(staging / "part-1.txt", "new part")
            raise RuntimeError("killed halfway")
    assert contents(out) == {"a.txt": "old", "part-1.txt": "old part"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_full_disk_while_writing_is_one_line_naming_the_file_and_keeps_the_old_folder(tmp_path):
    out = tmp_path / "out"
    write_folder(out, {"a.txt": "old"})
    with pytest.raises(DearError, match=r"out: writing failed \(the disk is full: .*out/a.txt\); free space.*kept"):
        with io.output_folder(out, OWNS) as staging:
            raise OSError(errno.ENOSPC, "No space left on device", str(staging / "a.txt"))
    assert contents(out) == {"a.txt": "old"}


def test_a_folder_with_files_the_stage_does_not_write_is_refused_not_deleted(tmp_path):
    out = tmp_path / "project"
    out.mkdir()
    (out / "thesis.tex").write_text("a year of work")
    with pytest.raises(DearError, match="holds 'thesis.tex'.*move them away"):
        write_folder(out, {"a.txt": "new"})
    assert contents(out) == {"thesis.tex": "a year of work"}


def test_leftovers_of_a_killed_run_are_removed_by_the_next(tmp_path):
    out = tmp_path / "out"
    (tmp_path / ".out.abc123.tmp").mkdir()  # a staging folder of a killed run
    (tmp_path / ".out.abc123.tmp" / "a.txt").write_text("half")
    (tmp_path / ".fusion.json.x1.tmp").write_text("half a file")
    write_folder(out, {"a.txt": "new"})
    io.write_text(tmp_path / "fusion.json", "{}")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fusion.json", "out"]


def test_output_checks_name_what_is_in_the_way_before_any_work(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(DearError, match="exists and is not a folder"):
        io.check_output_folder(tmp_path / "file", OWNS)
    with pytest.raises(DearError, match="cannot be created, .*file is a file, not a folder"):
        io.check_output_file(tmp_path / "file" / "deeper" / "fusion.json")
    with pytest.raises(DearError, match="is a folder, not a file"):
        io.check_output_file(tmp_path)
    with read_only(tmp_path / "ro"):
        with pytest.raises(DearError, match=r"ro/out: cannot write in .*ro \(not writable\)"):
            io.check_output_folder(tmp_path / "ro" / "out", OWNS)
    assert not (tmp_path / "ro" / "out").exists() and not (tmp_path / "file" / "deeper").exists()


# --- what it is for -------------------------------------------------------------------------------

def prepare(root: Path, **data):
    params = write_params(root / "params.yaml", root=root / "raw", datasets=[data.pop("dataset", "world_objects")],
                          workers=1, **data)
    name = __import__("yaml").safe_load(params.read_text())["data"]["datasets"][0]
    return CliRunner().invoke(app, ["prepare", "--dataset", name, "--out", str(root / "out"), "--params", str(params)])


def test_prepare_rerun_with_other_seeds_leaves_no_table_of_the_old_seeds(tmp_path):
    make_fake_dataset(tmp_path / "raw", "world_objects", n_classes=4, per_class=3)
    assert prepare(tmp_path, seeds=[1, 7]).exit_code == 0
    assert prepare(tmp_path, seeds=[1, 2]).exit_code == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.name != DIGESTS) == [  # .digest: dear/pipeline/digest.py
        "excluded.parquet", "fewshot-seed1.parquet", "fewshot-seed2.parquet", "manifest.parquet"]


def test_a_truncated_pick_is_dropped_with_skip_bad_listed_and_replaced_by_another_draw(tmp_path):
    make_fake_dataset(tmp_path / "raw", "imagenet", n_classes=4, per_class=4)
    bad = sorted((tmp_path / "raw/imagenet/images/train").rglob("*.jpg"))[0]
    bad.write_bytes(bad.read_bytes()[:-5])  # the header survives: data.verify: exists lets it through
    result = prepare(tmp_path, dataset="imagenet", shots=4, val_shots=1, seeds=[1, 2], skip_bad=True)
    assert result.exit_code == 0, result.output
    excluded = pq.read_table(tmp_path / "out/excluded.parquet").to_pylist()
    assert [row["path"] for row in excluded] == [str(bad)] and "truncated" in excluded[0]["reason"]
    for seed in (1, 2):
        table = pq.read_table(tmp_path / f"out/fewshot-seed{seed}.parquet").to_pylist()
        assert str(bad) not in [row["path"] for row in table]
        shots = [row["label"] for row in table if row["fewshot_split"] == "train"]
        assert [shots.count(label) for label in range(4)] == [3, 4, 4, 4]  # class 0 keeps its 3 good images


def test_a_read_only_output_is_found_before_training(tmp_path, monkeypatch):
    from dear.train import trainer

    root = tmp_path / "inputs"
    sha = fake_run.backbone(root / "backbone")
    fake_run.fewshot(root / "fewshot.parquet", root / "images")
    fake_run.roles(root / "roles.parquet", sha)
    params = fake_run.params_file(root / "params.yaml")
    monkeypatch.setattr(trainer, "fit", lambda run: pytest.fail("training started before the output was checked"))
    with read_only(tmp_path / "ro"):
        result = CliRunner().invoke(app, [
            "train", "--params", str(params), "--method", "dear", "--dataset", "toy", "--backbone", str(root / "backbone"),
            "--fewshot", str(root / "fewshot.parquet"), "--roles", str(root / "roles.parquet"),
            "--out", str(tmp_path / "ro/seed{seed}"), "--seed", "1", "--seed", "2",
            "--checkpoint", str(tmp_path / "ck{seed}.pt")])
    assert result.exit_code == 1 and "ro/seed1: cannot write in" in result.stderr, result.output


def test_the_refit_never_lowers_validation_accuracy():
    from dear.scoring import evaluation
    from dear.config.params import Compute
    from dear.stages.fuse import choose_alpha, fit_alpha

    generator = torch.Generator().manual_seed(0)
    init = torch.tensor([0.7, 0.3])
    for _ in range(200):  # random 6-shot problems until one where L-BFGS's lower CE costs accuracy
        logits = torch.randn(6, 2, 3, generator=generator) * 5  # [N, S+1, C]
        labels = torch.randint(0, 3, (6,), generator=generator).tolist()
        refit = fit_alpha(logits, labels, init, 20)
        before = evaluation.accuracy(evaluation.fuse(logits, init), labels)
        if evaluation.accuracy(evaluation.fuse(logits, refit), labels) < before:
            break
    else:
        pytest.fail("no problem where the refit lowers accuracy")
    choice = choose_alpha(logits, labels, init, 20)
    assert torch.equal(choice.alpha, init) and not choice.refit_kept
    assert choice.after == choice.before == before and choice.refit_accuracy < before


def test_checkpoint_rng_states_survive_a_weights_only_load(tmp_path):
    import random

    import numpy as np

    from dear.train import checkpoint

    random.seed(3), np.random.seed(3), torch.manual_seed(3)
    states = checkpoint.rng_states()
    torch.save(states, tmp_path / "rng.pt")
    expected = (random.random(), np.random.rand(), torch.rand(1))
    checkpoint.set_rng_states(io.load_torch(tmp_path / "rng.pt"))
    assert (random.random(), np.random.rand(), torch.rand(1)) == expected


def test_a_worker_error_stays_one_line(tmp_path):
    from dear.scoring import evaluation
    from dear.compute.device import Precision

    images = evaluation.ImageSet(paths=[str(tmp_path / "bad.png")], labels=[0], classnames=["x"])
    (tmp_path / "bad.png").write_bytes(b"not an image")
    model = SimpleNamespace(device=torch.device("cpu"), frozen_depth=0, image_prefix=lambda pixels: pixels,
                            encode=lambda x: x)
    with pytest.raises(DearError) as raised:
        evaluation.encode_images(model, images, lambda image: torch.zeros(1), 1, 1,
                                 Precision("fp32", torch.device("cpu")), "test")
    assert str(raised.value).startswith(f"{tmp_path / 'bad.png'}: not a readable image") and "Traceback" not in str(raised.value)
