"""The worker daemon: registers, heartbeats, and builds, runs and stops the attempts it is ordered to."""
