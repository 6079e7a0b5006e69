"""Serving: deployments whose replicas run as tasks, their lifecycle handlers, and the router."""
