"""`dear train`: each method's run (zero-shot to DeAR, MMRL++ and TAC), resume after SIGKILL, NaN stop, full disk, bad input."""

import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pyarrow.parquet as pq
import pytest
import torch
import yaml
from typer.testing import CliRunner

from dear.cli import app
from dear.errors import DearError
from dear.config.params import load_params
from dear.stages import train as stage
from dear.train import checkpoint as ckpt_module
from dear.train import trainer
from dear.train.data import Schedule, ShotImages, training_shots, train_transform
from tests import fake_run


def stream_logits(model, images, classnames):
    """[B, S+1, C] of a method's model on pixels (its frozen prefix, its streams, the class list's features)."""
    return model.logits(model.encode(model.image_prefix(images)), classnames)

N_STEPS = 8  # 16 base shots, batch 4, 2 epochs


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    sha = fake_run.backbone(root / "backbone")
    fake_run.fewshot(root / "fewshot.parquet", root / "images")
    fake_run.roles(root / "roles.parquet", sha)
    fake_run.params_file(root / "params.yaml")
    return SimpleNamespace(root=root, sha=sha, backbone=root / "backbone", fewshot=root / "fewshot.parquet",
                           roles=root / "roles.parquet", params=root / "params.yaml")


def train(world, out: Path, method="dear", params: Path | None = None, roles: Path | None = None, ck: Path | None = None):
    inputs = stage.Inputs(method=method, dataset="toy", seed=1, backbone=world.backbone, fewshot=world.fewshot,
                          roles=roles or world.roles)
    stage.run(load_params(params or world.params), inputs, stage.Outputs(folder=out, checkpoint=ck or out.parent / f"{out.name}.ckpt"))
    return out


@pytest.fixture(scope="module")
def reference(world, tmp_path_factory):
    """An uninterrupted `dear` run: the bytes every resumed run must reproduce."""
    return train(world, tmp_path_factory.mktemp("reference") / "run")


@pytest.mark.parametrize("method,streams,steps", [("zeroshot", 1, 0), ("coop", 1, N_STEPS), ("mmrl", 2, N_STEPS),
                                                   ("mmrlpp", 2, N_STEPS), ("tac", 1, N_STEPS),
                                                   ("dear_nomask", 6, N_STEPS)])
def test_every_method_trains_and_loads(world, tmp_path, method, streams, steps):
    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained

    params = tmp_path / "params.yaml"  # TAC's prompt depths as the tiny backbone holds them (configs/smoke.yaml's)
    raw = yaml.safe_load(world.params.read_text())
    fake_run.tiny_depths(raw["train"])
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = train(world, tmp_path / "run", method=method, params=params)
    log = pq.read_table(out / "train_log.parquet")
    model = load_trained(out / "model.pt", load_backbone(world.backbone), None, load_params(params))
    assert log.num_rows == steps and log.column_names == stage.train_log_schema(type(model).TERMS).names
    assert log["step"].to_pylist() == list(range(steps))
    with torch.no_grad():
        logits = stream_logits(model, torch.randn(2, 3, 32, 32), fake_run.CLASSNAMES)
    assert logits.shape == (2, streams, len(fake_run.CLASSNAMES)) and model.alpha.shape == (streams,)
    assert not (tmp_path / "run.ckpt").exists()  # removed once the outputs exist


def test_dear_log_and_model(world, reference):
    log = pq.read_table(reference / "train_log.parquet").to_pylist()
    assert [row["step"] for row in log] == list(range(N_STEPS)) and [row["epoch"] for row in log] == [0] * 4 + [1] * 4
    assert [row["lr"] for row in log[:4]] == [1.0e-5] * 4 and log[4]["lr"] == pytest.approx(1.0e-3)
    assert log[0]["alpha"] == pytest.approx([0.7] + [0.06] * 5)
    # MMRL's objective: 0.7 CE(CLS) + 0.3 CE(attribute streams) + reg_weight (1.0) x both regularizers
    assert all(row["loss"] == pytest.approx(0.7 * row["loss_cls"] + 0.3 * row["loss_attr"] + row["loss_img"]
                                            + row["loss_txt"]) for row in log)
    assert all(0.0 <= row["accuracy"] <= 100.0 for row in log)
    from dear.methods.trained import read_trained

    payload = read_trained(reference / "model.pt")
    assert payload["backbone_sha256"] == world.sha and payload["method"] == "dear"
    assert payload["recipe"]["settings"]["alpha"]["value"] == 0.7  # the resolved recipe travels with the model
    assert "clip" not in " ".join(payload["state"])  # no frozen weight in model.pt


