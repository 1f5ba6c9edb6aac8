rule world:
    """Draw the embedded emoji world: every embedded dataset in CoOp's layout."""
    input:
        code=code(*CORE, "dear/stages/world.py", "dear/data"),
    output:
        card=WORLD,
    params:
        section=section("world"),
    threads: cpus_of("world")
    log:
        rooted("logs/world.log"),
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
    threads: cpus_of("backbone")
    log:
        rooted("logs/backbone.log"),
    shell:
        "dear backbone --params {CONFIG} --world {R}world --out {R}backbone --log {log}"
