"""A failure always says why: the last line of a job's log names the cause, however the stage stopped.

Real `dear` processes (a stage runs under a parent that watches it, dear/runtime/supervise.py): killed by SIGKILL
(the parent writes the line), over a memory limit set here (ulimit -v), stopped by SIGTERM or Ctrl-C
(the stage writes it, and the rerun resumes), an unexpected Python error (traceback and line), and a
Snakemake job killed by SIGKILL, whose failure summary quotes that line.
"""

from __future__ import annotations

import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml
from typer.testing import CliRunner

from dear.cli import app
from dear.data.world import tiny_params
from tests import fake_run, tiny_study
from tests.engines import BIN, ROOT, make_project

pytestmark = pytest.mark.xdist_group("failures")
DEAR = [str(BIN / "dear")] if (BIN / "dear").exists() else [sys.executable, "-c", "from dear.cli import main; main()"]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """Inputs of a `dear train` long enough to be stopped mid-way (a checkpoint every 3 steps)."""
    root = tmp_path_factory.mktemp("failures")
    sha = fake_run.backbone(root / "backbone")
    fake_run.fewshot(root / "fewshot.parquet", root / "images")
    fake_run.roles(root / "roles.parquet", sha)
    fake_run.params_file(root / "params.yaml", recipe={"epochs": 200}, train={"checkpoint_every": 3})
    return SimpleNamespace(root=root)


def train(run, tmp_path: Path) -> list[str]:
    return [*DEAR, "train", "--params", str(run.root / "params.yaml"), "--method", "dear", "--dataset", "toy",
            "--seed", "1", "--backbone", str(run.root / "backbone"), "--fewshot", str(run.root / "fewshot.parquet"),
            "--roles", str(run.root / "roles.parquet"), "--out", str(tmp_path / "out"),
            "--checkpoint", str(tmp_path / "ck" / "ckpt.pt"), "--log", str(tmp_path / "train.log")]


def start(command: list[str], tmp_path: Path, served: bool = True, **options) -> subprocess.Popen:
    """A `dear` process in a session of its own (a terminal's Ctrl-C reaches its whole group), Ctrl-C not ignored;
    through the warm server (dear/server/) unless `served` is False (a test of the process tree of the plain path)."""
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "stderr", "w"),
                            start_new_session=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", **({} if served else {"DEAR_SERVER": "off"})},
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL), **options)


def wait_for_checkpoint(process: subprocess.Popen, tmp_path: Path) -> None:
    checkpoint = tmp_path / "ck" / "ckpt.pt"
    deadline = time.monotonic() + 120
    while not checkpoint.exists() and process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert process.poll() is None and checkpoint.exists(), (tmp_path / "stderr").read_text()[-2000:]


def stage_process(parent: subprocess.Popen) -> int:
    """The pid of the process running the stage: the only child of the `dear` process."""
    children = Path(f"/proc/{parent.pid}/task/{parent.pid}/children").read_text().split()
    assert len(children) == 1, children
    return int(children[0])


def last_line(path: Path) -> str:
    return [line for line in path.read_text().splitlines() if line.strip()][-1]


@pytest.mark.slow
def test_a_stage_killed_by_sigkill_gets_its_last_line_from_its_parent(run, tmp_path):
    process = start(train(run, tmp_path), tmp_path, served=False)  # the stage is the `dear` process's child
    wait_for_checkpoint(process, tmp_path)
    os.kill(stage_process(process), signal.SIGKILL)
    assert process.wait(timeout=60) == 128 + signal.SIGKILL
    line = last_line(tmp_path / "train.log")
    assert line.startswith("error: killed by SIGKILL after "), line
    for part in ("in train, seed 1, at train dear, ", "; peak memory ", "SIGKILL comes from outside the job",
                 "its last checkpoint (", "rerun the same command to resume from it"):
        assert part in line, line
    assert last_line(tmp_path / "stderr") == line


@pytest.mark.slow
@pytest.mark.parametrize("signum, code, cause", [(signal.SIGTERM, 143, "stopped by SIGTERM"),
                                                 (signal.SIGINT, 130, "interrupted (Ctrl-C)")])
