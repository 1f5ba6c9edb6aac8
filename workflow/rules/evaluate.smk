# fuse and evaluate every trained model, one job per method x dataset (every seed):
# runs/ (base-to-novel) and transfer/ (all classes). Each job writes one folder (fuse: seed<S>/fusion.json,
# eval: seed<S>/eval.parquet and metrics.json) and reads the folders of the jobs before it.


rule fuse:
    """Refit the fusion weights on each seed's validation shots (network frozen)."""
    input:
        code=code("fuse"),
        values=values("fuse"),
        model=rooted("runs/{method}/{dataset}/train"),
        backbone=BACKBONE,
        data=rooted("data/{dataset}"),
        roles=ROLES,
        world=READS_WORLD,
        stale=provenance_checked("fuse"),
    output:
        directory(rooted("runs/{method}/{dataset}/fuse")),
    threads: cpus_of("fuse")
    log:
        rooted("logs/fuse/{method}/{dataset}.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/fuse/{method}/{dataset}.benchmark.tsv")
    shell:
        "dear fuse --params {CONFIG} --model {R}runs/{wildcards.method}/{wildcards.dataset}/train/seed{{seed}}/model.pt --method {wildcards.method}"
        " --fewshot {R}data/{wildcards.dataset}/fewshot-seed{{seed}}.parquet --classes base --backbone {R}backbone"
        " --roles {ROLES_FILE} --out {R}runs/{wildcards.method}/{wildcards.dataset}/fuse/seed{{seed}}/fusion.json"
        " --log {log}"


if TRANSFER:  # the transfer protocols are on
    rule fuse_transfer:
        """Refit the fusion weights of each all-class model on the source's validation shots."""
        input:
            code=code("fuse_transfer"),
            values=values("fuse_transfer"),
            model=rooted("transfer/{method}/train"),
            backbone=BACKBONE,
            data=rooted(f"data/{SOURCE}"),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("fuse_transfer"),
        output:
            directory(rooted("transfer/{method}/fuse")),
        priority: 1  # the transfer chain first (train_transfer)
        threads: cpus_of("fuse")
        log:
            rooted("logs/fuse_transfer/{method}.log"),
        benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
            rooted("logs/fuse_transfer/{method}.benchmark.tsv")
        shell:
            "dear fuse --params {CONFIG} --model {R}transfer/{wildcards.method}/train/seed{{seed}}/model.pt --method {wildcards.method}"
            " --fewshot {R}data/{SOURCE}/fewshot-seed{{seed}}.parquet --classes all --backbone {R}backbone"
            " --roles {ROLES_FILE} --out {R}transfer/{wildcards.method}/fuse/seed{{seed}}/fusion.json --log {log}"


rule evaluate:
    """Base-to-novel: per-class counts on the base and novel test classes, every seed."""
    input:
        code=code("evaluate"),
        values=values("evaluate"),
        model=rooted("runs/{method}/{dataset}/train"),
        fusion=rooted("runs/{method}/{dataset}/fuse"),
        backbone=BACKBONE,
        data=rooted("data/{dataset}"),
        roles=ROLES,
        world=READS_WORLD,
        stale=provenance_checked("evaluate"),
    output:
        directory(rooted("runs/{method}/{dataset}/eval")),
    threads: cpus_of("evaluate")
    log:
        rooted("logs/evaluate/{method}/{dataset}.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/evaluate/{method}/{dataset}.benchmark.tsv")
    shell:
        "dear evaluate --params {CONFIG} --model {R}runs/{wildcards.method}/{wildcards.dataset}/train/seed{{seed}}/model.pt --method {wildcards.method}"
        " --fusion {R}runs/{wildcards.method}/{wildcards.dataset}/fuse/seed{{seed}}/fusion.json"
        " --source {R}data/{wildcards.dataset} --classes base --data {R}data --backbone {R}backbone --roles {ROLES_FILE}"
        " --out {R}runs/{wildcards.method}/{wildcards.dataset}/eval/seed{{seed}} --log {log}"


if TRANSFER:  # the transfer protocols are on
    rule evaluate_transfer:
        """Cross-dataset and domain generalization: per-class counts on the source and every target, every seed."""
        input:
            code=code("evaluate_transfer"),
            values=values("evaluate_transfer"),
            model=rooted("transfer/{method}/train"),
            fusion=rooted("transfer/{method}/fuse"),
            backbone=BACKBONE,
            data=expand(rooted("data/{dataset}"), dataset=[SOURCE, *TARGETS]),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("evaluate_transfer"),
        output:
            directory(rooted("transfer/{method}/eval")),
        priority: 1  # the transfer chain first (train_transfer)
        threads: cpus_of("evaluate")
        log:
            rooted("logs/evaluate_transfer/{method}.log"),
        benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
            rooted("logs/evaluate_transfer/{method}.benchmark.tsv")
        shell:
            "dear evaluate --params {CONFIG} --model {R}transfer/{wildcards.method}/train/seed{{seed}}/model.pt --method {wildcards.method}"
            " --fusion {R}transfer/{wildcards.method}/fuse/seed{{seed}}/fusion.json --source {R}data/{SOURCE}"
            " --classes all --data {R}data --backbone {R}backbone --roles {ROLES_FILE}"
            " --out {R}transfer/{wildcards.method}/eval/seed{{seed}} --log {log}"
