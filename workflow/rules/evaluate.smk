# fuse and evaluate every trained model: runs/ (base-to-novel) and transfer/ (all classes).
EVAL_CODE = code(*MODEL, "dear/evaluation.py", "dear/results.py", "dear/train")


rule fuse:
    """Refit the fusion weights on the run's validation shots (network frozen)."""
    input:
        code=code(*EVAL_CODE, "dear/stages/fuse.py"),
        model="runs/{method}/{dataset}/seed{seed}/model.pt",
        backbone=BACKBONE,
        fewshot="data/{dataset}/fewshot-seed{seed}.parquet",
        roles=ROLES,
        world=WORLD,
    output:
        "runs/{method}/{dataset}/seed{seed}/fusion.json",
    params:
        section=section("fusion", "evaluate"),
    log:
        "logs/fuse/{method}/{dataset}/seed{seed}.log",
    shell:
        "dear fuse --params params.yaml --model {input.model} --fewshot {input.fewshot} --classes base"
        " --backbone backbone --roles {input.roles} --out {output} --log {log}"


rule fuse_transfer:
    """Refit the fusion weights of an all-class model on the source's validation shots."""
    input:
        code=code(*EVAL_CODE, "dear/stages/fuse.py"),
        model="transfer/{method}/seed{seed}/model.pt",
        backbone=BACKBONE,
        fewshot=f"data/{SOURCE}/fewshot-seed{{seed}}.parquet",
        roles=ROLES,
        world=WORLD,
    output:
        "transfer/{method}/seed{seed}/fusion.json",
    params:
        section=section("fusion", "evaluate"),
    log:
        "logs/fuse_transfer/{method}/seed{seed}.log",
    shell:
        "dear fuse --params params.yaml --model {input.model} --fewshot {input.fewshot} --classes all"
        " --backbone backbone --roles {input.roles} --out {output} --log {log}"


rule evaluate:
    """Base-to-novel: per-class counts on the base and novel test classes."""
    input:
        code=code(*EVAL_CODE, "dear/stages/evaluate.py"),
        model="runs/{method}/{dataset}/seed{seed}/model.pt",
        fusion="runs/{method}/{dataset}/seed{seed}/fusion.json",
        backbone=BACKBONE,
        manifest="data/{dataset}/manifest.parquet",
        roles=ROLES,
        world=WORLD,
    output:
        table="runs/{method}/{dataset}/seed{seed}/eval.parquet",
        metrics="runs/{method}/{dataset}/seed{seed}/metrics.json",
    params:
        section=section("fusion", "evaluate", "study"),
        out="runs/{method}/{dataset}/seed{seed}",
    log:
        "logs/evaluate/{method}/{dataset}/seed{seed}.log",
    shell:
        "dear evaluate --params params.yaml --model {input.model} --fusion {input.fusion} --source data/{wildcards.dataset}"
        " --classes base --data data --backbone backbone --roles {input.roles} --out {params.out} --log {log}"


rule evaluate_transfer:
    """Cross-dataset and domain generalization: per-class counts on the source and every target."""
    input:
        code=code(*EVAL_CODE, "dear/stages/evaluate.py"),
        model="transfer/{method}/seed{seed}/model.pt",
        fusion="transfer/{method}/seed{seed}/fusion.json",
        backbone=BACKBONE,
        manifests=expand("data/{dataset}/manifest.parquet", dataset=[SOURCE, *TARGETS]),
        roles=ROLES,
        world=WORLD,
    output:
        table="transfer/{method}/seed{seed}/eval.parquet",
        metrics="transfer/{method}/seed{seed}/metrics.json",
    params:
        section=section("fusion", "evaluate", "study"),
        out="transfer/{method}/seed{seed}",
    log:
        "logs/evaluate_transfer/{method}/seed{seed}.log",
    shell:
        f"dear evaluate --params params.yaml --model {{input.model}} --fusion {{input.fusion}} --source data/{SOURCE}"
        " --classes all --data data --backbone backbone --roles {input.roles} --out {params.out} --log {log}"
