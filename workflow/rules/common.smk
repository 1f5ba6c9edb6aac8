# Shared helpers for the rules: the config in use (read and checked as `dear check` does), where its
# outputs go, the fan-out lists, the code each stage runs, and which jobs rerun because their outputs
# were made otherwise than this config says (dear.pipeline.stale).
import os
import re
import sys
from pathlib import Path

from snakemake.exceptions import WorkflowError

from dear.pipeline import jobs as dear_jobs
from dear.pipeline import engines as dear_engines
from dear.pipeline import stale as dear_stale
from dear.config import strict_yaml
from dear.config.params import Params, world_needed
from dear.compute.cpus import wanted as cpus_wanted

# One world and backbone per machine: profiles/default turns Snakemake's output cache on (--cache), kept in
# $SNAKEMAKE_OUTPUT_CACHE, by default where dear's DVC stages look too (dear.pipeline.machine_cache). Snakemake reads the
# variable after this file, when it plans; Slurm jobs re-reading this file leave it as the main process set it.
if workflow.workflow_settings.cache is not None:  # --cache (the default profile's)
    if not os.environ.get("SNAKEMAKE_OUTPUT_CACHE"):
        from dear.pipeline.machine_cache import location as _cache_location

        os.environ["SNAKEMAKE_OUTPUT_CACHE"] = str(_cache_location())
    try:
        os.makedirs(os.environ["SNAKEMAKE_OUTPUT_CACHE"], exist_ok=True)
    except OSError:  # not writable here: Snakemake says so when it stores, and the study runs on
        pass

# Every path a rule writes is under the config's output_root ('.' for the demo): R is the prefix
# shell commands put before each path ("" or "<root>/"), rooted() the same for input/output lists.
ROOT = os.path.normpath(str(config.get("output_root", ".")))
R = "" if ROOT == "." else ROOT + "/"


def rooted(path):
    """`path` (a pattern relative to the output root) as Snakemake and the shell see it."""
    return R + path


def config_files():
    """The config files this run read: params.yaml, or each --configfile as given."""
    return [os.path.relpath(path) if Path(path).resolve().is_relative_to(Path.cwd()) else str(path)
            for path in workflow.overwrite_configfiles] or ["params.yaml"]


def params_file_name():
    """The file every `dear --params` reads: params.yaml, or the one --configfile as given; with several, or
    with --config overrides, the merged config under the output root (`params_file` writes it)."""
    given = config_files()
    return given[0] if not workflow.config_settings.config and len(given) <= 1 else rooted("logs/snakemake-config.yaml")


def params_file():
    """`params_file_name()`, the merged config written first when there is one (rewritten only when it
    changes, so a Slurm job re-reading this Snakefile never races a running job)."""
    merged = params_file_name()
    if merged in config_files():
        return merged
    text = ("# The config of this Snakemake run: its --configfile files merged, then --config on top.\n"
            "# Written by the Snakefile; every job of the run reads it (dear --params).\n"
            + strict_yaml.dump(dict(config)))
    if not os.path.exists(merged) or Path(merged).read_text() != text:
        os.makedirs(os.path.dirname(merged), exist_ok=True)
        Path(merged + ".tmp").write_text(text)
        os.replace(merged + ".tmp", merged)
    return merged


# The config in use, checked before anything is planned (Slurm jobs re-reading this file skip it):
# a problem of the values stops here, dry run or not; this machine's problems (MACHINE) are warnings
# in a dry run and stop a real run in `onstart`.
MACHINE = []
if workflow.is_main_process:
    PARAMS, _stop, MACHINE = dear_engines.config_problems(config_files(), dict(config), params_file_name())
    if _stop:
        dear_engines.stop(_stop, params_file_name(), "nothing was planned")
else:
    PARAMS = Params.model_validate(dict(config))
CONFIG = params_file()
if PARAMS.data.source == "embedded" and os.path.normpath(PARAMS.data.root) != rooted("world"):
    dear_engines.stop([f"error: {CONFIG}: data.root is {PARAMS.data.root!r}, but this config's embedded world is drawn "
                    f"into {rooted('world')!r} (output_root/world); set data.root: {rooted('world')}"], CONFIG,
                   "nothing was planned")

STUDY = PARAMS.study
METHODS = list(STUDY.methods)
TRANSFER = STUDY.transfer_on  # None: the transfer protocols are off (no transfer job)
SOURCE = TRANSFER.source if TRANSFER else None
TARGETS = [*TRANSFER.cross_dataset, *TRANSFER.domain_generalization] if TRANSFER else []
FEW_SHOT = STUDY.few_shot_on  # None: the few-shot protocol is off (no few-shot job)
PROFILED = PARAMS.profile.dataset
ROLES = rooted(f"roles/{PROFILED}")  # profile's folder: roles.parquet, the heatmap, the ablation, ...
ROLES_FILE = f"{ROLES}/roles.parquet"  # what train, fuse and evaluate are given
BACKBONE = rooted("backbone")  # card.json, and model.pt when trained here (real weights are used where they lie)
WORLD = rooted("world")  # the embedded datasets in CoOp's layout, and card.json
READS_WORLD = [WORLD] if world_needed(PARAMS) else []  # the world is drawn only when some job reads it

