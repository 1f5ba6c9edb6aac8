"""Kill every stage at many moments, rerun the same command: the outputs of an uninterrupted run, nothing half-written.

One tiny study (world to report, one seed) is run once, uninterrupted: the
reference. Then, stage by stage, the same command runs in a forked copy of
this process (no import cost) that is SIGKILLed

- at its N-th write point (`dear.runtime.io.FAULTS`: a file half written before its
  rename, a folder about to be swapped, a folder half swapped), for the first
  point, a seeded random one, and the last ones;
- or after a seeded random share of the stage's reference wall time.

The output location starts holding an "old" output: every file of the stage
replaced by other bytes, plus a stale file of an earlier run where the stage's
names allow one. After the kill the output must be entirely old, entirely new
or absent; after a rerun of the same command it must equal the reference (up to
the wall-clock columns of tests/wall_clock.py) with no temporary file left anywhere.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from dear.runtime import io
from dear.cli import app
from tests import tiny_study
from tests.fake_run import small_recipes
from tests.wall_clock import comparable

pytestmark = pytest.mark.xdist_group("faults")  # one worker: the stages share one reference study



@dataclass
class Stage:
    args: list[str]  # the command, {root} for the project folder
    outputs: list[str]  # what it writes (folders or files), relative to the project
    stale: list[str] = field(default_factory=list)  # a file an earlier run could have left (the stage's names)
    checkpoint: str | None = None
    random: int = 2  # kills at random moments (write points, then timers) besides the first and last points

    @property
    def folder(self) -> bool:
        """A folder output, swapped into place (a file output is renamed: no swap points)."""
        return not self.outputs[0].endswith(".json")


RUN = "runs/dear/world_objects"
STAGES = {
    "world": Stage(["world", "--out", "{root}/world"], ["world"], stale=["world/world_shapes/card.json"]),
    "backbone": Stage(["backbone", "--world", "{root}/world", "--out", "{root}/backbone"], ["backbone"], random=0),
    "prepare": Stage(["prepare", "--dataset", "world_objects", "--out", "{root}/data/world_objects"],
                     ["data/world_objects"], stale=["data/world_objects/fewshot-seed7.parquet"]),
    "profile": Stage(["profile", "--backbone", "{root}/backbone", "--manifest", "{root}/data/world_objects/manifest.parquet",
                      "--out", "{root}/roles/world_objects"], ["roles/world_objects"]),
    "train": Stage(["train", "--method", "dear", "--dataset", "world_objects", "--backbone", "{root}/backbone",
                    "--fewshot", "{root}/data/world_objects/fewshot-seed1.parquet",
                    "--roles", "{root}/roles/world_objects/roles.parquet",
                    "--out", f"{{root}}/{RUN}/train/seed1", "--checkpoint", "{root}/checkpoints/ckpt.pt"],
                   [f"{RUN}/train/seed1"], checkpoint="checkpoints/ckpt.pt", random=4),
    "fuse": Stage(["fuse", "--model", f"{{root}}/{RUN}/train/seed1/model.pt", "--backbone", "{root}/backbone",
                   "--fewshot", "{root}/data/world_objects/fewshot-seed1.parquet",
                   "--roles", "{root}/roles/world_objects/roles.parquet", "--out", f"{{root}}/{RUN}/fuse/seed1/fusion.json"],
                  [f"{RUN}/fuse/seed1/fusion.json"]),
    "evaluate": Stage(["evaluate", "--model", f"{{root}}/{RUN}/train/seed1/model.pt", "--backbone", "{root}/backbone",
                       "--fusion", f"{{root}}/{RUN}/fuse/seed1/fusion.json", "--source", "{root}/data/world_objects",
                       "--data", "{root}/data", "--roles", "{root}/roles/world_objects/roles.parquet",
                       "--out", f"{{root}}/{RUN}/eval/seed1"], [f"{RUN}/eval/seed1"]),
    "report": Stage(["report", "--out", "{root}/report", "--evals", f"{{root}}/{RUN}/eval/seed1/eval.parquet",
                     "--train-logs", f"{{root}}/{RUN}/train/seed1/train_log.parquet",
                     "--roles", "{root}/roles/world_objects/heatmap.png"], ["report"], stale=["report/roles/gone.png"]),
}


def study_params(root: Path) -> dict:
    raw = tiny_study.params()
    raw["world"]["attribute_sets"] = ["colors"]
    raw["backbone"]["steps"] = 4
    raw["data"].update(root=str(root / "world"), seeds=[1])
    raw["study"].update(methods=["dear"], base_to_novel=["world_objects"])
    raw["study"]["transfer"].update(cross_dataset=[], domain_generalization=[])
    small_recipes(raw["train"], epochs=2)  # 4 steps, a checkpoint after each
    raw["train"]["checkpoint_every"] = 1
    return raw


@dataclass
class Reference:
    root: Path
    params: Path
    snapshots: dict  # stage -> {relative path: content}
    files: dict  # stage -> {relative path: bytes}, to put back after a test (wall-clock bytes included)
    points: dict  # stage -> write points of a first run (no old output)
    seconds: dict  # stage -> wall time


def command(stage: Stage, project: Reference) -> list[str]:
    return [arg.replace("{root}", str(project.root)) for arg in stage.args] + ["--params", str(project.params)]


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Reference:
    root = tmp_path_factory.mktemp("study")
    params = root / "params.yaml"
    params.write_text(yaml.safe_dump(study_params(root), sort_keys=False))
    project = Reference(root, params, {}, {}, {}, {})
    for name, stage in STAGES.items():
        before, began = io.FAULTS.passed, time.perf_counter()
        result = CliRunner().invoke(app, command(stage, project))
        assert result.exit_code == 0, f"{name}: {result.output[-2000:]}"
        project.seconds[name] = time.perf_counter() - began
        project.points[name] = io.FAULTS.passed - before
        project.snapshots[name] = snapshot(root, stage)
        project.files[name] = snapshot(root, stage, raw=True)
    return project


def snapshot(root: Path, stage: Stage, raw: bool = False) -> dict:
    """Every file of the stage's outputs: bytes, or a Parquet file's rows and metadata minus wall-clock columns.

    The digests the command writes after its stage (`.digest/`, dear/pipeline/digest.py) are not the stage's outputs:
    a rerun rewrites them (tests/pipeline/test_digest.py)."""
    found = {}
    for output in stage.outputs:
        path = root / output
        files = sorted(p for p in path.rglob("*") if p.is_file() and io.DIGESTS not in p.relative_to(path).parts) \
            if path.is_dir() else [path] if path.exists() else []
        for file in files:
            key = str(file.relative_to(root))
            found[key] = file.read_bytes() if raw else comparable(file)
    return found


def put_back(root: Path, stage: Stage, files: dict) -> None:
    """The reference bytes, so that later stages read exactly the inputs their reference run read."""
    for output in stage.outputs:
        remove(root / output)
    for key, data in files.items():
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(data)


def plant_old_outputs(root: Path, stage: Stage, reference: dict) -> dict:
    """Replace the stage's outputs by an "old" version: other bytes in every file, plus a stale file."""
    for output in stage.outputs:
        remove(root / output)
    old = {}
    for key in [*reference, *stage.stale]:
        (root / key).parent.mkdir(parents=True, exist_ok=True)
        (root / key).write_bytes(b"old output of an earlier run: " + key.encode())
        old[key] = (root / key).read_bytes()
    return old


def remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


def killed_run(args: list[str], at: int | None = None, after: float | None = None) -> int:
    """Run `dear <args>` in a forked child killed at its `at`-th write point or after `after` s; its wait status."""
    pid = os.fork()
    if pid == 0:  # the child: never returns into pytest
        code = 98
        try:
            io.FAULTS.passed = 0
            if at is not None:
                os.environ[io.KILL_ENV] = str(at)
            code = CliRunner().invoke(app, args).exit_code
        finally:
            os._exit(code)
    if after is not None:
        time.sleep(after)
        os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    return status


def leftovers(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob(".*.tmp"))


def cases() -> list[tuple[str, str]]:
    """(stage, moment): the first write point (no old output), the last two (a folder about to be swapped, half
    swapped) and random moments (write points and timers, alternately)."""
    chosen = []
    for name, stage in STAGES.items():
        moments = ["first point"] + (["before swap", "mid swap"] if stage.folder else [])
        moments += [("random point", "random time")[k % 2] + f" {k // 2 + 1}" for k in range(stage.random)]
        chosen += [(name, moment) for moment in moments]
    return chosen


@pytest.mark.parametrize("name, moment", cases(), ids=[f"{n}-{m.replace(' ', '-')}" for n, m in cases()])
def test_killed_stage_reruns_to_the_uninterrupted_outputs(study, name, moment):
    stage = STAGES[name]
    root, reference = study.root, study.snapshots[name]
    rng = random.Random(f"{name} {moment}")
    old = None
    if moment == "first point":
        for output in stage.outputs:
            remove(root / output)
    else:
        old = plant_old_outputs(root, stage, reference)
    points = study.points[name] + (stage.folder and old is not None)  # over an old folder the swap has a midpoint
    at = after = None
    if moment == "first point":
        at = 1
    elif moment == "before swap":
        at = points - 1
    elif moment == "mid swap":
        at = points
    elif moment.startswith("random point"):
        at = rng.randint(1, max(1, points - 2))
    else:
        after = rng.uniform(0.1, 0.9) * study.seconds[name]
    status = killed_run(command(stage, study), at=at, after=after)
    if at is not None:
        assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, f"not killed at point {at}: {status}"

    after_kill = snapshot(root, stage)
    state = "absent" if not after_kill else "new" if after_kill == reference else "old" if after_kill == old else "mixed"
    assert state in ("absent", "old", "new"), f"killed at {moment} ({at or after}): a mix: {sorted(after_kill)}"

    result = CliRunner().invoke(app, command(stage, study))
    assert result.exit_code == 0, result.output[-2000:]
    assert snapshot(root, stage) == reference, f"rerun after a kill ({moment}) differs from the uninterrupted run"
    assert leftovers(root) == []
    if stage.checkpoint:
        assert not (root / stage.checkpoint).exists()
    put_back(root, stage, study.files[name])
