# The shell line globs the run folders exactly as dvc.yaml's command does, so
# both engines run the same command; `input:` names every file for the DAG.
rule report:
    """The paper's tables per protocol, pictures and DVC metrics, from every eval table."""
    input:
        code=code(*CORE, "dear/stages/report.py", "dear/report", "dear/results.py", "dear/model/ablation.py"),
        evals=expand(rooted("runs/{method}/{dataset}/eval/seed{seed}/eval.parquet"), method=METHODS, dataset=B2N, seed=SEEDS),
        transfer=expand(rooted("transfer/{method}/eval/seed{seed}/eval.parquet"), method=METHODS, seed=SEEDS),
        logs=expand(rooted("runs/{method}/{dataset}/train/seed{seed}/train_log.parquet"), method=METHODS, dataset=B2N, seed=SEEDS),
        heatmap=rooted(f"roles/{PROFILED}/heatmap.png"),
        ablation=rooted(f"roles/{PROFILED}/ablation.parquet"),
    output:
        rooted("report/results.md"),
        rooted("report/results.csv"),
        rooted("report/differences.csv"),
        rooted("report/streams.csv"),
        rooted("report/metrics.json"),
        rooted("report/provenance.json"),
        rooted("report/base_novel.png"),
        rooted("report/loss_curves.png"),
        rooted("report/plots/base_novel.csv"),
        rooted("report/plots/transfer.csv"),
        rooted("report/plots/loss.csv"),
        directory(rooted("report/roles")),
    params:
        section=section("report", "data"),
    threads: cpus_of("report")
    log:
        rooted("logs/report.log"),
    shell:
        "dear report --params {CONFIG} --out {R}report --log {log}"
        " --evals {R}runs/*/*/eval/seed*/eval.parquet {R}transfer/*/eval/seed*/eval.parquet"
        " --train-logs {R}runs/*/*/train/seed*/train_log.parquet --roles {R}roles/*/heatmap.png"
