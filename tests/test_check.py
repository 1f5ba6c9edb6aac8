"""`dear check`: every problem of a params file at once, before torch or any model loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dear.check import check_file
from dear.probe import cuda_devices
from dear.cli import app
from tests import tiny_study
from tests.engines import BIN, engine_env, make_project
from tests.fake_coop import make_fake_dataset, write_params

ROOT = Path(__file__).resolve().parents[1]


def edit(path: Path, **sections) -> Path:
    """`path` with keys of some sections replaced ({section: {key: value}})."""
    raw = yaml.safe_load(path.read_text())
    for section, values in sections.items():
        raw[section].update(values)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


def test_the_demo_and_paper_configs_are_consistent(tmp_path):
    """The paper config's only problems are the ones a user must fix: where the data is, and fetching weights."""
    assert check_file(ROOT / "params.yaml")[1] == []
    found = check_file(ROOT / "configs/paper-vitb16.yaml")[1]
    assert len(found) == 2
    assert found[0].startswith("data.root: /path/to/coop-datasets not found")
    assert "weights 'openai' for ViT-B-16 are not fetched" in found[1] and "dear fetch-weights --params" in found[1]


def with_template(template: str) -> dict:
    """The demo's recipe changes with one hand-written prompt for every method that has one."""
    from tests.methods_tools import demo_recipes

    recipes = demo_recipes()
    recipes["all"]["template"] = template
    return recipes


def test_every_problem_is_listed_at_once(tmp_path):
    params = edit(write_params(tmp_path / "params.yaml", root=tmp_path / "nowhere", datasets=["oxford_pets"]),
                  data={"source": "coop"}, compute={"device": "cuda"},
                  model={"pretrained": str(tmp_path / "missing.pt")},
                  profile={"svd_rank": 900, "texts_per_head": 950, "layers": 9, "max_images": 500},
                  train={"recipes": with_template("a photo")})
    result = CliRunner().invoke(app, ["check", "--params", str(params)])
    assert result.exit_code == 1
    lines = errors(result)
    expected = ["data.root:", "model.pretrained: weights file", "compute.device: cuda", "profile.layers: asked for the last 9",
                "profile.svd_rank: rank 900 needs at least 901 images", "profile.svd_rank: rank 900 exceeds the embedding dim",
                "profile.texts_per_head: 950 picks need svd_rank >= 950", "profile.texts_per_head: 950 picks need a bank",
                "train.recipes.all.template:"]
    assert [line.split(": ", 1)[1][:len(e)] for line, e in zip(lines, expected)] == expected, lines
    assert len(lines) == len(expected) and "9 problem(s)" in result.stderr


def test_dataset_folders_and_the_profiled_split_size_are_checked(tmp_path):
    make_fake_dataset(tmp_path / "data", "oxford_pets", n_classes=4, per_class=3)
    params = edit(write_params(tmp_path / "params.yaml", root=tmp_path / "data", datasets=["oxford_pets", "dtd"]),
                  data={"source": "coop"}, profile={"svd_rank": 12, "texts_per_head": 5, "split": "train"})
    found = check_file(params)[1]
    assert len(found) == 2, found
    assert found[0].startswith(f"{tmp_path / 'data' / 'dtd'}: not found (data.datasets: dtd)")
    assert "rank 12 needs at least 13 images (mean-centring removes one direction); got 12 images (oxford_pets train)" in found[1]
    assert check_file(edit(params, data={"datasets": ["oxford_pets"]}, profile={"svd_rank": 11}))[1] == []


def test_fewer_shots_than_asked_and_more_workers_than_cpus_are_warnings(tmp_path, monkeypatch):
    """Warned, not refused: the run works, just not as the config reads (shots of the trained sets only)."""
    import dear.check

    make_fake_dataset(tmp_path / "data", "oxford_pets", n_classes=4, per_class=3)
    params = edit(write_params(tmp_path / "params.yaml", root=tmp_path / "data", datasets=["oxford_pets"], shots=16),
                  data={"source": "coop", "workers": 2}, compute={"workers": 8}, profile={"svd_rank": 8, "texts_per_head": 5})
    monkeypatch.setattr(dear.check, "available_cpus", lambda: 2)
    result = CliRunner().invoke(app, ["check", "--params", str(params)])
    assert result.exit_code == 0 and errors(result) == [], result.stderr
    warned = [line for line in result.stderr.splitlines() if line.startswith("warning: ")]
    assert warned == [
        "warning: data.shots: 16, but a class of oxford_pets has only 3 training images: it gets fewer shots "
        "(the report states the shots used); lower data.shots to compare at equal shots",
        "warning: compute.workers: 8 image-loading processes need 9 CPUs, but this machine has 2: a job never uses "
        "more CPUs than it has, so fewer start here; lower compute.workers (or keep it for nodes with more CPUs)"]
    quiet = edit(params, data={"shots": 3}, compute={"workers": 1})
    assert "warning:" not in CliRunner().invoke(app, ["check", "--params", str(quiet)]).stderr
    world = tiny_study.write(tmp_path / "tiny.yaml")  # the world's own split sizes: 4 train images per class
    assert dear.check.warnings(check_file(edit(world, data={"shots": 5}))[0], "tiny.yaml")[0].startswith(
        "data.shots: 5, but a class of world_objects has only 4 training images")


