rule prepare:
    """Index one dataset in CoOp's layout: manifest and a few-shot table per seed."""
    input:
        code=code(*CORE, "dear/stages/prepare.py", "dear/data"),
        world=WORLD,
    output:
        manifest=rooted("data/{dataset}/manifest.parquet"),
        excluded=rooted("data/{dataset}/excluded.parquet"),
        fewshot=expand(rooted("data/{{dataset}}/fewshot-seed{seed}.parquet"), seed=SEEDS),
    params:
        section=section("data"),
    log:
        rooted("logs/prepare/{dataset}.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/prepare/{dataset}.benchmark.tsv")
    shell:
        "dear prepare --params {CONFIG} --dataset {wildcards.dataset} --out {R}data/{wildcards.dataset} --log {log}"
