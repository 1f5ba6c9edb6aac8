if READS_WORLD:  # a study of real data and real weights without the sanity check draws no world
    rule world:
        """Draw the embedded emoji world: every embedded dataset in CoOp's layout."""
        input:
            code=code("world"),
            values=values("world"),
            stale=provenance_checked("world"),
        output:
            directory(WORLD),
        threads: cpus_of("world")
        log:
            rooted("logs/world.log"),
        # no benchmark: `dear world` records its own (dear.runrecord)
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
    # not `cache: True`: Snakemake's output cache restored only the top level of a folder (no .digest/; docs/engines.md)
    threads: cpus_of("backbone")
    log:
        rooted("logs/backbone.log"),
    # no benchmark: (a cached rule may have none): `dear backbone` records its own (dear.runrecord)
    shell:
        "dear backbone --params {CONFIG} --world {R}world --out {R}backbone --log {log}"