def test_default_checkpoint_is_one_per_output_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert stage.default_checkpoint(Path("runs/dear/ds/seed1")) == Path("checkpoints/runs/dear/ds/seed1/ckpt.pt")
    assert stage.default_checkpoint(Path("transfer/dear/seed1")) == Path("checkpoints/transfer/dear/seed1/ckpt.pt")
    outside = stage.default_checkpoint(Path("/elsewhere/run"))
    assert outside.parts[0] == "checkpoints" and outside.parts[1].startswith("outside-")
    # another config's checkpoints stay under its own output root
    rooted = stage.default_checkpoint(Path("paper/runs/dear/ds/train/seed1"), "paper")
    assert rooted == Path("paper/checkpoints/runs/dear/ds/train/seed1/ckpt.pt")


def test_warmup_then_a_cosine_stepped_per_epoch():
    """Dassl's ConstantWarmupScheduler over CosineAnnealingLR(max_epoch), stepped once per epoch."""
    factor = trainer.EpochCosine(steps_per_epoch=3, epochs=4, warmup_epochs=1, warmup_factor=0.01)
    per_step = [factor(s) for s in range(12)]
    assert per_step[:3] == [0.01] * 3
    expected = [0.5 * (1 + math.cos(math.pi * k / 4)) for k in range(3)]  # epochs 1, 2, 3
    assert per_step[3:] == pytest.approx([value for value in expected for _ in range(3)])
    no_warmup = trainer.EpochCosine(steps_per_epoch=2, epochs=2, warmup_epochs=0, warmup_factor=0.01)
    assert [no_warmup(s) for s in range(4)] == pytest.approx([1.0, 1.0, 0.5, 0.5])


