"""corral: a workload manager for ML and compute teams."""
