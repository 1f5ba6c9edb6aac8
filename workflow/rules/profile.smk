rule profile:
    """Decompose the image encoder per head, name each head's concepts, assign roles."""
    input:
        code=code(*MODEL, "dear/stages/profile.py", "dear/report", "dear/data"),
        backbone=BACKBONE,
        manifest=rooted(f"data/{PROFILED}/manifest.parquet"),
        world=WORLD,
    output:
        roles=ROLES,
        concepts=rooted(f"roles/{PROFILED}/head_concepts.parquet"),
        texts=rooted(f"roles/{PROFILED}/head_texts.parquet"),
        heatmap=rooted(f"roles/{PROFILED}/heatmap.png"),
        summary=rooted(f"roles/{PROFILED}/roles.md"),
        ablation=rooted(f"roles/{PROFILED}/ablation.parquet"),
    params:
        section=section("profile", "world", "data"),
        out=rooted(f"roles/{PROFILED}"),
    log:
        rooted("logs/profile.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/profile.benchmark.tsv")
    shell:
        "dear profile --params {CONFIG} --backbone {R}backbone --manifest {input.manifest} --out {params.out} --log {log}"
