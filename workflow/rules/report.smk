# The shell line globs the run folders exactly as dvc.yaml's command does, so both engines run
# the same command (a glob that matches nothing, a protocol that is off, is dropped by `dear report`);
# `input:` names every file for the DAG. The jobs' benchmark files under logs/ are read, not declared:
# every job has finished before the report runs, and a record of how long a job took is no reason to
# rerun the report.
rule report:
    """The paper's tables per protocol, pictures and DVC metrics, from every eval table."""
    input:
        code=code("report"),
        values=values("report"),
        evals=expand(rooted("runs/{method}/{dataset}/eval/seed{seed}/eval.parquet"), method=METHODS, dataset=B2N, seed=SEEDS),
        transfer=expand(rooted("transfer/{method}/eval/seed{seed}/eval.parquet"), method=METHODS if TRANSFER else [],
                        seed=SEEDS),
        logs=expand(rooted("runs/{method}/{dataset}/train/seed{seed}/train_log.parquet"), method=METHODS, dataset=B2N, seed=SEEDS),
        models=expand(rooted("runs/{method}/{dataset}/train/seed{seed}/model.pt"), method=METHODS, dataset=B2N, seed=SEEDS),
        transfer_models=expand(rooted("transfer/{method}/train/seed{seed}/model.pt"), method=METHODS if TRANSFER else [],
                               seed=SEEDS),
        fewshot=[rooted(f"fewshot/{m}/{d}/shots{k}/{kind}/seed{s}/{file}") for m in METHODS for d, k in FEW_SHOT_RUNS
                 for s in SEEDS for kind, file in (("eval", "eval.parquet"), ("train", "model.pt"))],
        heatmap=rooted(f"roles/{PROFILED}/heatmap.png"),
        ablation=rooted(f"roles/{PROFILED}/ablation.parquet"),
        stale=provenance_checked("report"),
    output:
        rooted("report/results.md"),
        rooted("report/results.csv"),
        rooted("report/differences.csv"),
        rooted("report/streams.csv"),
        rooted("report/published.csv"),
        rooted("report/inference.csv"),
        rooted("report/metrics.json"),
        rooted("report/provenance.json"),
        rooted("report/record.json"),
        rooted("report/base_novel.png"),
        rooted("report/loss_curves.png"),
        rooted("report/plots/base_novel.csv"),
        rooted("report/plots/transfer.csv"),
        rooted("report/plots/loss.csv"),
        directory(rooted("report/roles")),
        directory(rooted("report/paper")),
    threads: cpus_of("report")
    log:
        rooted("logs/report.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/report.benchmark.tsv")
    shell:
        "dear report --params {CONFIG} --out {R}report --log {log}"
        " --evals {R}runs/*/*/eval/seed*/eval.parquet {R}transfer/*/eval/seed*/eval.parquet"
        " {R}fewshot/*/*/shots*/eval/seed*/eval.parquet"
        " --train-logs {R}runs/*/*/train/seed*/train_log.parquet --roles {R}roles/*/heatmap.png"
        " --models {R}runs/*/*/train/seed*/model.pt {R}transfer/*/train/seed*/model.pt"
        " {R}fewshot/*/*/shots*/train/seed*/model.pt --benchmarks {R}logs"
