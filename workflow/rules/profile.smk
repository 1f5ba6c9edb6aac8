rule profile:
    """Decompose the image encoder per head, name each head's concepts, assign roles."""
    input:
        code=code("profile"),
        values=values("profile"),
        backbone=BACKBONE,
        manifest=rooted(f"data/{PROFILED}/manifest.parquet"),
        world=READS_WORLD,
        stale=provenance_checked("profile"),
    output:
        roles=ROLES,
        concepts=rooted(f"roles/{PROFILED}/head_concepts.parquet"),
        texts=rooted(f"roles/{PROFILED}/head_texts.parquet"),
        heatmap=rooted(f"roles/{PROFILED}/heatmap.png"),
        summary=rooted(f"roles/{PROFILED}/roles.md"),
        ablation=rooted(f"roles/{PROFILED}/ablation.parquet"),
    params:
        out=rooted(f"roles/{PROFILED}"),
    threads: cpus_of("profile")
    log:
        rooted("logs/profile.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/profile.benchmark.tsv")
    shell:
        "dear profile --params {CONFIG} --backbone {R}backbone --manifest {input.manifest} --out {params.out} --log {log}"