def test_sigterm_and_ctrl_c_say_where_the_stage_stopped_and_the_rerun_resumes(run, tmp_path, signum, code, cause):
    process = start(train(run, tmp_path), tmp_path)
    wait_for_checkpoint(process, tmp_path)
    os.killpg(process.pid, signum)  # as a terminal (Ctrl-C) or Slurm (SIGTERM) sends it: to every process of the job
    assert process.wait(timeout=60) == code
    line = last_line(tmp_path / "train.log")
    assert line.startswith(f"error: {cause}") and "in train, seed 1, at train dear, " in line, line
    assert "its last checkpoint (" in line and line.endswith("rerun the same command to resume from it"), line
    assert last_line(tmp_path / "stderr") == line
    process = start(train(run, tmp_path), tmp_path)
    deadline = time.monotonic() + 60
    while "resuming at step" not in (tmp_path / "train.log").read_text() and time.monotonic() < deadline:
        time.sleep(0.05)
    process.kill()
    process.wait()
    assert "resuming at step" in (tmp_path / "train.log").read_text()


def _address_space_after_imports(stage: str) -> int:
    """Bytes of address space a process holds once a stage's modules are imported (VmPeak)."""
    code = (f"import importlib, dear.cli; importlib.import_module('dear.stages.{stage}'); "
            "print([l.split()[1] for l in open('/proc/self/status') if l.startswith('VmPeak')][0])")
    return int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout) * 1024


@pytest.mark.slow
def test_a_stage_over_its_memory_limit_says_so_with_its_peak_and_the_limit(tmp_path):
    """ulimit -v: room for the imports and 600 MB more; a pretraining batch of 4,096 images needs more."""
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params.update(tiny_params())
    params["backbone"]["sanity"]["enabled"] = False
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    limit = _address_space_after_imports("backbone") + 600 * 2**20
    command = [*DEAR, "backbone", "--params", str(tmp_path / "params.yaml"), "--out", str(tmp_path / "backbone"),
               "--log", str(tmp_path / "backbone.log"), "--set", "backbone.batch_size=4096", "--set", "backbone.steps=2"]
    process = subprocess.run(command, capture_output=True, text=True, timeout=300,
                             preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)))
    assert process.returncode != 0
    line = last_line(tmp_path / "backbone.log")
    assert line.startswith(("error: out of memory after ", "error: killed by ")), line
    assert "in backbone" in line and f"address space (ulimit -v) {limit / 2**30:.2f} GB" in line, line
    assert "peak memory " in line and not (tmp_path / "backbone").exists()


def test_an_unexpected_error_leaves_its_traceback_and_a_last_line_naming_it(tmp_path, monkeypatch):
    import dear.stages.world as world_stage

    def broken(params, inputs, outputs):
        raise ValueError("a bug")

    monkeypatch.setattr(world_stage, "run", broken)
    log = tmp_path / "world.log"
    result = CliRunner().invoke(app, ["world", "--out", str(tmp_path / "world"), "--log", str(log)])
    assert result.exit_code == 1
    text = log.read_text()
    assert "Traceback" in text and 'raise ValueError("a bug")' in text
    line = last_line(log)
    assert line.startswith("error: ValueError: a bug, after ") and "in world" in line, line
    assert "an error dear does not expect" in line and result.stderr.splitlines()[-1] == line


@pytest.mark.slow
def test_a_workflow_job_killed_by_sigkill_is_named_with_its_cause_in_the_failure_summary(tmp_path):
    project = make_project(tmp_path / "project", yaml.safe_dump(tiny_study.params(), sort_keys=False))
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "DVC_NO_ANALYTICS": "1", "DEAR_TEST_KILL_AT": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    # a dry run first writes the jobs' code and values files (the planner's writes pass no fault point of the job's)
    subprocess.run([str(BIN / "snakemake"), "-n", "world"], cwd=project, check=True, capture_output=True,
                   env={key: value for key, value in env.items() if key != "DEAR_TEST_KILL_AT"}, timeout=300)
    result = subprocess.run([str(BIN / "snakemake"), "--cores", "1", "world"], cwd=project, env=env,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    summary = output[output.index("1 failed job(s): why each stopped"):].splitlines()
    assert summary[1].startswith("  rule world -> world"), summary
    assert summary[2].startswith("      why: killed by SIGKILL after ") and ", in world, " in summary[2], summary
    assert summary[3] == "      logs/world.log"
