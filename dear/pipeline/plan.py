"""`dear plan`: what a config will cost before it runs — device hours and peak memory per stage — from a run's record.

The estimate scales a recorded run (its record.json: the jobs' benchmark
files and its params) to the planned config, stage by stage:

    a job's seconds = overhead × runs + rate × work

`work` is counted from a config alone, in GFLOPs of the model's forward
passes (from the architecture's config: layers, width, tokens):
- train: per seed, epochs × the training images (shots × classes trained)
  × 3 (forward and backward) × an image's GFLOPs, plus each step's prompts
  (one per class) × 3 × a prompt's GFLOPs; zero-shot trains nothing; the
  linear probe: one forward pass of its training and validation shots; a run
  of `iterations_per_shot` × K steps (CLIP-LoRA) passes over the images
  steps × batch / images times; a cache's `augment_epochs` (Tip-Adapter-F)
  add as many forward passes;
- fuse: per seed, the validation images and one prompt per class;
- evaluate: per seed, the test images of every dataset scored and one
  prompt per class of each;
- few-shot runs (train_fewshot, fuse_fewshot, evaluate_fewshot): the same,
  with K shots of every class, the recipe's epochs for K, min(K, val_shots)
  validation shots, the dataset's own test images;
- profile: profile.max_images images; backbone: its pretraining steps ×
  batch (0 for weights that are only loaded); prepare: the images listed;
  world, collect, report: one job's time.
`runs` is the seeds a job runs (train, fuse, evaluate; 1 for the other
stages): each seed builds and loads its model again. `overhead` and `rate`
are fitted per stage over the record's jobs by
bounded least squares (scipy.optimize.lsq_linear; the overhead at most the
smallest job's time a run), so a small record's fixed costs (imports, loading
the backbone) are not multiplied by the work, nor is the work priced at zero
when load made equal jobs take unequal times; a stage whose jobs still show
no growth with their work (the fitted rate explains under 1% of its longest
job: a test-size training run is all fixed costs) is
priced at the device's rate, fitted over all stages' jobs at once (the work
is GFLOPs of one model on one device); a
stage whose recorded jobs all did the same work cannot tell the two apart
and is scaled in proportion (erring on the expensive side).
Memory is not extrapolated: the record's largest peak RSS per stage (host,
Snakemake's max_rss) and torch's peak GPU memory of training and evaluation
grow with batch size, class count and model size, not with images or epochs;
the plan says when the record's model differs. The estimate is only as good
as the record is close: a record made on another kind of device (a CPU run
for a GPU cluster) prices that device, and the plan names it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy.optimize import lsq_linear

from dear.config.check import split_size
from dear.data import coop
from dear.errors import DearError
from dear.methods.recipe import epochs_for
from dear.config.params import Params, validate, world_needed
from dear.compute.probe import arch_config

TRAINS_NOTHING = ("zeroshot",)
FITS_FEATURES = ("linear_probe",)  # train encodes its training and validation shots once, then fits on CPU
# CoOp's split sizes (classes, all images listed, test images), for a config whose data.root is not there yet
# (the paper config's placeholder): CoOp's DATASETS.md / the CoOp paper's dataset table; ImageNet's test = its val.
COOP_SIZES = {
    "imagenet": (1000, 1_331_167, 50_000), "caltech-101": (100, 8_242, 2_465), "oxford_pets": (37, 7_349, 3_669),
    "stanford_cars": (196, 16_185, 8_041), "oxford_flowers": (102, 8_189, 2_463), "food-101": (101, 101_000, 30_300),
    "fgvc_aircraft": (100, 10_000, 3_333), "sun397": (397, 39_700, 19_850), "dtd": (47, 5_640, 1_692),
    "eurosat": (10, 27_000, 8_100), "ucf101": (101, 13_320, 3_783), "imagenetv2": (1000, 10_000, 10_000),
    "imagenet-sketch": (1000, 50_889, 50_889), "imagenet-adversarial": (200, 7_500, 7_500),
    "imagenet-rendition": (200, 30_000, 30_000),
}


@dataclass(frozen=True)
class Size:
    classes: int
    images: int   # every image `prepare` lists
    test: int


def plan(params: Params, record: dict) -> pd.DataFrame:
    """One row per stage: jobs, estimated seconds, the record's peak memory; the last row is the total."""
    recorded = _recorded_params(record)
    jobs = pd.DataFrame(record["jobs"])
    if jobs.empty:
        raise DearError("the record holds no job's time (no benchmark files were given to `dear report`); "
                        "rerun the report with --benchmarks <output_root>/logs")
    jobs["work"] = [work(recorded, job) for job in jobs["job"]]
    jobs["runs"] = [runs(recorded, rule) for rule in jobs["rule"]]
    planned = pd.DataFrame({"job": planned_jobs(params)})
    planned["rule"] = planned["job"].str.split("/").str[0]
    planned["work"] = [work(params, job) for job in planned["job"]]
    planned["runs"] = [runs(params, rule) for rule in planned["rule"]]
    device_rate = pooled_rate(jobs)
    rows = []
    for rule, mine in planned.groupby("rule", sort=False):
        seen, kin = jobs[jobs["rule"] == rule], ""
        if seen.empty and rule.endswith(KIN_SUFFIXES):  # a protocol the record did not run: its stage's jobs
            kin = rule.rsplit("_", 1)[0]
            seen = jobs[jobs["rule"].str.split("_").str[0] == kin]
            kin = f" of {kin} (the record ran no {rule} job; the same stage, the same units of work)"
        if seen.empty:
            rows.append({"rule": rule, "jobs": len(mine), "seconds": np.nan, "max_rss_mb": np.nan,
                         "basis": "no job of this stage in the record"})
            continue
        overhead, rate = fit(seen["work"].to_numpy(float), seen["seconds"].to_numpy(float), seen["runs"].to_numpy(float))
        basis = f"{len(seen)} recorded jobs{kin}: {overhead:.1f} s a run + {rate:.3g} s per unit of work"
        if shows_no_work(rate, seen) and mine["work"].max() > seen["work"].max() and device_rate > rate:
            rate = device_rate  # its jobs' times did not grow with their work (fixed costs, load): the device's rate
            basis = f"{len(seen)} recorded jobs{kin}: {overhead:.1f} s a run + the device's {rate:.3g} s per unit of work"
        seconds = float((overhead * mine["runs"] + rate * mine["work"]).sum())
        rows.append({"rule": rule, "jobs": len(mine), "seconds": seconds, "max_rss_mb": float(seen["max_rss_mb"].max()),
                     "basis": basis})
    frame = pd.DataFrame(rows)
    total = {"rule": "all", "jobs": int(frame["jobs"].sum()), "seconds": float(frame["seconds"].sum(min_count=1)),
             "max_rss_mb": float(frame["max_rss_mb"].max()), "basis": ""}
    return pd.concat([frame, pd.DataFrame([total])], ignore_index=True)


