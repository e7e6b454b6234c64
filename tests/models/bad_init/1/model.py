"""Fails to initialize: the load must fail with this text and the others still serve."""


class TritonPythonModel:
    def initialize(self, args):
        raise ValueError("bad_init refuses to start: token-7f3a")

    def execute(self, requests):
        return []