def test_tokens_fade_in_over_the_first_epoch_and_an_untrained_model_is_zero_shot(world, reference, tmp_path):
    from dear.model.clip import load_backbone
    from dear.methods.trained import load_trained, read_trained

    assert [trainer.fade_at(step, 4) for step in range(6)] == [0.0, 0.25, 0.5, 0.75, 1.0, 1.0]
    assert trainer.fade_at(0, 0) == 1.0  # fade_in_epochs 0: MMRL's full weight from the first step
    assert float(read_trained(reference / "model.pt")["state"]["fade"]) == 1.0  # 2 epochs > fade_in_epochs 1
    untrained = load_params(world.params, ("train.recipes.dear.epochs=0",))
    out = tmp_path / "untrained"
    stage.run(untrained, stage.Inputs(method="dear", dataset="toy", seed=1, backbone=world.backbone,
                                      fewshot=world.fewshot, roles=world.roles), stage.Outputs(out, tmp_path / "ckpt.pt"))
    backbone = load_backbone(world.backbone)
    model = load_trained(out / "model.pt", backbone, world.roles, untrained)
    images = torch.randn(3, 3, 32, 32)
    with torch.no_grad():
        features = model.encode(model.image_prefix(images))  # [3, 6, E]
        text = model.text_features(fake_run.CLASSNAMES)
    frozen = torch.nn.functional.normalize(backbone.model.encode_image(images), dim=-1)
    torch.testing.assert_close(features, frozen[:, None].expand_as(features), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(text, model.frozen_text(fake_run.CLASSNAMES), rtol=1e-5, atol=1e-6)


def test_augmentation_depends_only_on_seed_epoch_and_slot(world):
    params = load_params(world.params)
    shots = training_shots(world.fewshot)
    schedule = Schedule(n=len(shots.paths), batch_size=4, epochs=2, seed=1)
    recipe = params.train.recipe("dear", "toy", "base_to_novel")
    images = ShotImages(shots, schedule, train_transform(recipe, 32, (0.5,) * 3, (0.5,) * 3))
    first, again = images[(1, 3)], images[(1, 3)]
    torch.manual_seed(123)  # the global RNG plays no part
    torch.testing.assert_close(first[0], images[(1, 3)][0])
    assert first[1] == again[1]
    assert sorted(schedule.order(0)) == list(range(16)) and schedule.order(0) != schedule.order(1)
    assert [len(b) for b in schedule.batches(5)] == [4, 4, 4]


def test_nan_loss_stops_with_the_step_keeps_the_checkpoint_and_resume_is_exact(world, reference, tmp_path, monkeypatch):
    calls = []

    def poisoned(*args, **kwargs):
        result = step_of_batch(*args, **kwargs)
        calls.append(1)
        if len(calls) == 6:  # step 5
            result.total = result.total * float("nan")
        return result

    step_of_batch = trainer.step_of_batch
    monkeypatch.setattr(trainer, "step_of_batch", poisoned)
    with pytest.raises(DearError, match=r"step 5: the loss is not finite.*train.recipes.*checkpoint"):
        train(world, tmp_path / "run")
    assert not (tmp_path / "run" / "model.pt").exists()
    assert torch.load(tmp_path / "run.ckpt", weights_only=True)["step"] == 4
    monkeypatch.setattr(trainer, "step_of_batch", step_of_batch)
    train(world, tmp_path / "run")
    assert (tmp_path / "run" / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()
    assert pq.read_table(tmp_path / "run" / "train_log.parquet")["step"].to_pylist() == list(range(N_STEPS))


def test_loader_workers_do_not_change_the_result(world, reference, tmp_path):
    from dear.methods.trained import read_trained

    params = fake_run.params_file(tmp_path / "params.yaml", compute={"workers": 2})
    state = read_trained(train(world, tmp_path / "run", params=params) / "model.pt")["state"]
    expected = read_trained(reference / "model.pt")["state"]
    assert state.keys() == expected.keys() and all(torch.equal(state[k], expected[k]) for k in state)


def test_checkpoint_of_other_params_is_not_resumed(world, reference, tmp_path):
    stale = {"params_hash": "made-with-other-params", "step": 6, "log": []}
    torch.save(stale, tmp_path / "run.ckpt")
    (tmp_path / ".run.ckpt.abc123.tmp").write_bytes(b"half a checkpoint, killed mid-write")
    train(world, tmp_path / "run")
    assert (tmp_path / "run" / "model.pt").read_bytes() == (reference / "model.pt").read_bytes()
    assert not (tmp_path / ".run.ckpt.abc123.tmp").exists()
    other = fake_run.params_file(tmp_path / "params.yaml", recipe={"lr": 2.0e-3})
    train(world, tmp_path / "other", params=other)
    assert (tmp_path / "other" / "model.pt").read_bytes() != (reference / "model.pt").read_bytes()


def test_full_disk_on_checkpoint_write_keeps_the_previous_checkpoint(world, tmp_path, monkeypatch):
    monkeypatch.setattr(ckpt_module.torch, "save", fake_run.save_that_fills_the_disk(torch.save))
    with pytest.raises(DearError, match="disk is full.*previous checkpoint is kept"):
        train(world, tmp_path / "run")
    monkeypatch.undo()
    assert torch.load(tmp_path / "run.ckpt", weights_only=True)["step"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.ckpt"]  # no temporary file, no outputs


def dear_train(world, out: Path, ck: Path) -> list[str]:
    script = Path(sys.executable).with_name("dear")
    command = [str(script)] if script.exists() else [sys.executable, "-m", "dear.cli"]
    return command + ["train", "--params", str(world.params), "--method", "dear", "--dataset", "toy", "--seed", "1",
                      "--backbone", str(world.backbone), "--fewshot", str(world.fewshot), "--roles", str(world.roles),
                      "--out", str(out), "--checkpoint", str(ck)]


@pytest.mark.slow
@pytest.mark.xdist_group("train-kill")
def test_sigkill_then_rerun_gives_the_same_bytes(world, tmp_path):
    """A real `dear train` process killed after a checkpoint resumes to the bytes of an uninterrupted run.

    Both runs are subprocesses with the same environment (CPU float sums depend on the thread
    count), started together so that the uninterrupted one costs no extra wall time.
    """
    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"epochs": 30}, train={"checkpoint_every": 3})
    long_world = SimpleNamespace(**{**vars(world), "params": params})
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    logs = [open(tmp_path / name, "w+") for name in ("reference.log", "killed.log")]  # files: a full pipe would block
    reference = subprocess.Popen(dear_train(long_world, tmp_path / "reference", tmp_path / "reference.ckpt"), env=env,
                                 stdout=subprocess.DEVNULL, stderr=logs[0])
    ck, out = tmp_path / "ckpt.pt", tmp_path / "killed"
    process = subprocess.Popen(dear_train(long_world, out, ck), env=env, stdout=subprocess.DEVNULL, stderr=logs[1])
    deadline = time.monotonic() + 120
    while not ck.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    running = process.poll() is None
    process.send_signal(signal.SIGKILL)
    process.wait()
    assert running and ck.exists(), f"the run ended before it could be killed: {(tmp_path / 'killed.log').read_text()[-2000:]}"
    assert not (out / "model.pt").exists()
    resumed = subprocess.run(dear_train(long_world, out, ck), env=env, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "resuming at step" in resumed.stderr
    assert reference.wait(timeout=300) == 0, (tmp_path / "reference.log").read_text()[-2000:]
    for log in logs:
        log.close()
    assert (out / "model.pt").read_bytes() == (tmp_path / "reference" / "model.pt").read_bytes()
    steps = pq.read_table(out / "train_log.parquet")["step"].to_pylist()
    assert steps == list(range(4 * 30))
    assert not ck.exists()


def invoke(world, tmp_path, *extra, method="dear", fewshot=None):
    args = ["train", "--params", str(world.params), "--method", method, "--dataset", "toy", "--seed", "1",
            "--backbone", str(world.backbone), "--fewshot", str(fewshot or world.fewshot), "--out", str(tmp_path / "out"),
            "--checkpoint", str(tmp_path / "ck" / "ckpt.pt"), *extra]
    return CliRunner().invoke(app, args)


def assert_clean_failure(result, tmp_path: Path, *phrases: str) -> None:
    """Exit 1, one `error:` line naming what is wrong, no traceback, nothing written."""
    assert result.exit_code == 1, result.output
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    for phrase in phrases:
        assert phrase in errors[0], errors[0]
    assert not (tmp_path / "out").exists() and not (tmp_path / "ck").exists()


def test_roles_of_another_backbone_are_refused(world, tmp_path):
    other = fake_run.roles(tmp_path / "roles.parquet", "0" * 64)
    assert_clean_failure(invoke(world, tmp_path, "--roles", str(other)), tmp_path, "roles.parquet", "another backbone")


def test_fewshot_table_missing_a_base_class_is_refused(world, tmp_path):
    fewshot = fake_run.fewshot(tmp_path / "fewshot.parquet", tmp_path / "images", drop_base_label=1)
    result = invoke(world, tmp_path, "--roles", str(world.roles), fewshot=fewshot)
    assert_clean_failure(result, tmp_path, "fewshot.parquet", "base classes [1]")


def test_dear_without_roles_unknown_method_and_classes_are_refused(world, tmp_path):
    assert_clean_failure(invoke(world, tmp_path), tmp_path, "--roles")
    assert_clean_failure(invoke(world, tmp_path, method="cocoo"), tmp_path, "--method", "cocoo")
    assert_clean_failure(invoke(world, tmp_path, "--classes", "novel", method="coop"), tmp_path, "--classes", "novel")


def test_classes_all_trains_on_every_class(world, tmp_path):
    result = invoke(world, tmp_path, "--classes", "all", method="coop")
    assert result.exit_code == 0, result.output
    from dear.methods.trained import read_trained

    payload = read_trained(tmp_path / "out" / "model.pt")
    assert payload["classnames"] == fake_run.CLASSNAMES and payload["classes"] == "all"
    assert pq.read_table(tmp_path / "out" / "train_log.parquet").num_rows == 2 * 8  # 32 shots, batch 4, 2 epochs


def test_template_without_a_slot_is_refused(world, tmp_path):
    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"template": "a photo"})
    result = CliRunner().invoke(app, ["train", "--params", str(params), "--method", "mmrl", "--dataset", "toy",
                                      "--seed", "1", "--backbone", str(world.backbone), "--fewshot", str(world.fewshot),
                                      "--out", str(tmp_path / "out"), "--checkpoint", str(tmp_path / "ck" / "c.pt")])
    assert_clean_failure(result, tmp_path, "template")


