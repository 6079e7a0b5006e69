"""The controller's HTTP API and its process: what users, workers and the dashboard call, validated at the edge."""
