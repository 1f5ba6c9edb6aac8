"""Reading a config: a params file as every stage, engine and check reads it.

- `strict_yaml`: the one reader of config files (`dear`, the Snakefile and DVC's helpers parse through it);
- `params`: typed, validated parameters, one pydantic section per stage (`python -m dear.config.params`
  writes workflow/schemas/params.schema.yaml);
- `check`: `dear check`, every problem of a params file at once, before any model loads;
- `keys`: what each job reads, the resolved values of the config that shape its outputs, key by key;
- `show`: `dear recipe`, a method's recipe as a config resolves it.

It imports the layers below it (`dear.errors`, `dear.compute`, `dear.runtime`, `dear.data`, `dear.model`,
`dear.methods`), never the trainer, the stages or the engines (docs/architecture.md).
"""