def fit(work: np.ndarray, seconds: np.ndarray, runs: np.ndarray | None = None) -> tuple[float, float]:
    """(overhead, rate) >= 0 with seconds ≈ overhead × runs + rate × work (bounded least squares).

    A job's time holds its overhead, so the overhead per run is at most the smallest job's time per run:
    a noisy record (equal work timed apart by load) cannot put all the time into the overhead and price
    a larger config at its fixed costs alone. With one size of job in the record, overhead and rate
    cannot be told apart: the time is then taken as proportional to the work (no overhead), which errs
    on the expensive side when the plan is larger.
    """
    runs = np.ones_like(work) if runs is None else runs
    valid = ~np.isnan(seconds)
    if not valid.any():
        return np.nan, np.nan
    if len(np.unique(work[valid])) < 2:
        size = float(work[valid][0])
        if size > 0:
            return 0.0, float(seconds[valid].mean()) / size
        return float((seconds[valid] / runs[valid]).mean()), 0.0
    (overhead,), rate = _bounded_fit([runs[valid]], work[valid], seconds[valid])
    return overhead, rate


def _bounded_fit(runs: list[np.ndarray], work: np.ndarray, seconds: np.ndarray) -> tuple[list[float], float]:
    """([overhead of each column of runs], rate) >= 0 with seconds ≈ Σ overhead · runs + rate · work, each overhead
    at most the smallest time a run of the jobs it covers (a job's time holds its overhead)."""
    scale = max(float(work.max()), 1.0)  # keep the columns of the system at a similar scale
    caps = [max(float((seconds / np.where(column > 0, column, np.nan))[column > 0].min()), 1e-9)  # lower < upper
            for column in runs]
    found = lsq_linear(np.column_stack([*runs, work / scale]), seconds,
                       bounds=([0.0] * (len(runs) + 1), [*caps, np.inf]))
    return [float(x) for x in found.x[:-1]], float(found.x[-1]) / scale


