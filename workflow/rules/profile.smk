rule profile:
    """Decompose the image encoder per head, name each head's concepts, assign roles."""
    input:
        code=code("profile"),
        values=values("profile"),
        backbone=BACKBONE,
        data=rooted(f"data/{PROFILED}"),
        world=READS_WORLD,
        stale=provenance_checked("profile"),
    output:  # roles.parquet, head_concepts.parquet, head_texts.parquet, heatmap.png, roles.md, ablation.parquet
        directory(ROLES),
    threads: cpus_of("profile")
    log:
        rooted("logs/profile.log"),
    benchmark:  # wall time and peak memory of the job (dear.pipeline.runrecord; DVC: the same file)
        rooted("logs/profile.benchmark.tsv")
    shell:
        "dear profile --params {CONFIG} --backbone {R}backbone --manifest {R}data/{PROFILED}/manifest.parquet --out {ROLES} --log {log}"
