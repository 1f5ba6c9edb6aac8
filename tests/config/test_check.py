"""`dear check`: every problem of a params file at once, before torch or any model loads."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dear.config.check import check_file
from dear.compute.probe import cuda_devices
from dear.cli import app
from tests import tiny_study
from tests.engines import BIN, engine_env, make_project
from tests.fake_coop import make_fake_dataset, write_params

ROOT = Path(__file__).resolve().parents[2]


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
    """The paper config's only problems are the ones a user must fix: where the data is, and fetching weights and
    TAC's class descriptions (one line naming every file)."""
    assert check_file(ROOT / "params.yaml")[1] == []
    found = [finding.text for finding in check_file(ROOT / "configs/paper-vitb16.yaml")[1]]
    assert len(found) == 3
    assert found[0].startswith("data.root: /path/to/coop-datasets not found")
    assert "weights 'openai' for ViT-B-16 are not fetched" in found[1] and "dear fetch-weights --params" in found[1]
    assert found[2].startswith("train.recipes.tac.descriptions: FushengHao/TAC's imagenet_prompt.json, caltech_prompt")
    assert "dear fetch-weights --params" in found[2] and "descriptions_dir" in found[2]


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
    found = [finding.text for finding in check_file(params)[1]]
    assert len(found) == 2, found
    assert found[0].startswith(f"{tmp_path / 'data' / 'dtd'}: not found (data.datasets: dtd)")
    assert "rank 12 needs at least 13 images (mean-centring removes one direction); got 12 images (oxford_pets train)" in found[1]
    assert check_file(edit(params, data={"datasets": ["oxford_pets"]}, profile={"svd_rank": 11}))[1] == []


def test_fewer_shots_than_asked_and_more_workers_than_cpus_are_warnings(tmp_path, monkeypatch):
    """Warned, not refused: the run works, just not as the config reads (shots of the trained sets only)."""
    import dear.config.check

    make_fake_dataset(tmp_path / "data", "oxford_pets", n_classes=4, per_class=3)
    params = edit(write_params(tmp_path / "params.yaml", root=tmp_path / "data", datasets=["oxford_pets"], shots=16),
                  data={"source": "coop", "workers": 2}, compute={"workers": 8}, profile={"svd_rank": 8, "texts_per_head": 5})
    monkeypatch.setattr(dear.config.check, "available_cpus", lambda: 2)
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
    assert dear.config.check.warnings(check_file(edit(world, data={"shots": 5}))[0], "tiny.yaml")[0].startswith(
        "data.shots: 5, but a class of world_objects has only 4 training images")


def test_all_validation_problems_are_listed(tmp_path):
    raw = yaml.safe_load((ROOT / "params.yaml").read_text())
    raw["compute"]["device"] = "gpu"
    raw["backbone"]["lr"] = "1.0e-3"  # text: quoted in the file
    del raw["profile"]["svd_rank"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(raw))
    result = CliRunner().invoke(app, ["check", "--params", str(tmp_path / "params.yaml")])
    assert result.exit_code == 1
    lines = errors(result)
    assert len(lines) == 3, lines
    assert any("compute.device" in line for line in lines) and any("'backbone.lr' must be float" in line for line in lines)
    assert any("missing key 'profile.svd_rank'" in line for line in lines)


def test_three_independent_mistakes_come_out_of_one_check_with_every_way_out(tmp_path):
    """A key given twice, a bad value in one section and a dataset the study uses but does not prepare: one pass."""
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  report={"decimals": 9}, study={"base_to_novel": ["world_objects", "world_objects_b"]})
    text = params.read_text().replace("  shots: ", "  shots: 4\n  shots: ", 1)
    params.write_text(text)
    result = CliRunner().invoke(app, ["check", "--params", str(params)])
    assert result.exit_code == 1
    lines = errors(result)
    assert len(lines) == 3 and "3 problem(s)" in result.stderr, result.stderr
    assert lines[0].endswith("key 'data.shots' is given twice (also on line "
                             f"{text.splitlines().index('  shots: 4') + 1}); DVC refuses such a file and PyYAML "
                             "keeps the last, so keep one of them")
    assert "key 'report.decimals' must be int (input should be less than or equal to 6), got int 9" in lines[1]
    assert lines[2] == ("error: study.base_to_novel uses world_objects_b, which data.datasets does not list; add "
                        "world_objects_b to data.datasets, or remove it from study.base_to_novel")


def test_a_check_that_reads_a_bad_section_says_what_it_waits_on(tmp_path):
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  profile={"svd_rank": "eighty"}, compute={"device": "gpu"})
    result = CliRunner().invoke(app, ["check", "--params", str(params)])
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: ")]
    assert len(errors(result)) == 2 and "2 problem(s)" in result.stderr
    assert notes == ["note: the datasets the study and the profile use: not checked until profile above is fixed",
                     "note: compute.device: not checked until compute above is fixed",
                     "note: the profile's roles, bank, layers and SVD rank: not checked until profile above is fixed"]