def shows_no_work(rate: float, seen: pd.DataFrame) -> bool:
    """Whether the fitted rate explains under 1% of the stage's longest recorded job: its time is fixed costs."""
    most = float(seen["work"].max())
    return most > 0 and rate * most < 0.01 * float(seen["seconds"].max())


def pooled_rate(jobs: pd.DataFrame) -> float:
    """Seconds per unit of work of the record's device, over every stage's jobs at once (an overhead per stage).

    The work is GFLOPs of one model on one device, so the stages share a throughput: a stage whose own jobs
    cannot show how time grows with work (a tiny training run is all fixed costs) is priced at it."""
    valid = jobs[~jobs["seconds"].isna()]
    rules = sorted(valid["rule"].unique())
    if valid.empty or valid["work"].max() <= 0:
        return 0.0
    columns = [np.where(valid["rule"] == rule, valid["runs"], 0.0) for rule in rules]
    return _bounded_fit(columns, valid["work"].to_numpy(float), valid["seconds"].to_numpy(float))[1]


KIN_SUFFIXES = ("_transfer", "_fewshot")  # train_fewshot is priced from train's jobs when the record has none
SEEDED = ("train", "train_transfer", "train_fewshot", "fuse", "fuse_transfer", "fuse_fewshot", "evaluate",
          "evaluate_transfer", "evaluate_fewshot")


def runs(params: Params, rule: str) -> int:
    """How many times a job of `rule` builds its model: once per seed for the seeded stages, else once."""
    return len(params.data.seeds) if rule in SEEDED else 1


def _recorded_params(record: dict) -> Params:
    params, problems = validate(record["params"], "record.json")
    if params is None:
        raise DearError(f"record.json: its params are not valid for this version ({problems[0]}); "
                        "plan from a record made by this version")
    return params


# --- the jobs of a config, and their work ------------------------------------------------

def planned_jobs(params: Params) -> list[str]:
    """The jobs of a config, named as their benchmark files are (logs/<job>.benchmark.tsv)."""
    study, methods = params.study, params.study.methods
    jobs = [*(["world"] if world_needed(params) else []), "backbone", "profile", "report"]  # protocols off: no job
    jobs += [f"prepare/{d}" for d in params.data.datasets]
    for rule in ("train", "fuse", "evaluate"):
        jobs += [f"{rule}/{m}/{d}" for m in methods for d in study.base_to_novel]
        jobs += [f"{rule}_transfer/{m}" for m in methods] if study.transfer_on is not None else []
        jobs += [f"{rule}_fewshot/{m}/{d}/shots{k}" for m in methods for d, k in study.few_shot_runs()]
    return jobs + [f"collect/{m}" for m in methods]


