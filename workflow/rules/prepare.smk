rule prepare:
    """Index one dataset in CoOp's layout: manifest and a few-shot table per seed."""
    input:
        code=code("prepare"),
        values=values("prepare"),
        world=READS_WORLD,
        stale=provenance_checked("prepare"),
    output:
        manifest=rooted("data/{dataset}/manifest.parquet"),
        excluded=rooted("data/{dataset}/excluded.parquet"),
        fewshot=expand(rooted("data/{{dataset}}/fewshot-seed{seed}.parquet"), seed=SEEDS),
    priority: 2  # seconds of work that every job of its dataset waits for: the greedy scheduler would otherwise
                 # prefer jobs with bigger inputs and hold back a transfer target's evaluations to the end
    threads: cpus_of("prepare")
    log:
        rooted("logs/prepare/{dataset}.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/prepare/{dataset}.benchmark.tsv")
    shell:
        "dear prepare --params {CONFIG} --dataset {wildcards.dataset} --out {R}data/{wildcards.dataset} --log {log}"
