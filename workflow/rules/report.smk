# The report's inputs: one folder per method (`dear collect`: the runs of the method, their files and sha256),
# so the report job's input line names one folder per method, not every seed's files. The shell lines glob as dvc.yaml's
# commands do, so both engines run the same command. The jobs' benchmark files under logs/ are read, not
# declared: every job has finished before the report runs, and a record of how long a job took is no reason
# to rerun the report.


rule collect:
    """List every evaluation of one method in the study, with its model and train log (results/<method>)."""
    input:
        code=code("collect"),
        values=values("collect"),
        evals=evaluations_of,
        stale=provenance_checked("collect"),
    output:
        directory(rooted("results/{method}")),  # runs.json
    threads: cpus_of("collect")
    log:
        rooted("logs/collect/{method}.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/collect/{method}.benchmark.tsv")
    shell:
        "dear collect --params {CONFIG} --method {wildcards.method} --out {R}results/{wildcards.method} --log {log}"


rule report:
    """The paper's tables per protocol, pictures and DVC metrics, from every method's runs."""
    input:
        code=code("report"),
        values=values("report"),
        runs=expand(rooted("results/{method}"), method=METHODS),
        roles=ROLES,
        stale=provenance_checked("report"),
    output:
        directory(rooted("report")),  # results.md, results.csv, metrics.json, pictures, plots/, paper/ (dvc.yaml)
    threads: cpus_of("report")
    log:
        rooted("logs/report.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/report.benchmark.tsv")
    shell:
        "dear report --params {CONFIG} --out {R}report --log {log} --runs {R}results/*/runs.json"
        " --roles {R}roles/*/heatmap.png --benchmarks {R}logs"
