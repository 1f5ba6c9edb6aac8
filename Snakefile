# The study as a Snakemake workflow: the same `dear ...` commands as dvc.yaml.
# Run: snakemake --cores 2   (or --profile workflow/profiles/slurm on a cluster)
from snakemake.utils import validate

configfile: "params.yaml"
validate(config, "workflow/schemas/params.schema.yaml")

include: "workflow/rules/common.smk"
include: "workflow/rules/prepare.smk"

rule all:
    input:
        expand("data/{dataset}/manifest.parquet", dataset=DATASETS),
