rule world:
    """Draw the embedded emoji world: every embedded dataset in CoOp's layout."""
    input:
        code=code(*CORE, "dear/stages/world.py", "dear/data"),
    output:
        card=WORLD,
    params:
        section=section("world"),
    log:
        rooted("logs/world.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/world.benchmark.tsv")
    shell:
        "dear world --params {CONFIG} --out {R}world --log {log}"


rule backbone:
    """Train the embedded CLIP (or load real weights) and write its card."""
    input:
        code=code(*MODEL, "dear/stages/backbone.py", "dear/data"),
        world=WORLD,
    output:
        directory(BACKBONE),
    params:
        section=section("world", "model", "backbone"),
    log:
        rooted("logs/backbone.log"),
    benchmark:  # wall time and peak memory of the job (dear.runrecord; DVC: the same file)
        rooted("logs/backbone.benchmark.tsv")
    shell:
        "dear backbone --params {CONFIG} --world {R}world --out {R}backbone --log {log}"
