"""The per-instance child process that runs a model.py (`python -m stub`)."""
