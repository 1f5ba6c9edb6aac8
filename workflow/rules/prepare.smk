rule prepare:
    """Index one dataset in CoOp's layout: manifest and a few-shot table per seed."""
    input:
        code=code(*CORE, "dear/stages/prepare.py", "dear/data"),
        world=WORLD,
    output:
        manifest="data/{dataset}/manifest.parquet",
        excluded="data/{dataset}/excluded.parquet",
        fewshot=expand("data/{{dataset}}/fewshot-seed{seed}.parquet", seed=SEEDS),
    params:
        section=section("data"),
    log:
        "logs/prepare/{dataset}.log",
    shell:
        "dear prepare --params params.yaml --dataset {wildcards.dataset} --out data/{wildcards.dataset} --log {log}"
