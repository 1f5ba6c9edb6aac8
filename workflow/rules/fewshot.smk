# Few-shot learning (study.few_shot): one job per method x dataset x shot count K trains, fuses and
# evaluates every seed on all classes of the dataset, from the dataset's K-shot tables
# (data/<ds>/fewshot-shots<K>-seed<S>.parquet, Dassl's draw for K); outputs under fewshot/<m>/<ds>/shots<K>/.
# The rules exist only while the protocol is on.

if FEW_SHOT:
    rule prepare_fewshot:
        """`dear prepare` of a dataset of study.few_shot: besides the manifest and data.shots' tables, a table per K and seed."""
        input:
            code=code("prepare"),
            values=values("prepare"),
            world=READS_WORLD,
            stale=provenance_checked("prepare"),
        output:
            manifest=rooted("data/{dataset}/manifest.parquet"),
            excluded=rooted("data/{dataset}/excluded.parquet"),
            fewshot=expand(rooted("data/{{dataset}}/fewshot-seed{seed}.parquet"), seed=SEEDS),
            shots=expand(rooted("data/{{dataset}}/fewshot-shots{shots}-seed{seed}.parquet"), shots=FEW_SHOT.shots,
                         seed=SEEDS),
        wildcard_constraints:
            dataset="|".join(re.escape(name) for name in FEW_SHOT.datasets),
        priority: 2  # as rule prepare
        threads: cpus_of("prepare")
        log:
            rooted("logs/prepare/{dataset}.log"),
        benchmark:
            rooted("logs/prepare/{dataset}.benchmark.tsv")
        shell:
            "dear prepare --params {CONFIG} --dataset {wildcards.dataset} --out {R}data/{wildcards.dataset} --log {log}"

    ruleorder: prepare_fewshot > prepare

    rule train_fewshot:
        """Train one method on K shots of every class of one dataset, every seed."""
        input:
            code=code("train_fewshot"),
            values=values("train_fewshot"),
            backbone=BACKBONE,
            fewshot=seeds_of(rooted("data/{dataset}/fewshot-shots{shots}-seed{seed}.parquet")),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("train_fewshot"),
        output:
            model=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/train/seed{seed}/model.pt")),
            log=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/train/seed{seed}/train_log.parquet")),
        threads: cpus_of("train")
        log:
            rooted("logs/train_fewshot/{method}/{dataset}/shots{shots}.log"),
        benchmark:
            rooted("logs/train_fewshot/{method}/{dataset}/shots{shots}.benchmark.tsv")
        shell:
            "dear train --params {CONFIG} --method {wildcards.method} --dataset {wildcards.dataset} --classes all"
            " --shots {wildcards.shots} --backbone {R}backbone"
            " --fewshot {R}data/{wildcards.dataset}/fewshot-shots{wildcards.shots}-seed{{seed}}.parquet --roles {input.roles}"
            " --out {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/train/seed{{seed}} --log {log}"

    rule fuse_fewshot:
        """Refit the fusion weights of each K-shot model on its own validation shots (min(K, data.val_shots))."""
        input:
            code=code("fuse_fewshot"),
            values=values("fuse_fewshot"),
            model=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/train/seed{seed}/model.pt")),
            backbone=BACKBONE,
            fewshot=seeds_of(rooted("data/{dataset}/fewshot-shots{shots}-seed{seed}.parquet")),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("fuse_fewshot"),
        output:
            seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/fuse/seed{seed}/fusion.json")),
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
            " --backbone {R}backbone --roles {input.roles}"
            " --out {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/fuse/seed{{seed}}/fusion.json"
            " --log {log}"

    rule evaluate_fewshot:
        """Per-class counts of each K-shot model on its dataset's test split, all classes (protocol few_shot_<K>)."""
        input:
            code=code("evaluate_fewshot"),
            values=values("evaluate_fewshot"),
            model=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/train/seed{seed}/model.pt")),
            fusion=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/fuse/seed{seed}/fusion.json")),
            backbone=BACKBONE,
            manifest=rooted("data/{dataset}/manifest.parquet"),
            roles=ROLES,
            world=READS_WORLD,
            stale=provenance_checked("evaluate_fewshot"),
        output:
            table=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/eval/seed{seed}/eval.parquet")),
            metrics=seeds_of(rooted("fewshot/{method}/{dataset}/shots{shots}/eval/seed{seed}/metrics.json")),
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
            " --backbone {R}backbone --roles {input.roles}"
            " --out {R}fewshot/{wildcards.method}/{wildcards.dataset}/shots{wildcards.shots}/eval/seed{{seed}} --log {log}"
