if READS_WORLD:  # a study of real data and real weights without the sanity check draws no world
    rule world:
        """Draw the embedded emoji world: every embedded dataset in CoOp's layout."""
        input:
            code=code("world"),
            stale=provenance_checked("world"),
        output:
            card=WORLD,
        threads: cpus_of("world")
        log:
            rooted("logs/world.log"),
        benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
            rooted("logs/world.benchmark.tsv")
        shell:
            "dear world --params {CONFIG} --out {R}world --log {log}"


rule backbone:
    """Train the embedded CLIP (or load real weights) and write its card."""
    input:
        code=code("backbone"),
        world=READS_WORLD,
        stale=provenance_checked("backbone"),
    output:
        directory(BACKBONE),
    threads: cpus_of("backbone")
    log:
        rooted("logs/backbone.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/backbone.benchmark.tsv")
    shell:
        "dear backbone --params {CONFIG} --world {R}world --out {R}backbone --log {log}"
