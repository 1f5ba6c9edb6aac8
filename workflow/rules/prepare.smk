rule prepare:
    """Index one dataset in CoOp's layout: manifest and a few-shot table per seed."""
    input:
        code=code("prepare"),
        values=values("prepare"),
        world=READS_WORLD,
        stale=provenance_checked("prepare"),
    output:
        directory(rooted("data/{dataset}")),  # manifest.parquet, excluded.parquet, fewshot-seed<S>.parquet
    priority: 2  # seconds of work that every job of its dataset waits for: the greedy scheduler would otherwise
                 # prefer jobs with bigger inputs and hold back a transfer target's evaluations to the end
    threads: cpus_of("prepare")
    log:
        rooted("logs/prepare/{dataset}.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/prepare/{dataset}.benchmark.tsv")
    shell:
        "dear prepare --params {CONFIG} --dataset {wildcards.dataset} --out {R}data/{wildcards.dataset} --log {log}"