wildcard_constraints:
    dataset=r"[^/]+",  # a folder name: data/<dataset> is prepare's output, never a file in it
    seed=r"\d+",
    shots=r"\d+",
    method="|".join(re.escape(name) for name in METHODS),  # maple+roles: a `+` is not a regex's here

def code(rule):
    """The input holding the code a job of `rule` runs: its code file, .dear/code/<name>.yaml under the output root
    (dear.pipeline.jobs.code: the sha256 of its stage's and method's modules; train-maple, prepare-world_objects, world).
    The Snakefile writes every job's file before planning, and rewrites one only when that code changed, so a job
    reruns when, and only when, the modules it runs changed. A rule declares `code=code("<rule name>")`."""
    def code_file(wildcards):
        return str(dear_jobs.code_file(CODE, JOBS[job_name(rule, wildcards)]))
    return code_file


def values(rule):
    """The input holding the values a job of `rule` reads (.dear/jobs/<stage>/<item>.yaml under the output root,
    dear.pipeline.engines.job_file): the same file DVC's stage reads as a params file. A rule declares
    `values=values("<rule name>")` next to its `code=code("<rule name>")`."""
    def values_file(wildcards):
        return str(dear_engines.job_file(Path(VALUES), JOBS[job_name(rule, wildcards)]))
    return values_file


def job_name(rule, wildcards):
    """DVC's name of the job of `rule` with these wildcards: train@mmrl-world_objects, train_transfer@mmrl, world
    (and the few-shot jobs' shots: train_fewshot@coop-world_objects-4)."""
    items = [wildcards[key] for key in ("method", "dataset", "shots") if key in wildcards.keys()]
    return rule + (f"@{'-'.join(items)}" if items else "")


JOBS = {job.name: job for job in dear_jobs.jobs(PARAMS)}


def evaluations_of(wildcards):
    """The eval folders of every evaluate job of `wildcards.method` (each protocol's, dear.pipeline.jobs): what collect lists."""
    return [job.folder for job in dear_jobs.evaluations(list(JOBS.values()), wildcards.method)]


VALUES = rooted(".dear/jobs")  # each job's values file and, beside, its code file, as DVC's check stage writes them
CODE = dear_engines.code_folder(VALUES)
if workflow.is_main_process:
    dear_engines.write_job_files(PARAMS, VALUES, list(JOBS.values()))
_HASHES, _SEEN, _FORCED = {}, set(), set()


def provenance_checked(rule):
    """An input function adding no input: while Snakemake plans, it compares the outputs of this job with
    what this config would make (dear.pipeline.stale) and, when they differ, prints one line naming the keys and
    forces the job, without making it a target. `-n` shows it too; this machine's problems are shown once."""
    def check(wildcards):
        if not workflow.is_main_process or workflow.dag is None:
            return []
        if not _SEEN and workflow.dryrun:
            dear_engines.warn(MACHINE, CONFIG)
        name = job_name(rule, wildcards)
        if name not in _SEEN:
            _SEEN.add(name)
            job = JOBS.get(name)
            why = job and dear_stale.out_of_date(PARAMS, job, _HASHES)
            if why:
                print(f"out of date: {why}", file=sys.stderr)
                _FORCED.add(name)
        if name in _FORCED:
            job = JOBS[name]
            workflow.dag.forcefiles.update([job.folder, *(file for _, file in job.records)])
        return []
    return check


def cpus_of(stage):
    """A rule's `threads:`: the CPUs `dear <stage>` uses under this config by itself (dear/compute/cpus.py), so that
    Snakemake never runs more than --cores at once. It hands them to the job as OMP_NUM_THREADS, which the stage
    reads, and scales them down to --cores; a DVC or by-hand run uses the same number."""
    return cpus_wanted(config, stage)


def slurm_logs_stay_under_the_root():
    """Refuse to start when the Slurm executor's job logs would land outside this config's output root."""
    logdir = getattr(workflow.executor_settings, "logdir", None)
    if ROOT == "." or logdir is None or Path(logdir).resolve().is_relative_to(Path(ROOT).resolve()):
        return
    raise WorkflowError(f"Slurm job logs would go to {logdir}, outside output_root {ROOT} of {CONFIG}; "
                        f"add --slurm-logdir {rooted('logs/slurm')}")
