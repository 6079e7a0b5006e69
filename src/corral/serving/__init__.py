"""Serving's data plane: the router that sends each request to a healthy replica, and its autoscaler."""