def work(params: Params, job: str) -> float:
    """The job's work in the units of its stage (module docstring)."""
    rule, *parts = job.split("/")
    image, prompt = image_gflops(params.model.arch), prompt_gflops(params.model.arch)
    seeds = len(params.data.seeds)
    if rule == "train_fewshot":  # K shots of every class, the recipe of K
        method, dataset, shots = parts[0], parts[1], int(parts[2].removeprefix("shots"))
        if method in TRAINS_NOTHING:
            return 0.0
        classes = size(params, dataset).classes
        if method in FITS_FEATURES:  # one forward pass of its K training and min(K, val_shots) validation shots
            return seeds * (shots + min(shots, params.data.val_shots)) * classes * image
        images = shots * classes
        passes, steps, cache = length(params.train.recipe(method, dataset, "few_shot", shots), images, shots)
        return seeds * ((3 * passes + cache) * images * image + steps * classes * 3 * prompt)
    if rule == "fuse_fewshot":
        classes = size(params, parts[1]).classes
        shots = int(parts[2].removeprefix("shots"))
        return seeds * (min(shots, params.data.val_shots) * classes * image + classes * prompt)
    if rule == "evaluate_fewshot":
        scored = size(params, parts[1])
        return seeds * (scored.test * image + scored.classes * prompt)
    if rule in ("train", "train_transfer"):
        method = parts[0]
        transfer = rule == "train_transfer"
        dataset = params.study.transfer_on.source if transfer else parts[1]
        if method in TRAINS_NOTHING:
            return 0.0
        classes = _classes(params, dataset, transfer)
        if method in FITS_FEATURES:  # one forward pass of each shot, no text tower (the fits: seconds)
            return seeds * (params.data.shots + params.data.val_shots) * classes * image
        images = params.data.shots * classes
        resolved = params.train.recipe(method, dataset, "transfer" if transfer else "base_to_novel")
        passes, steps, cache = length(resolved, images, params.data.shots)
        return seeds * ((3 * passes + cache) * images * image + steps * classes * 3 * prompt)
    if rule in ("fuse", "fuse_transfer"):
        transfer = rule == "fuse_transfer"
        dataset = params.study.transfer_on.source if transfer else parts[1]
        classes = _classes(params, dataset, transfer)
        return seeds * (params.data.val_shots * classes * image + classes * prompt)
    if rule in ("evaluate", "evaluate_transfer"):
        if rule == "evaluate":
            scored = [(parts[1], size(params, parts[1]).test, size(params, parts[1]).classes)]
        else:
            transfer = params.study.transfer_on
            scored = [(d, size(params, d).test, size(params, d).classes)
                      for d in [transfer.source, *transfer.cross_dataset, *transfer.domain_generalization]]
        return seeds * sum(test * image + classes * prompt for _, test, classes in scored)
    if rule == "prepare":
        return float(size(params, parts[0]).images)
    if rule == "profile":
        return params.profile.max_images * image
    if rule == "backbone":
        pretraining = params.model.pretrained == "embedded"
        return params.backbone.steps * params.backbone.batch_size * 3 * image if pretraining else 0.0
    return 1.0  # world, collect, report: one job's time


def length(resolved, images: int, shots: int) -> tuple[float, int, int]:
    """(passes over the training images, steps, forward-only passes before the first step) of one run, as the
    trainer schedules it (dear.train.trainer.schedule_of): the recipe's epochs, raised to reach `min_steps` as
    `dear train` raises them, or `iterations_per_shot` x K steps (CLIP-LoRA); `augment_epochs` cache passes
    (Tip-Adapter-F)."""
    batch = int(resolved.get("batch_size", 1))
    per_shot = resolved.get("iterations_per_shot")
    cache = int(resolved.get("augment_epochs") or 0)
    if per_shot is not None:
        steps = int(per_shot) * shots
        return steps * min(batch, images) / images, steps, cache
    epochs = epochs_for(int(resolved.get("epochs") or 0), batch, images, resolved.get("min_steps"),
                        resolved.get("drop_last"))
    return epochs, epochs * math.ceil(images / batch), cache


def _classes(params: Params, dataset: str, transfer: bool) -> int:
    """Classes a run trains on: all of the transfer source, else the base half (CoOp: the first ceil(n/2))."""
    classes = size(params, dataset).classes
    return classes if transfer else math.ceil(classes / 2)


def size(params: Params, dataset: str) -> Size:
    """A dataset's classes, listed images and test images: from the world's params, CoOp's split file, or
    CoOp's published sizes when the data is not there yet."""
    if params.data.source == "embedded":
        from dear.data import world

        spec = next((s for s in world.dataset_specs(params.world) if s.name == dataset), None)
        if spec is not None:
            return Size(len(spec.classnames), len(spec.classnames) * sum(spec.per_class),
                        len(spec.classnames) * spec.per_class[2])
    test = split_size(params, dataset, "test")
    if test is not None and dataset in coop.SPECS:
        path = coop.SPECS[dataset].dataset_dir(Path(params.data.root)) / coop.SPECS[dataset].split_file
        splits = json.loads(path.read_text())
        labels = {entry[1] for entries in splits.values() for entry in entries}
        return Size(len(labels), sum(len(entries) for entries in splits.values()), test)
    if dataset in COOP_SIZES:
        return Size(*COOP_SIZES[dataset])
    raise DearError(f"data.datasets: no size known for {dataset!r}; point data.root at its folder")


