"""`hostkit smoke`: bounded concurrent completions (load) while host memory is sampled (sampler),
judged (run) and written out as JSON and a PNG chart (report, chart)."""
