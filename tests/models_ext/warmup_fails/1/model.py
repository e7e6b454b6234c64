"""Refuses every request, so that its warmup fails the load."""


class TritonPythonModel:
    def execute(self, requests):
        raise ValueError("warmup refused")
