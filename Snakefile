# The study as a Snakemake workflow: the same `dear ...` commands as dvc.yaml.
# Run: snakemake --cores 2   (or --profile workflow/profiles/slurm on a cluster)
# Another config: snakemake --configfile configs/paper-vitb16.yaml   (it replaces params.yaml,
# it is not merged into it; --config KEY=VALUE overrides either). Its outputs go under its output_root.
from snakemake.utils import validate

if not workflow.overwrite_configfiles:
    configfile: "params.yaml"
validate(config, "workflow/schemas/params.schema.yaml")

include: "workflow/rules/common.smk"
include: "workflow/rules/world.smk"
include: "workflow/rules/prepare.smk"
include: "workflow/rules/profile.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/evaluate.smk"
include: "workflow/rules/report.smk"

rule all:
    input:
        rooted("report/results.md"),


# Before the first job (one handler: a second `onstart:` would replace this one), not in dry runs,
# and Slurm jobs (run with --no-hooks) never repeat it: nothing this config writes may land outside
# its output root, and every problem of the config in use (data folders, weights, device, SVD
# rank...) at once.
onstart:
    slurm_logs_stay_under_the_root()
    from dear.check import exit_on_problems
    exit_on_problems(config, CONFIG)


# A failed run ends with the jobs that failed for good and the logs to read.
onerror:
    shell("python3 workflow/scripts/summarize_failures.py {log:q}")
