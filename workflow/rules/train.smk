# One model per method x dataset x seed on the base classes (runs/), and one per
# method x seed on all classes of the transfer source (transfer/).
TRAIN_CODE = code(*MODEL, "dear/stages/train.py", "dear/train")


rule train:
    """Train one method on one dataset's base-class shots (resumes from its checkpoint)."""
    input:
        code=TRAIN_CODE,
        backbone=BACKBONE,
        fewshot="data/{dataset}/fewshot-seed{seed}.parquet",
        roles=ROLES,
        world=WORLD,
    output:
        model="runs/{method}/{dataset}/seed{seed}/model.pt",
        log="runs/{method}/{dataset}/seed{seed}/train_log.parquet",
    params:
        section=section("dear", "train", "fusion"),
        out="runs/{method}/{dataset}/seed{seed}",
    log:
        "logs/train/{method}/{dataset}/seed{seed}.log",
    shell:
        "dear train --params params.yaml --method {wildcards.method} --dataset {wildcards.dataset} --seed {wildcards.seed}"
        " --classes base --backbone backbone --fewshot {input.fewshot} --roles {input.roles} --out {params.out} --log {log}"


rule train_transfer:
    """Train one method on all classes of the transfer source (cross-dataset and domain generalization)."""
    input:
        code=TRAIN_CODE,
        backbone=BACKBONE,
        fewshot=f"data/{SOURCE}/fewshot-seed{{seed}}.parquet",
        roles=ROLES,
        world=WORLD,
    output:
        model="transfer/{method}/seed{seed}/model.pt",
        log="transfer/{method}/seed{seed}/train_log.parquet",
    params:
        section=section("dear", "train", "fusion"),
        out="transfer/{method}/seed{seed}",
    log:
        "logs/train_transfer/{method}/seed{seed}.log",
    shell:
        f"dear train --params params.yaml --method {{wildcards.method}} --dataset {SOURCE} --seed {{wildcards.seed}}"
        " --classes all --backbone backbone --fewshot {input.fewshot} --roles {input.roles} --out {params.out} --log {log}"
