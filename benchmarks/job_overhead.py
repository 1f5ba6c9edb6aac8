"""What a pipeline job pays besides its work, and the masked attention kernel, each against its plain baseline.

    python benchmarks/job_overhead.py [--arch dear-world] [--repeats 3]
    python benchmarks/job_overhead.py --job [--params configs/smoke.yaml] [--repeats 5]

--job: a job that does no work (zero-shot CLIP's `dear train`, as Snakemake runs it on the study of
--params: its inputs are made first by Snakemake), whole processes timed from the shell's side:
- through the warm server (dear/server/, the server already up) / in its own process (DEAR_SERVER=off);
- the first command of a fresh server (it starts the server and waits for its imports);
- `dear --version` both ways, and `python -c "import torch"`, the floor of any plain process.

- a stage's imports as `dear` makes them (collector paused, then frozen) / a plain import, each
  in a fresh interpreter and followed by one full collection, as a job's later collections are
- `load_backbone` for a job's later seed (a copy of the first) / the first seed's load
- role-masked attention ([H, T, T] masks, as the token layers run it) / the math kernel, which a
  3-D mask got before masks reached torch as [1, H, T, T]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from timing import interleave  # noqa: E402

STAGE = "fuse"  # a stage whose imports are every model stage's: torch, torchvision, open_clip
PLAIN = f"import gc, importlib, dear.cli; importlib.import_module('dear.stages.{STAGE}'); gc.collect()"
PAUSED = f"import gc, dear.cli; dear.cli._import_stage('{STAGE}'); gc.collect()"


def stage_import(repeats: int) -> dict:
    """Seconds of a fresh interpreter importing a stage plainly / as `dear` does."""
    def spawn(code: str):
        return lambda: subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT,
                                      env={**os.environ, "OMP_NUM_THREADS": "1"})

    return interleave({"plain": spawn(PLAIN), "paused": spawn(PAUSED)}, repeats)


def backbone_load(arch: str, repeats: int) -> dict:
    """Seconds of `load_backbone` on a fresh process's first call / on a later seed's call."""
    import torch

    from dear.model import clip

    folder = Path(tempfile.mkdtemp(prefix="dear-bench-backbone-"))
    torch.save(clip.create_model(arch, None).state_dict(), folder / "model.pt")
    sha = hashlib.sha256((folder / "model.pt").read_bytes()).hexdigest()
    (folder / "card.json").write_text(json.dumps({"arch": arch, "sha256": sha,
                                                  "weights": {"path": "model.pt", "sha256": sha}}))

    def first():
        clip._loaded.clear()
        clip.load_backbone(folder)

    return interleave({"first": first, "later": lambda: clip.load_backbone(folder)}, repeats)


def masked_attention(arch: str, repeats: int, batch: int = 64, tokens: int = 5) -> dict:
    """Seconds of one token layer's per-head attention under a role mask: as run / on the math kernel."""
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from dear.model import internals
    from profile_speed import make_model

    model, _ = make_model(arch)
    tower = internals.vision_tower(model)
    block = tower.blocks[-1]
    patches = model.visual.grid_size[0] * model.visual.grid_size[1]
    T = 1 + patches + tokens
    x = torch.randn(batch, T, tower.width)
    mask = torch.zeros(tower.heads, T, T)
    mask[: tower.heads // 2, : 1 + patches, 1 + patches:] = float("-inf")  # half the heads never read the tokens

    @torch.no_grad()
    def as_run():
        internals._heads(block, x, mask)

    @torch.no_grad()
    def math():
        with sdpa_kernel([SDPBackend.MATH]):
            internals._heads(block, x, mask)

    return interleave({"as_run": as_run, "math": math}, repeats * 5)


def nowork_job(params: str, repeats: int) -> dict:
    """Seconds of zero-shot CLIP's `dear train` (it trains nothing) through the warm server / without it."""
    from dear.config.params import load_params

    loaded = load_params(ROOT / params)
    root = "" if os.path.normpath(loaded.output_root) == "." else os.path.normpath(loaded.output_root) + "/"
    dataset = loaded.study.base_to_novel[0]
    made = subprocess.run(["snakemake", "--configfile", params, "--cores", "2", "--scheduler", "greedy",
                           f"{root}runs/zeroshot/{dataset}/train"], cwd=ROOT, capture_output=True, text=True)
    if made.returncode:
        sys.exit(f"snakemake could not make the job's inputs:\n{made.stderr[-3000:]}")
    out = Path(tempfile.mkdtemp(prefix="dear-bench-job-"))
    train = ["dear", "train", "--params", params, "--method", "zeroshot", "--dataset", dataset, "--classes", "base",
             "--backbone", f"{root}backbone", "--fewshot", f"{root}data/{dataset}/fewshot-seed{{seed}}.parquet",
             "--roles", f"{root}roles/{loaded.profile.dataset}/roles.parquet", "--out", f"{out}/train/seed{{seed}}",
             "--log", f"{out}/train.log"]
    sockets = tempfile.mkdtemp(prefix="dear-bench-servers-")
    served = {**os.environ, "DEAR_SERVER": "on", "DEAR_SERVER_DIR": sockets}
    plain = {**os.environ, "DEAR_SERVER": "off"}

    def spawn(command: list[str], env: dict):
        return lambda: subprocess.run(command, check=True, cwd=ROOT, env=env, capture_output=True)

    first = timed(spawn(train, served))  # a fresh server: this command waits for its imports
    medians = interleave({"plain": spawn(train, plain), "served": spawn(train, served),
                          "version_plain": spawn(["dear", "--version"], plain),
                          "version_served": spawn(["dear", "--version"], served),
                          "torch": spawn([sys.executable, "-c", "import torch"], plain)}, repeats)
    subprocess.run(["dear", "server", "stop"], env=served, capture_output=True)
    return {**medians, "first_served": first}


def timed(function) -> float:
    import time

    start = time.perf_counter()
    function()
    return time.perf_counter() - start


def job_rows(result: dict) -> list[tuple[str, str, str]]:
    return [
        ("no-work job (zero-shot `dear train`) through the warm server / in its own process",
         f"{result['served'] / result['plain']:.2f}x ({result['served']:.2f} vs {result['plain']:.2f} s)", "<= 1.0 s"),
        ("the first command of a fresh server (it waits for the server's imports)", f"{result['first_served']:.2f} s",
         "~ plain"),
        ("`dear --version` through the server / in its own process",
         f"{result['version_served'] / result['version_plain']:.2f}x ({result['version_served']:.2f} vs "
         f"{result['version_plain']:.2f} s)", "< 1"),
        ("`python -c \"import torch\"` (the floor of any process that imports torch)", f"{result['torch']:.2f} s", ""),
    ]


def measure(arch: str, repeats: int) -> dict:
    return {"import": stage_import(repeats), "load": backbone_load(arch, repeats),
            "attention": masked_attention(arch, repeats)}


def rows(result: dict) -> list[tuple[str, str, str]]:
    imports, load, attention = result["import"], result["load"], result["attention"]
    return [
        (f"a stage's imports as `dear` makes them / plain ({STAGE}, then a full collection)",
         f"{imports['paused'] / imports['plain']:.2f}x ({imports['paused']:.2f} vs {imports['plain']:.2f} s)", "< 1"),
        ("load_backbone for a job's later seed / its first",
         f"{load['later'] / load['first']:.2f}x ({load['later'] * 1000:.0f} vs {load['first'] * 1000:.0f} ms)", "< 1"),
        ("role-masked attention / the math kernel (a 3-D mask's fallback)",
         f"{attention['as_run'] / attention['math']:.2f}x", "< 1"),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arch", default="dear-world", help="open_clip architecture (random weights)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--job", action="store_true", help="time a no-work job with and without the warm server")
    parser.add_argument("--params", default="configs/smoke.yaml", help="--job: the study whose first job is timed")
    args = parser.parse_args()
    if args.job:
        result = nowork_job(args.params, args.repeats)
        for name, value, goal in job_rows(result):
            print(f"| {name} | {value} | {goal} |")
        return
    import torch

    torch.set_num_threads(1)  # as a pipeline job runs (Snakemake: one thread per job)
    for name, value, goal in rows(measure(args.arch, args.repeats)):
        print(f"| {name} | {value} | {goal} |")


if __name__ == "__main__":
    main()
