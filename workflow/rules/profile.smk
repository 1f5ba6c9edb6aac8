rule profile:
    """Decompose the image encoder per head, name each head's concepts, assign roles."""
    input:
        code=code(*MODEL, "dear/stages/profile.py", "dear/report", "dear/data"),
        backbone=BACKBONE,
        manifest=f"data/{PROFILED}/manifest.parquet",
        world=WORLD,
    output:
        roles=ROLES,
        concepts=f"roles/{PROFILED}/head_concepts.parquet",
        texts=f"roles/{PROFILED}/head_texts.parquet",
        heatmap=f"roles/{PROFILED}/heatmap.png",
        summary=f"roles/{PROFILED}/roles.md",
        ablation=f"roles/{PROFILED}/ablation.parquet",
    params:
        section=section("profile", "world", "data"),
        out=f"roles/{PROFILED}",
    log:
        "logs/profile.log",
    shell:
        "dear profile --params params.yaml --backbone backbone --manifest {input.manifest} --out {params.out} --log {log}"
