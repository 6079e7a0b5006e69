"""Placement as pure functions over a snapshot of the cluster: where each waiting job fits, and why not."""