@pytest.mark.gpu
def test_cuda_bf16_training_runs(world, tmp_path):
    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"precision": "bf16"}, compute={"device": "cuda"})
    out = train(world, tmp_path / "run", params=params)
    log = pq.read_table(out / "train_log.parquet").to_pylist()
    assert len(log) == N_STEPS and all(row["loss"] == row["loss"] for row in log)


def invoke_seeds(world, tmp_path, *seeds, fewshot="fewshot-seed{seed}.parquet", out="out/seed{seed}"):
    """`dear train` over several seeds in one process: {seed} in --fewshot and --out."""
    for seed in (1, 2):
        link = world.root / f"fewshot-seed{seed}.parquet"
        if not link.exists():
            link.symlink_to(world.fewshot)
    args = ["train", "--params", str(world.params), "--method", "coop", "--dataset", "toy", "--backbone",
            str(world.backbone), "--fewshot", str(world.root / fewshot), "--out", str(tmp_path / out)]
    return CliRunner().invoke(app, args + [f"--seed={seed}" for seed in seeds])


def test_one_job_trains_every_seed_like_separate_runs(world, tmp_path):
    result = invoke_seeds(world, tmp_path, 1, 2)
    assert result.exit_code == 0, result.output
    for seed in (1, 2):
        alone = CliRunner().invoke(app, ["train", "--params", str(world.params), "--method", "coop", "--dataset", "toy",
                                         "--seed", str(seed), "--backbone", str(world.backbone),
                                         "--fewshot", str(world.fewshot), "--out", str(tmp_path / f"alone{seed}")])
        assert alone.exit_code == 0, alone.output
        together = pq.read_table(tmp_path / f"out/seed{seed}/train_log.parquet")["loss"].to_pylist()
        assert together == pq.read_table(tmp_path / f"alone{seed}/train_log.parquet")["loss"].to_pylist()
    seed1, seed2 = (pq.read_table(tmp_path / f"out/seed{s}/train_log.parquet")["loss"].to_pylist() for s in (1, 2))
    assert seed1 != seed2  # each run got its own seed


