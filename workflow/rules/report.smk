# The shell line globs the run folders exactly as dvc.yaml's command does, so
# both engines run the same command; `input:` names every file for the DAG.
rule report:
    """The paper's tables per protocol, pictures and DVC metrics, from every eval table."""
    input:
        code=code(*CORE, "dear/stages/report.py", "dear/report", "dear/results.py", "dear/model/ablation.py"),
        evals=expand("runs/{method}/{dataset}/eval/seed{seed}/eval.parquet", method=METHODS, dataset=B2N, seed=SEEDS),
        transfer=expand("transfer/{method}/eval/seed{seed}/eval.parquet", method=METHODS, seed=SEEDS),
        logs=expand("runs/{method}/{dataset}/train/seed{seed}/train_log.parquet", method=METHODS, dataset=B2N, seed=SEEDS),
        heatmap=f"roles/{PROFILED}/heatmap.png",
        ablation=f"roles/{PROFILED}/ablation.parquet",
    output:
        "report/results.md",
        "report/results.csv",
        "report/differences.csv",
        "report/streams.csv",
        "report/metrics.json",
        "report/provenance.json",
        "report/base_novel.png",
        "report/loss_curves.png",
        "report/plots/base_novel.csv",
        "report/plots/transfer.csv",
        "report/plots/loss.csv",
        directory("report/roles"),
    params:
        section=section("report", "data"),
    log:
        "logs/report.log",
    shell:
        "dear report --params params.yaml --out report --log {log}"
        " --evals runs/*/*/eval/seed*/eval.parquet transfer/*/eval/seed*/eval.parquet"
        " --train-logs runs/*/*/train/seed*/train_log.parquet --roles roles/*/heatmap.png"
