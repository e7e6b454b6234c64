"""Reads its command line the ways model code does (sys.argv, argparse, unittest.main)
and answers what it found, as one JSON string."""

import argparse
import io
import json
import sys
import unittest

import numpy as np

import triton_python_backend_utils as pb_utils


class NoArguments(unittest.TestCase):
    def test_argv_is_empty(self):
        self.assertEqual(sys.argv, [""])


class TritonPythonModel:
    def initialize(self, args):
        self.argv_at_initialize = list(sys.argv)

    def execute(self, requests):
        # Both read sys.argv[1:]; an argument they do not know makes them exit.
        parsed = argparse.ArgumentParser(prog="argv_probe").parse_args()
        tests = unittest.main(module=sys.modules[__name__], exit=False,
                              testRunner=unittest.TextTestRunner(stream=io.StringIO()))
        report = json.dumps({
            "argv": sys.argv, "argv_at_initialize": self.argv_at_initialize,
            "parsed": vars(parsed), "tests_run": tests.result.testsRun,
            "tests_failed": len(tests.result.failures) + len(tests.result.errors)})
        out = pb_utils.Tensor("REPORT", np.array([report.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