def test_a_missing_seed_input_fails_before_any_seed_runs(world, tmp_path):
    result = invoke_seeds(world, tmp_path, 1, 3)
    assert_clean_failure(result, tmp_path, "fewshot-seed3.parquet", "seed 3")


def test_several_seeds_need_the_placeholder_in_every_output(world, tmp_path):
    assert_clean_failure(invoke_seeds(world, tmp_path, 1, 2, out="out"), tmp_path, "--out", "{seed}")
    assert_clean_failure(invoke_seeds(world, tmp_path, 1, 2, fewshot="fewshot.parquet", out="out"), tmp_path,
                         "2 seeds", "{seed}")


def test_a_view_bank_computes_each_views_frozen_blocks_once_and_reuses_them_exactly(world, tmp_path, monkeypatch):
    """views: 2 over 4 epochs: two view computations; recomputing them every epoch gives the same bytes."""
    from dear.train import views

    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"epochs": 4, "views": 2})
    computed = []
    original = views.ViewCache._view

    def counting(self, v):
        if v not in self._views:
            computed.append(v)
        return original(self, v)

    monkeypatch.setattr(views.ViewCache, "_view", counting)
    cached = train(world, tmp_path / "cached", method="dear", params=params)
    assert computed == [0, 1]

    def recomputing(self, v):
        self._views.clear()
        return original(self, v)

    monkeypatch.setattr(views.ViewCache, "_view", recomputing)
    again = train(world, tmp_path / "again", method="dear", params=params)
    assert (again / "model.pt").read_bytes() == (cached / "model.pt").read_bytes()
    log = pq.read_table(cached / "train_log.parquet").to_pylist()
    assert len(log) == 4 * 4 and all(math.isfinite(row["loss"]) for row in log)


def test_coop_trains_from_cached_image_features(world, tmp_path):
    """CoOp's image side is wholly frozen: its view bank holds the final CLS states."""
    params = fake_run.params_file(tmp_path / "params.yaml", recipe={"views": 1})
    out = train(world, tmp_path / "coop", method="coop", params=params)
    assert pq.read_table(out / "train_log.parquet").num_rows == N_STEPS