def test_check_takes_set_like_the_stages(tmp_path):
    params = write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"])
    good = CliRunner().invoke(app, ["check", "--params", str(params)])
    assert good.exit_code == 0, good.stderr
    bad = CliRunner().invoke(app, ["check", "--params", str(params), "--set", "profile.svd_rank=5000",
                                   "--set", "data.shots=yes"])
    assert bad.exit_code == 1
    lines = errors(bad)
    assert lines[0].startswith("error: --set data.shots=yes: yes is a boolean in YAML 1.1") and len(lines) == 1
    fixed = CliRunner().invoke(app, ["check", "--params", str(params), "--set", "profile.svd_rank=5000"])
    assert any("profile.svd_rank: rank 5000" in line for line in errors(fixed))


def test_the_pick_count_is_checked_against_the_rank_the_images_allow(tmp_path):
    """svd_rank too high for the images and texts_per_head above the highest possible rank: both at once."""
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  profile={"max_images": 10, "svd_rank": 30, "texts_per_head": 20})
    found = [finding.text for finding in check_file(params)[1]]
    assert [line.split(":")[0] for line in found] == ["profile.svd_rank", "profile.texts_per_head"], found
    assert "allow at most 9; lower profile.texts_per_head to 9" in found[1]


def test_a_fetched_tag_passes_once_recorded(tmp_path):
    from dear.model.weights_record import RECORD

    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  model={"arch": "ViT-B-16", "pretrained": "openai", "cache_dir": str(tmp_path / "cache")},
                  backbone={"sanity": {"enabled": False, "max_images_per_set": None}})
    found = [finding.text for finding in check_file(params)[1]]
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
    code = ("import sys, dear.config.check, dear.cli\n"
            "dear.config.check.check_file('params.yaml')\n"
            "print(sorted(m for m in ('torch', 'open_clip', 'torchvision') if m in sys.modules))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert result.stdout.strip() == "[]", result.stderr


@pytest.mark.skipif(cuda_devices() > 0, reason="a CUDA device is visible here")
def test_cuda_is_reported_missing_without_a_driver(tmp_path):
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  compute={"device": "cuda"})
    found = [finding.text for finding in check_file(params)[1]]
    assert len(found) == 1 and found[0].startswith("compute.device: cuda, but")
    assert check_file(edit(params, compute={"device": "auto"}))[1] == []


@pytest.mark.slow
def test_snakemake_checks_the_config_before_it_plans_dry_run_or_not(tmp_path):
    raw = tiny_study.params()
    raw["profile"].update(max_images=20, svd_rank=30, texts_per_head=5)
    project = make_project(tmp_path / "project", yaml.safe_dump(raw, sort_keys=False))
    for dry in ([], ["-n"]):
        result = subprocess.run([str(BIN / "snakemake"), "--cores", "1", *dry], cwd=project, env=engine_env(),
                                capture_output=True, text=True, timeout=300)
        assert result.returncode == 1, dry
        lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
        assert len(lines) == 1 and "profile.svd_rank: rank 30 needs at least 31 images" in lines[0]
        assert "params.yaml: 1 problem(s); nothing was planned" in result.stderr and not (project / "world").exists()


def test_the_torch_free_probes_agree_with_torch_and_open_clip():
    import open_clip
    import torch

    import dear.model.clip  # noqa: F401  (registers the embedded architectures)
    from dear.compute.probe import arch_config, torch_cuda_build

    assert torch_cuda_build() == torch.version.cuda
    for arch in ("ViT-B-16", "dear-world", "dear-world-tiny"):
        assert arch_config(arch) == open_clip.get_model_config(arch), arch
    assert arch_config("no-such-arch") is None


@pytest.mark.skipif(cuda_devices() > 0, reason="a CUDA device is visible here")
def test_the_stages_device_is_the_cpu_here_and_cuda_is_refused_in_one_line():
    import torch

    from dear.compute import device as devices
    from dear.errors import DearError
    from dear.config.params import Compute

    assert devices.resolve(Compute(device="auto", precision="bf16", workers=0, reproducible=True)) == torch.device("cpu")
    assert not devices.uses_bf16(torch.device("cpu"), "bf16")  # CPU stays fp32
    with pytest.raises(DearError, match="compute.device: cuda requested but torch sees no CUDA device"):
        devices.resolve(Compute(device="cuda", precision="bf16", workers=0, reproducible=True))


def test_the_log_line_names_the_precision_a_stage_really_runs_on_the_cpu():
    import torch

    from dear.compute import device as devices

    cpu = torch.device("cpu")
    assert devices.describe(cpu, "bf16").startswith("cpu, fp32,")  # train, fuse, evaluate: fp32 on CPU
    assert devices.describe(cpu, "bf16", cpu_autocast=True).startswith("cpu, bf16 autocast,")  # backbone
    assert devices.describe(cpu, "fp32", cpu_autocast=True).startswith("cpu, fp32,")


