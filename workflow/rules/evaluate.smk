# fuse and evaluate every trained model, one job per method x dataset (every seed):
# runs/ (base-to-novel) and transfer/ (all classes).
EVAL_CODE = code(*MODEL, "dear/evaluation.py", "dear/results.py", "dear/train")


rule fuse:
    """Refit the fusion weights on each seed's validation shots (network frozen)."""
    input:
        code=code(*EVAL_CODE, "dear/stages/fuse.py"),
        model=seeds_of("runs/{method}/{dataset}/train/seed{seed}/model.pt"),
        backbone=BACKBONE,
        fewshot=seeds_of("data/{dataset}/fewshot-seed{seed}.parquet"),
        roles=ROLES,
        world=WORLD,
    output:
        seeds_of("runs/{method}/{dataset}/fuse/seed{seed}/fusion.json"),
    params:
        section=section("fusion", "evaluate"),
    log:
        "logs/fuse/{method}/{dataset}.log",
    shell:
        "dear fuse --params params.yaml --model runs/{wildcards.method}/{wildcards.dataset}/train/seed{{seed}}/model.pt"
        " --fewshot data/{wildcards.dataset}/fewshot-seed{{seed}}.parquet --classes base --backbone backbone"
        " --roles {input.roles} --out runs/{wildcards.method}/{wildcards.dataset}/fuse/seed{{seed}}/fusion.json --log {log}"


rule fuse_transfer:
    """Refit the fusion weights of each all-class model on the source's validation shots."""
    input:
        code=code(*EVAL_CODE, "dear/stages/fuse.py"),
        model=seeds_of("transfer/{method}/train/seed{seed}/model.pt"),
        backbone=BACKBONE,
        fewshot=seeds_of(f"data/{SOURCE}/fewshot-seed{{seed}}.parquet"),
        roles=ROLES,
        world=WORLD,
    output:
        seeds_of("transfer/{method}/fuse/seed{seed}/fusion.json"),
    params:
        section=section("fusion", "evaluate"),
    log:
        "logs/fuse_transfer/{method}.log",
    shell:
        "dear fuse --params params.yaml --model transfer/{wildcards.method}/train/seed{{seed}}/model.pt"
        f" --fewshot data/{SOURCE}/fewshot-seed{{{{seed}}}}.parquet --classes all --backbone backbone"
        " --roles {input.roles} --out transfer/{wildcards.method}/fuse/seed{{seed}}/fusion.json --log {log}"


rule evaluate:
    """Base-to-novel: per-class counts on the base and novel test classes, every seed."""
    input:
        code=code(*EVAL_CODE, "dear/stages/evaluate.py"),
        model=seeds_of("runs/{method}/{dataset}/train/seed{seed}/model.pt"),
        fusion=seeds_of("runs/{method}/{dataset}/fuse/seed{seed}/fusion.json"),
        backbone=BACKBONE,
        manifest="data/{dataset}/manifest.parquet",
        roles=ROLES,
        world=WORLD,
    output:
        table=seeds_of("runs/{method}/{dataset}/eval/seed{seed}/eval.parquet"),
        metrics=seeds_of("runs/{method}/{dataset}/eval/seed{seed}/metrics.json"),
    params:
        section=section("fusion", "evaluate", "study"),
    log:
        "logs/evaluate/{method}/{dataset}.log",
    shell:
        "dear evaluate --params params.yaml --model runs/{wildcards.method}/{wildcards.dataset}/train/seed{{seed}}/model.pt"
        " --fusion runs/{wildcards.method}/{wildcards.dataset}/fuse/seed{{seed}}/fusion.json"
        " --source data/{wildcards.dataset} --classes base --data data --backbone backbone --roles {input.roles}"
        " --out runs/{wildcards.method}/{wildcards.dataset}/eval/seed{{seed}} --log {log}"


rule evaluate_transfer:
    """Cross-dataset and domain generalization: per-class counts on the source and every target, every seed."""
    input:
        code=code(*EVAL_CODE, "dear/stages/evaluate.py"),
        model=seeds_of("transfer/{method}/train/seed{seed}/model.pt"),
        fusion=seeds_of("transfer/{method}/fuse/seed{seed}/fusion.json"),
        backbone=BACKBONE,
        manifests=expand("data/{dataset}/manifest.parquet", dataset=[SOURCE, *TARGETS]),
        roles=ROLES,
        world=WORLD,
    output:
        table=seeds_of("transfer/{method}/eval/seed{seed}/eval.parquet"),
        metrics=seeds_of("transfer/{method}/eval/seed{seed}/metrics.json"),
    params:
        section=section("fusion", "evaluate", "study"),
    log:
        "logs/evaluate_transfer/{method}.log",
    shell:
        "dear evaluate --params params.yaml --model transfer/{wildcards.method}/train/seed{{seed}}/model.pt"
        f" --fusion transfer/{{wildcards.method}}/fuse/seed{{{{seed}}}}/fusion.json --source data/{SOURCE}"
        " --classes all --data data --backbone backbone --roles {input.roles}"
        " --out transfer/{wildcards.method}/eval/seed{{seed}} --log {log}"
