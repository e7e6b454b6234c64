"""A model split over several files, importing them every way Triton allows."""

import json
import sys

import numpy as np
import split_common
import split_helpers as top_level_helpers

import triton_python_backend_utils as pb_utils

from . import split_helpers
from .split_scale import FACTOR


class TritonPythonModel:
    def execute(self, requests):
        report = json.dumps({
            "name": __name__, "package": __package__,
            "relative": split_helpers.double(21), "from_relative": FACTOR,
            "top_level": top_level_helpers.double(5), "model_folder": split_common.FOLDER,
            "version_package": sys.modules[__package__].__path__[0],
            "sys_path_tail": sys.path[-2:]})
        out = pb_utils.Tensor("REPORT", np.array([report.encode()], dtype=np.object_))
        return [pb_utils.InferenceResponse([out]) for _ in requests]