def test_cpu_seeded_draws_what_manual_seed_draws_and_restores_the_state():
    """The shots' augmentations are seeded with `cpu_seeded` (cheaper than torch.manual_seed): the same draws."""
    from dear.train.data import cpu_seeded

    torch.manual_seed(5)
    expected_after = (torch.rand(3), torch.manual_seed(5))[0]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(123)
        reference = torch.rand(4)
    with cpu_seeded(123):
        drawn = torch.rand(4)
    assert torch.equal(drawn, reference)
    assert torch.equal(torch.rand(3), expected_after)  # the generator continues as if nothing happened


def test_k_views_of_each_image_and_the_unaugmented_image(world):
    """Dassl's K_TRANSFORMS and RETURN_IMG0 (TAC's loader): view 0 is the one-view item, the others drawn apart;
    img0 is the image resized to S x S; the step's rows are view-major and the frozen feature is img0's, repeated."""
    from dear.compute import device as devices
    from dear.train.data import Views, unaugmented_transform

    shots = training_shots(world.fewshot)
    schedule = Schedule(n=len(shots.paths), batch_size=4, epochs=2, seed=1)
    augment = train_transform(SimpleNamespace(crop_scale=[0.3, 1.0], flip_prob=0.5, interpolation="bicubic"), 32,
                              (0.5,) * 3, (0.5,) * 3)
    img0 = unaugmented_transform("bicubic", 32, (0.5,) * 3, (0.5,) * 3)
    one, three = ShotImages(shots, schedule, augment), ShotImages(shots, schedule, augment, 3, img0)
    item, label = three[(1, 2)]
    assert item["views"].shape == (3, 3, 32, 32) and label == one[(1, 2)][1]
    torch.testing.assert_close(item["views"][0], one[(1, 2)][0])  # one view: what it was
    assert not torch.equal(item["views"][1], item["views"][2])
    from dear.data.manifest import read_rgb
    torch.testing.assert_close(item["img0"], img0(read_rgb(shots.paths[schedule.order(1)[2]])))

    batch = Views.of({"views": torch.stack([item["views"], three[(1, 3)][0]["views"]]),
                      "img0": torch.stack([item["img0"], three[(1, 3)][0]["img0"]])})
    assert batch.k == 3 and batch.pixels.shape == (6, 3, 32, 32)
    torch.testing.assert_close(batch.pixels[1], three[(1, 3)][0]["views"][0])  # row v B + i: view v of image i
    torch.testing.assert_close(batch.pixels[2], item["views"][1])
    seen = {}

    class Spy:
        needs_frozen_image = True

        def image_prefix(self, pixels):
            return pixels.flatten(1)  # [n, 3 S S]

        def frozen_image(self, prefix):
            return prefix[:, :4]  # [n, 4]

        def step(self, prefix, labels, classnames, frozen):
            seen.update(prefix=prefix, frozen=frozen)
            return "step"

    trainer.step_of_batch(Spy(), batch, torch.tensor([0, 1] * 3), ["a", "b"], devices.Precision("fp32", torch.device("cpu")))
    assert seen["prefix"].shape == (6, 3 * 32 * 32)
    torch.testing.assert_close(seen["frozen"], batch.img0.flatten(1)[:, :4].repeat(3, 1))


def test_tac_trains_on_k_views_with_the_unaugmented_images_frozen_feature(world, tmp_path):
    """Their 4 views of every image and img0 through `dear train`: K x B rows a step, the same steps; they exclude
    the demo's fixed view bank (`views`), in one line."""
    raw = yaml.safe_load(world.params.read_text())
    fake_run.tiny_depths(raw["train"])
    raw["train"]["recipes"]["tac"].update(k_transforms=2, return_img0=True, views=None)
    params = tmp_path / "params.yaml"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = train(world, tmp_path / "run", method="tac", params=params)
    log = pq.read_table(out / "train_log.parquet").to_pylist()
    assert len(log) == N_STEPS and all(math.isfinite(row["loss"]) for row in log)
    raw["train"]["recipes"]["tac"]["views"] = 1
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    with pytest.raises(DearError, match="k_transforms 2 / return_img0 True .* exclude each other"):
        train(world, tmp_path / "bank", method="tac", params=params)
