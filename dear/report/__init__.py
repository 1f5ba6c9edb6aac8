"""Report building blocks: aggregation (tables), results.md (markdown), pictures (plots,
heatmap: the profile stage's head-role picture), train logs, published reference numbers."""
