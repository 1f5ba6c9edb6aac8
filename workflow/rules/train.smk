# One job per method x dataset trains every seed of data.seeds on the base classes
# (runs/), and one per method on all classes of the transfer source (transfer/).
# A job runs its seeds in one process: the ~5 s of imports are paid once, not per seed.
# {seed} in a path is the dear command's own placeholder (one run per seed). Every job writes one
# folder (seed<S>/model.pt, seed<S>/train_log.parquet), and the jobs after it read the folder.


rule train:
    """Train one method on one dataset's base-class shots, every seed (each resumes from its checkpoint)."""
    input:
        code=code("train"),
        values=values("train"),
        backbone=BACKBONE,
        data=rooted("data/{dataset}"),
        roles=ROLES,
        world=READS_WORLD,
        stale=provenance_checked("train"),
    output:
        directory(rooted("runs/{method}/{dataset}/train")),
    threads: cpus_of("train")
    log:
        rooted("logs/train/{method}/{dataset}.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/train/{method}/{dataset}.benchmark.tsv")
    shell:
        "dear train --params {CONFIG} --method {wildcards.method} --dataset {wildcards.dataset} --classes base"
        " --backbone {R}backbone --fewshot {R}data/{wildcards.dataset}/fewshot-seed{{seed}}.parquet --roles {ROLES_FILE}"
        " --out {R}runs/{wildcards.method}/{wildcards.dataset}/train/seed{{seed}} --log {log}"


if TRANSFER:  # the transfer protocols are on
    rule train_transfer:
        """Train one method on all classes of the transfer source (cross-dataset and domain generalization), every seed."""
        input:
            code=code("train_transfer"),
            values=values("train_transfer"),
            backbone=BACKBONE,
            data=rooted(f"data/{SOURCE}"),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("train_transfer"),
        output:
            directory(rooted("transfer/{method}/train")),
        priority: 1  # the transfer chains (a source with all classes, every target) are the study's
                     # longest: started first, they end before the short base-to-novel jobs do
        threads: cpus_of("train")
        log:
            rooted("logs/train_transfer/{method}.log"),
        benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
            rooted("logs/train_transfer/{method}.benchmark.tsv")
        shell:
            "dear train --params {CONFIG} --method {wildcards.method} --dataset {SOURCE} --classes all"
            " --backbone {R}backbone --fewshot {R}data/{SOURCE}/fewshot-seed{{seed}}.parquet --roles {ROLES_FILE}"
            " --out {R}transfer/{wildcards.method}/train/seed{{seed}} --log {log}"
