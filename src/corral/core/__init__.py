"""The model: states and their transition tables, specs, wire formats and the pure rules every layer shares."""
