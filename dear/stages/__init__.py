"""One module per pipeline stage, each exposing `run(params, inputs, outputs)`."""
