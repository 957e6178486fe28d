"""MLflow naming, batching, artifacts, run lifecycle and comparisons."""