def image_gflops(arch: str) -> float:
    """GFLOPs of one image through the vision tower: 2 × layers × (12 T d² + 2 T² d), T = patches + 1."""
    vision = _config(arch)["vision_cfg"]
    tokens = (vision["image_size"] // vision["patch_size"]) ** 2 + 1
    return _transformer_gflops(vision["layers"], vision["width"], tokens)


def prompt_gflops(arch: str) -> float:
    """GFLOPs of one prompt through the text tower (the context length in tokens)."""
    config = _config(arch)
    text = config["text_cfg"]
    return _transformer_gflops(text["layers"], text["width"], text.get("context_length", 77))


def _transformer_gflops(layers: int, width: int, tokens: int) -> float:
    return 2 * layers * (12 * tokens * width**2 + 2 * tokens**2 * width) / 1e9


def _config(arch: str) -> dict:
    config = arch_config(arch)
    if config is None:
        raise DearError(f"model.arch: no config found for {arch!r}; use an open_clip architecture or a config file")
    return config


# --- the text --------------------------------------------------------------------------------

def text(frame: pd.DataFrame, params: Params, record: dict, source: str) -> str:
    """The plan as a person reads it."""
    devices = record.get("devices") or [{}]
    cuda = sorted({name for d in devices for name in d.get("cuda", [])})
    kind = f"GPU ({', '.join(cuda)})" if cuda else f"CPU ({', '.join(sorted({str(d.get('cpu')) for d in devices}))})"
    recorded = _recorded_params(record).model.arch
    lines = [f"Estimated cost of {params.output_root} ({params.model.arch}, {len(params.study.methods)} methods, "
             f"{len(params.data.seeds)} seeds), scaled from the record of {source}, made on {kind}:", "",
             f"{'stage':<20} {'jobs':>5} {'device hours':>13} {'peak RSS':>10}  basis"]
    for row in frame.itertuples(index=False):
        hours = "?" if row.seconds != row.seconds else f"{row.seconds / 3600:.2f}" if row.seconds >= 360 \
            else f"{row.seconds / 3600:.4f}"
        rss = "?" if row.max_rss_mb != row.max_rss_mb else f"{row.max_rss_mb / 1024:.1f} GB"
        lines.append(f"{row.rule:<20} {row.jobs:>5} {hours:>13} {rss:>10}  {row.basis}")
    peak = record.get("peak_gpu_memory_mb")
    lines += ["", f"Peak GPU memory (torch's record in that run): {'none recorded' if peak is None else f'{peak:.0f} MB'}."]
    if recorded != params.model.arch:
        lines.append(f"The record ran {recorded}, this config {params.model.arch}: time is scaled by the model's "
                     "GFLOPs, memory is not comparable.")
    if not cuda:
        lines.append("The record ran on CPU: these are CPU hours. For a GPU cluster, plan from the record of a short "
                     "pilot on one of its nodes (the same config with fewer epochs or datasets).")
    lines.append("Device hours: the sum of the jobs' wall time (jobs that run in parallel overlap). How the estimate "
                 "scales: dear/pipeline/plan.py and docs/report.md.")
    return "\n".join(lines) + "\n"


def run(params: Params, record_path: Path) -> str:
    """`dear plan`: read the record (a report folder or an output root holding report/) and price `params`."""
    for folder in (Path(record_path), Path(record_path) / "report"):
        if (folder / "record.json").is_file():
            record = json.loads((folder / "record.json").read_text())
            return text(plan(params, record), params, record, str(folder))
    raise DearError(f"--record {record_path}: no record.json here or in its report/; pass the report folder of a run "
                    "(a pilot of this config on the target machines prices it best)")