def test_all_validation_problems_are_listed(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["compute"]["device"] = "gpu"
    raw["backbone"]["lr"] = "1e-3"
    del raw["profile"]["svd_rank"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["check", "--params", str(tmp_path / "params.yaml")])
    assert result.exit_code == 1
    lines = errors(result)
    assert len(lines) == 3, lines
    assert any("compute.device" in line for line in lines) and any("write 1.0e-3" in line for line in lines)
    assert any("missing key 'profile.svd_rank'" in line for line in lines)


def test_a_fetched_tag_passes_once_recorded(tmp_path):
    from dear.model.weights_record import RECORD

    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  model={"arch": "ViT-B-16", "pretrained": "openai", "cache_dir": str(tmp_path / "cache")},
                  backbone={"sanity": {"enabled": False, "max_images_per_set": None}})
    found = check_file(params)[1]
    assert len(found) == 1 and "not fetched into" in found[0] and f"--params {params}" in found[0]
    (tmp_path / "cache").mkdir()
    (tmp_path / "weights.bin").write_bytes(b"weights")
    (tmp_path / "cache" / RECORD).write_text(json.dumps({"ViT-B-16/openai": str(tmp_path / "weights.bin")}))
    assert check_file(params)[1] == []


def test_a_stage_reports_every_problem_before_torch_is_imported(tmp_path):
    """`dear profile` with an impossible rank fails in its checks: torch never loads in that process."""
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  profile={"svd_rank": 5000, "texts_per_head": 6000})
    script = ("import sys\nfrom dear.cli import main\n"
              f"sys.argv = ['dear', 'profile', '--params', {str(params)!r}, '--manifest', 'm.parquet', '--out', 'o']\n"
              "try:\n    main()\nexcept SystemExit as done:\n    print('exit', done.code, 'torch' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=tmp_path)
    assert result.stdout.strip() == "exit 1 False", result.stdout + result.stderr
    lines = errors(result)
    assert len(lines) == 4 and all("profile.svd_rank" in line or "profile.texts_per_head" in line for line in lines)


def test_check_imports_neither_torch_nor_open_clip():
    code = ("import sys, dear.check, dear.cli\n"
            "dear.check.check_file('params.yaml')\n"
            "print(sorted(m for m in ('torch', 'open_clip', 'torchvision') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.skipif(cuda_devices() > 0, reason="a CUDA device is visible here")
def test_cuda_is_reported_missing_without_a_driver(tmp_path):
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  compute={"device": "cuda"})
    found = check_file(params)[1]
    assert len(found) == 1 and found[0].startswith("compute.device: cuda, but")
    assert check_file(edit(params, compute={"device": "auto"}))[1] == []


@pytest.mark.slow
def test_snakemake_checks_the_config_once_before_any_job(tmp_path):
    raw = tiny_study.params()
    raw["profile"].update(max_images=20, svd_rank=30, texts_per_head=5)
    project = make_project(tmp_path / "project", yaml.safe_dump(raw, sort_keys=False))

    result = subprocess.run([str(BIN / "snakemake"), "--cores", "1"], cwd=project, env=engine_env(),
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 1
    lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and "profile.svd_rank: rank 30 needs at least 31 images" in lines[0]
    assert "no job was started" in result.stderr and not (project / "world").exists()
    planned = subprocess.run([str(BIN / "snakemake"), "--cores", "1", "-n"], cwd=project, env=engine_env(),
                             capture_output=True, text=True, timeout=300)
    assert planned.returncode == 0, planned.stderr[-2000:]  # a dry run only plans: no check


def test_the_torch_free_probes_agree_with_torch_and_open_clip():
    import open_clip
    import torch

    import dear.model.clip  # noqa: F401  (registers the embedded architectures)
    from dear.probe import arch_config, torch_cuda_build

    assert torch_cuda_build() == torch.version.cuda
    for arch in ("ViT-B-16", "dear-world", "dear-world-tiny"):
        assert arch_config(arch) == open_clip.get_model_config(arch), arch
    assert arch_config("no-such-arch") is None


@pytest.mark.skipif(cuda_devices() > 0, reason="a CUDA device is visible here")
def test_the_stages_device_is_the_cpu_here_and_cuda_is_refused_in_one_line():
    import torch

    from dear import device as devices
    from dear.errors import DearError
    from dear.params import Compute

    assert devices.resolve(Compute(device="auto", precision="bf16", workers=0)) == torch.device("cpu")
    assert not devices.uses_bf16(torch.device("cpu"), "bf16")  # CPU stays fp32
    with pytest.raises(DearError, match="compute.device: cuda requested but torch sees no CUDA device"):
        devices.resolve(Compute(device="cuda", precision="bf16", workers=0))


def test_the_log_line_names_the_precision_a_stage_really_runs_on_the_cpu():
    import torch

    from dear import device as devices

    cpu = torch.device("cpu")
    assert devices.describe(cpu, "bf16").startswith("cpu, fp32,")  # train, fuse, evaluate: fp32 on CPU
    assert devices.describe(cpu, "bf16", cpu_autocast=True).startswith("cpu, bf16 autocast,")  # backbone
    assert devices.describe(cpu, "fp32", cpu_autocast=True).startswith("cpu, fp32,")
