if READS_WORLD:  # a study of real data and real weights without the sanity check draws no world
    rule world:
        """Draw the embedded emoji world: every embedded dataset in CoOp's layout."""
        input:
            code=code("world"),
            values=values("world"),
            stale=provenance_checked("world"),
        output:
            directory(WORLD),
        cache: True  # one world per machine: --cache with $SNAKEMAKE_OUTPUT_CACHE (the Makefile; docs/engines.md)
        threads: cpus_of("world")
        log:
            rooted("logs/world.log"),
        # no benchmark: Snakemake refuses one on a cached rule; `dear world` records its own (dear.pipeline.runrecord)
        shell:
            "dear world --params {CONFIG} --out {R}world --log {log}"


rule backbone:
    """Train the embedded CLIP (or load real weights) and write its card."""
    input:
        code=code("backbone"),
        values=values("backbone"),
        world=READS_WORLD,
        stale=provenance_checked("backbone"),
    output:
        directory(BACKBONE),
    cache: True  # keyed by its code and values files (and the world's key): a study with the same reuses it
    threads: cpus_of("backbone")
    log:
        rooted("logs/backbone.log"),
    # no benchmark: Snakemake refuses one on a cached rule; `dear backbone` records its own (dear.pipeline.runrecord)
    shell:
        "dear backbone --params {CONFIG} --world {R}world --out {R}backbone --log {log}"
