# Few-shot learning (study.few_shot): one job per method x dataset x shot count K trains, fuses and
# evaluates every seed on all classes of the dataset, from the dataset's K-shot tables
# (data/<ds>/fewshot-shots<K>-seed<S>.parquet, Dassl's draw for K, which `dear prepare` writes into the
# dataset's folder while the protocol is on); outputs under fewshot/<m>/<ds>/shots<K>/.
# The rules exist only while the protocol is on.

if FEW_SHOT:
    rule train_fewshot:
        """Train one method on K shots of every class of one dataset, every seed."""
        input:
            code=code("train_fewshot"),
            values=values("train_fewshot"),
            backbone=BACKBONE,
            data=rooted("data/{dataset}"),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("train_fewshot"),
        output:
            directory(rooted("fewshot/{method}/{dataset}/shots{shots}/train")),
        threads: cpus_of("train")
        log:
            rooted("logs/train_fewshot/{method}/{dataset}/shots{shots}.log"),
        benchmark:
            rooted("logs/train_fewshot/{method}/{dataset}/shots{shots}.benchmark.tsv")
        shell:
            "dear train --params {CONFIG} --method {wildcards.method} --dataset {wildcards.dataset} --classes all"
            " --shots {wildcards.shots} --backbone {R}backbone"
            " --fewshot {R}data/{wildcards.dataset}/fewshot-shots{wildcards.shots}-seed{{seed}}.parquet --roles {ROLES_FILE}"
            " --out {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/train/seed{{seed}} --log {log}"

    rule fuse_fewshot:
        """Refit the fusion weights of each K-shot model on its own validation shots (min(K, data.val_shots))."""
        input:
            code=code("fuse_fewshot"),
            values=values("fuse_fewshot"),
            model=rooted("fewshot/{method}/{dataset}/shots{shots}/train"),
            backbone=BACKBONE,
            data=rooted("data/{dataset}"),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("fuse_fewshot"),
        output:
            directory(rooted("fewshot/{method}/{dataset}/shots{shots}/fuse")),
        threads: cpus_of("fuse")
        log:
            rooted("logs/fuse_fewshot/{method}/{dataset}/shots{shots}.log"),
        benchmark:
            rooted("logs/fuse_fewshot/{method}/{dataset}/shots{shots}.benchmark.tsv")
        shell:
            "dear fuse --params {CONFIG}"
            " --model {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/train/seed{{seed}}/model.pt"
            " --method {wildcards.method}"
            " --fewshot {R}data/{wildcards.dataset}/fewshot-shots{wildcards.shots}-seed{{seed}}.parquet --classes all"
            " --backbone {R}backbone --roles {ROLES_FILE}"
            " --out {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/fuse/seed{{seed}}/fusion.json"
            " --log {log}"

    rule evaluate_fewshot:
        """Per-class counts of each K-shot model on its dataset's test split, all classes (protocol few_shot_<K>)."""
        input:
            code=code("evaluate_fewshot"),
            values=values("evaluate_fewshot"),
            model=rooted("fewshot/{method}/{dataset}/shots{shots}/train"),
            fusion=rooted("fewshot/{method}/{dataset}/shots{shots}/fuse"),
            backbone=BACKBONE,
            data=rooted("data/{dataset}"),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("evaluate_fewshot"),
        output:
            directory(rooted("fewshot/{method}/{dataset}/shots{shots}/eval")),
        threads: cpus_of("evaluate")
        log:
            rooted("logs/evaluate_fewshot/{method}/{dataset}/shots{shots}.log"),
        benchmark:
            rooted("logs/evaluate_fewshot/{method}/{dataset}/shots{shots}.benchmark.tsv")
        shell:
            "dear evaluate --params {CONFIG}"
            " --model {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/train/seed{{seed}}/model.pt"
            " --method {wildcards.method}"
            " --fusion {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/fuse/seed{{seed}}/fusion.json"
            " --source {R}data/{wildcards.dataset} --classes all --shots {wildcards.shots} --data {R}data"
            " --backbone {R}backbone --roles {ROLES_FILE}"
            " --out {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/eval/seed{{seed}} --log {log}"
