"""The labels of a loaded model's outputs (Triton's LabelProvider), for the frontends'
classification extension (pbserve/server/classification.py).

An output's `label_filename` names a file in the model's directory (not its version
folder), one label a line: line i labels index i. As Triton reads it (std::getline),
lines end at "\\n" only (a "\\r" stays part of its label), the last line needs no
newline, and an empty line is no label. A path that leaves the model's directory is
refused with Triton's words. An ensemble's output without a label file of its own has
the labels of the step output it comes from (Triton completes them the same way).

Read on a model's first classification, then kept as long as that loaded model is
(Triton reads them at load: a missing file fails the load there, the request here).
"""

from __future__ import annotations

import os
from typing import Any
from weakref import WeakKeyDictionary

from pbserve.core.config.config_checks import ENSEMBLE_PLATFORM
from pbserve.errors import ErrorCode, ServerError

_KEPT: WeakKeyDictionary[Any, dict[str, list[bytes] | None]] = WeakKeyDictionary()


def output_labels(model: Any, output: str) -> list[bytes] | None:
    """The labels of `output` of a loaded `model` (a Model, an EnsembleModel, or a
    RemoteStep: another process's, whose files are not here: None), or None."""
    model_dir = getattr(model, "model_dir", None)
    if model_dir is None:
        return None
    kept = _KEPT.get(model)
    if kept is None:
        kept = _KEPT[model] = {}
    elif output in kept:
        return kept[output]
    cfg = model.cfg
    for io in cfg.output:
        if io.name == output and io.label_filename:
            labels = kept[output] = _read(model.name, model_dir, output,
                                          io.label_filename)
            return labels
    if cfg.platform == ENSEMBLE_PLATFORM:  # asked each time: a step may be reloaded
        for step in model.graph.steps:
            for step_output, tensor in step.outputs:
                if tensor == output:
                    try:
                        source = model.step_model(step.model_name, step.version)
                    except ServerError:
                        return None
                    return output_labels(source, step_output)
    kept[output] = None
    return None


def _read(model: str, model_dir: Any, output: str, filename: str) -> list[bytes]:
    root = os.path.realpath(model_dir)
    path = os.path.join(str(model_dir), filename)
    if os.path.commonpath([root, os.path.realpath(path)]) != root:
        raise ServerError(ErrorCode.UNSUPPORTED,
                          f"label file path '{path}' for output '{output}' in model "
                          f"'{model}' is outside model directory")
    try:
        with open(path, "rb") as f:
            text = f.read()
    except OSError as err:
        raise ServerError(ErrorCode.INTERNAL, f"failed to open text file for read {path}: "
                          f"{err.strerror}") from None
    lines = text.split(b"\n")
    if lines[-1] == b"":
        lines.pop()
    return lines
