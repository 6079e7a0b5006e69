"""The `corral` command: submitting, watching and cancelling work, and starting the daemons (`corral up`)."""