def test_a_study_with_every_protocol_off_is_refused(tmp_path):
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  study={"base_to_novel": [], "transfer": None})
    found = [finding.text for finding in check_file(params)[1]]
    assert found == ["study.base_to_novel is empty and the transfer and few-shot protocols are off (study.transfer, "
                     "study.few_shot): nothing would be trained; list datasets in study.base_to_novel, or switch "
                     "study.transfer or study.few_shot on"]
    assert check_file(edit(params, study={"base_to_novel": ["world_objects"]}))[1] == []
    few = {"datasets": ["world_objects"], "shots": [1, 2]}
    alone = edit(params, study={"base_to_novel": [], "few_shot": few})
    assert check_file(alone)[1] == [], "few-shot learning alone is a study"
    off = [finding.text for finding in check_file(edit(params, study={"few_shot": {**few, "enabled": False}}))[1]]
    assert off == found
    edit(params, study={"base_to_novel": ["world_objects"], "few_shot": None})
    disabled = {"enabled": False, "source": "nowhere", "cross_dataset": [], "domain_generalization": []}
    assert check_file(edit(params, study={"transfer": disabled}))[1] == [], "a protocol that is off names no dataset"


def test_the_world_text_banks_size_is_known_without_drawing_the_emoji():
    """`dear check` counts the world's bank from its params (the catalog takes ~1 s); both counts agree."""
    from dear.data import world as world_data
    from dear.data.world import tiny_params
    from dear.config.params import World, load_params

    for world in (load_params(ROOT / "params.yaml").world, World.model_validate(tiny_params()["world"])):
        bank = world_data.text_bank(world)
        assert world_data.text_bank_size(world) == len(bank)
        assert {concept for _, concept in bank} == set(world_data.TEXT_BANK_CONCEPTS)


def test_the_pages_examples_are_what_dear_check_prints(tmp_path):
    """docs/check.md shows a check waiting on a bad section and the paper config's two problems, verbatim."""
    page = (ROOT / "docs/check.md").read_text()
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  profile={"svd_rank": "eighty"}, compute={"device": "gpu"})
    waiting = subprocess.run([sys.executable, "-m", "dear.cli", "check", "--params", "params.yaml"], cwd=tmp_path,
                             capture_output=True, text=True)
    paper = subprocess.run([sys.executable, "-m", "dear.cli", "check", "--params", "configs/paper-vitb16.yaml"],
                           cwd=ROOT, capture_output=True, text=True)
    for output in (waiting.stderr, paper.stderr):
        lines = [line for line in output.splitlines() if "this machine has" not in line]  # a CPU count's warning
        assert lines and all(line in page for line in lines), output


def test_a_few_shot_dataset_with_a_test_split_only_is_refused(tmp_path):
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  study={"few_shot": {"datasets": ["world_objects"], "shots": [1]}})
    raw = yaml.safe_load(params.read_text())
    raw["data"].update(source="coop", datasets=["imagenet", "imagenet-sketch"])
    raw["study"].update(base_to_novel=["imagenet"], transfer=None,
                        few_shot={"datasets": ["imagenet", "imagenet-sketch"], "shots": [1]})
    raw["profile"]["dataset"] = "imagenet"
    params.write_text(yaml.safe_dump(raw, sort_keys=False))
    found = [finding.text for finding in check_file(params)[1] if "study.few_shot" in finding.text]
    assert found == ["study.few_shot.datasets: imagenet-sketch has a test split only (a domain-shift target), so no "
                     "shot can be drawn from it; remove it from study.few_shot.datasets"]


def test_a_report_method_the_study_does_not_run_is_refused(tmp_path):
    """Issue 39: a copied params.yaml kept the demo's report.methods, and the report showed six rows of dashes."""
    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  study={"methods": ["zeroshot", "coop"]}, report={"methods": ["zeroshot", "coop", "mmrl"],
                                                                    "compare": None})
    result = CliRunner().invoke(app, ["check", "--params", str(params)])
    assert result.exit_code == 1
    assert errors(result) == [
        "error: report.methods: 'mmrl' is not in study.methods (zeroshot, coop); remove it, or leave report.methods "
        "out (null): it defaults to study.methods"]
    result = CliRunner().invoke(app, ["check", "--params", str(edit(params, report={"methods": None,
                                                                                    "compare": "dear"}))])
    assert errors(result) == [
        "error: report.compare: 'dear' is not in study.methods (zeroshot, coop); pick one of them, or leave "
        "report.compare out (null): dear when the study runs it, else its last method that trains"]
    fine = edit(params, report={"methods": None, "compare": None})
    assert CliRunner().invoke(app, ["check", "--params", str(fine)]).exit_code == 0


@pytest.mark.parametrize("methods, compared", [(["zeroshot", "coop", "dear", "mmrl"], "dear"),
                                               (["zeroshot", "coop", "mmrl", "linear_probe"], "mmrl"),
                                               (["linear_probe", "zeroshot"], "zeroshot")])
def test_the_report_defaults_to_the_study_s_methods_and_compares_dear_else_the_last_trained(tmp_path, methods,
                                                                                         compared):
    from dear.config.params import load_params

    params = edit(write_params(tmp_path / "params.yaml", root="world", datasets=["world_objects"]),
                  study={"methods": methods}, report={"methods": None, "compare": None})
    loaded = load_params(params)
    assert (loaded.report_methods, loaded.report_compare) == (methods, compared)
