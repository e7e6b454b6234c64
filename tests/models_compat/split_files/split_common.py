"""In the model folder (not the version folder): importable as a top-level module."""

FOLDER = "model"
