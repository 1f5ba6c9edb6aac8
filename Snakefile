# The study as a Snakemake workflow: the same `dear ...` commands as dvc.yaml.
# Run: snakemake --cores 2   (or --profile workflow/profiles/slurm on a cluster)
# Another config: snakemake --configfile configs/paper-vitb16.yaml   (it replaces params.yaml,
# it is not merged into it; --config KEY=VALUE overrides either). Its outputs go under its output_root.
# Before it plans, it reads the config as `dear check` does and stops on a problem (a dry run too);
# a job whose outputs were made otherwise than the config says reruns, named in one line (docs/engines.md).

if not workflow.overwrite_configfiles:
    configfile: "params.yaml"

include: "workflow/rules/common.smk"
include: "workflow/rules/world.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/fewshot.smk"
include: "workflow/rules/report.smk"

rule all:
    input:
        rooted("report"),
        expand(rooted("data/{dataset}"), dataset=PARAMS.data.datasets),  # data.datasets: all prepared


# Before the first job (one handler: a second `onstart:` would replace this one), not in dry runs,
# and Slurm jobs (run with --no-hooks) never repeat it: nothing this config writes may land outside
# its output root, and this machine has what the config needs (data folders, weights, device).
onstart:
    slurm_logs_stay_under_the_root()
    if MACHINE:
        from dear.pipeline.engines import stop
        stop([f"error: {line}" for line in MACHINE], CONFIG, "no job was started")


# A failed run ends with the jobs that failed for good and the logs to read.
onerror:
    shell("python3 workflow/scripts/summarize_failures.py {log:q}")
