"""A model repository of small step models and ensembles over them, written by the
tests that use it (tests/test_ensemble*.py): one Python model source whose `op`
parameter says what it does, and configs in Triton's text format."""

from __future__ import annotations

from pathlib import Path

STEP_MODEL = '''
import json
import time

import numpy as np
import triton_python_backend_utils as pb_utils


class TritonPythonModel:
    def initialize(self, args):
        cfg = json.loads(args["model_config"])
        params = {k: v["string_value"] for k, v in cfg.get("parameters", {}).items()}
        self.op = params.get("op", "identity")
        self.target = params.get("target", "")
        self.inputs = [i["name"] for i in cfg["input"]]
        self.outputs = [o["name"] for o in cfg["output"]]
        if self.op == "broken":
            raise RuntimeError("this model is broken on purpose")

    def _arrays(self, request):
        return [pb_utils.get_input_tensor_by_name(request, n) for n in self.inputs]

    def execute(self, requests):
        if self.op == "repeat":
            for request in requests:
                sender = request.get_response_sender()
                value = self._arrays(request)[0].as_numpy()
                for k in (1, 2, 3):
                    out = pb_utils.Tensor(self.outputs[0], (value * k).astype(value.dtype))
                    sender.send(pb_utils.InferenceResponse([out]))
                sender.send(flags=pb_utils.TRITONSERVER_RESPONSE_COMPLETE_FINAL)
            return None
        responses = []
        for request in requests:
            tensors = self._arrays(request)
            arrays = [t.as_numpy() if t is not None else None for t in tensors]
            if self.op == "identity":
                outs = [pb_utils.Tensor(o, t.as_numpy()) for o, t in zip(self.outputs, tensors)
                        if t is not None]
            elif self.op == "add":
                outs = [pb_utils.Tensor(self.outputs[0], arrays[0] + 1)]
            elif self.op == "split":
                outs = [pb_utils.Tensor(self.outputs[0], arrays[0] * 2),
                        pb_utils.Tensor(self.outputs[1], arrays[0] * 3)]
            elif self.op == "sum":
                outs = [pb_utils.Tensor(self.outputs[0], arrays[0] + arrays[1])]
            elif self.op == "fail":
                if (arrays[0] < 0).any():
                    responses.append(pb_utils.InferenceResponse(
                        error=pb_utils.TritonError("negative input refused")))
                    continue
                outs = [pb_utils.Tensor(self.outputs[0], arrays[0])]
            elif self.op == "upper":
                outs = [pb_utils.Tensor(self.outputs[0], np.array(
                    [s.upper() for s in arrays[0].reshape(-1)], dtype=object
                ).reshape(arrays[0].shape))]
            elif self.op == "bls":
                call = pb_utils.InferenceRequest(
                    model_name=self.target, requested_output_names=["OUTPUT0"],
                    inputs=[pb_utils.Tensor("INPUT0", arrays[0])])
                answer = call.exec()
                if answer.has_error():
                    raise pb_utils.TritonModelException(answer.error().message())
                got = pb_utils.get_output_tensor_by_name(answer, "OUTPUT0").as_numpy()
                outs = [pb_utils.Tensor(self.outputs[0], got.copy())]
            elif self.op == "sleep":
                deadline = time.monotonic() + float(arrays[0].reshape(-1)[0]) / 1000
                while time.monotonic() < deadline and not request.is_cancelled():
                    time.sleep(0.01)
                with open(json.loads(request.parameters()).get("marker", "/dev/null"),
                          "a") as f:
                    f.write("cancelled" if request.is_cancelled() else "done")
                outs = [pb_utils.Tensor(self.outputs[0], arrays[0])]
            responses.append(pb_utils.InferenceResponse(outs))
        return responses
'''


def io(kind: str, name: str, dtype: str = "TYPE_FP32", dims: str = "[ -1 ]",
       extra: str = "") -> str:
    return f'{kind} {{ name: "{name}" data_type: {dtype} dims: {dims} {extra}}}'


def step_model(repo: Path, name: str, op: str, inputs: list[str], outputs: list[str],
               dtype: str = "TYPE_FP32", max_batch: int = 0, extra: str = "",
               target: str = "") -> None:
    """A Python model of STEP_MODEL doing `op`, FP32 [-1] tensors unless said."""
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    (repo / name / "1" / "model.py").write_text(STEP_MODEL)
    lines = [f'name: "{name}"', 'backend: "python"', f"max_batch_size: {max_batch}"]
    lines += [io("input", n, dtype) for n in inputs]
    lines += [io("output", n, dtype) for n in outputs]
    lines.append(f'parameters {{ key: "op" value: {{ string_value: "{op}" }} }}')
    lines.append(f'parameters {{ key: "target" value: {{ string_value: "{target}" }} }}')
    lines.append("instance_group [ { kind: KIND_CPU count: 1 } ]")
    (repo / name / "config.pbtxt").write_text("\n".join(lines) + "\n" + extra)


def step(model: str, inputs: dict[str, str], outputs: dict[str, str],
         version: int = -1) -> str:
    maps = "".join(f' input_map {{ key: "{k}" value: "{v}" }}' for k, v in inputs.items())
    maps += "".join(f' output_map {{ key: "{k}" value: "{v}" }}' for k, v in outputs.items())
    return f'{{ model_name: "{model}" model_version: {version}{maps} }}'


def ensemble(repo: Path, name: str, inputs: list[str], outputs: list[str],
             steps: list[str], dtype: str = "TYPE_FP32", max_batch: int = 0,
             input_types: dict[str, str] | None = None) -> None:
    (repo / name / "1").mkdir(parents=True, exist_ok=True)
    types = input_types or {}
    lines = [f'name: "{name}"', 'platform: "ensemble"', f"max_batch_size: {max_batch}"]
    lines += [io("input", n, types.get(n, dtype)) for n in inputs]
    lines += [io("output", n, dtype) for n in outputs]
    lines.append("ensemble_scheduling { step [ " + ", ".join(steps) + " ] }")
    (repo / name / "config.pbtxt").write_text("\n".join(lines) + "\n")


def write_repository(repo: Path) -> Path:
    """The step models and the ensembles the tests serve."""
    step_model(repo, "s_identity", "identity", ["INPUT0"], ["OUTPUT0"])
    step_model(repo, "s_add", "add", ["IN"], ["OUT"])
    step_model(repo, "s_split", "split", ["IN"], ["A", "B"])
    step_model(repo, "s_sum", "sum", ["A", "B"], ["OUT"])
    step_model(repo, "s_fail", "fail", ["IN"], ["OUT"])
    step_model(repo, "s_sleep", "sleep", ["IN"], ["OUT"])
    step_model(repo, "s_upper", "upper", ["IN"], ["OUT"], dtype="TYPE_STRING")
    step_model(repo, "s_repeat", "repeat", ["IN"], ["OUT"],
               extra="model_transaction_policy { decoupled: true }\n")
    step_model(repo, "bls_to_chain3", "bls", ["INPUT0"], ["OUTPUT0"], target="chain3")
    step_model(repo, "s_add_batch", "add", ["IN"], ["OUT"], max_batch=8,
               extra="dynamic_batching { max_queue_delay_microseconds: 2000 }\n")
    # identity -> add -> identity: INPUT0 + 1
    ensemble(repo, "chain3", ["INPUT0"], ["OUTPUT0"], [
        step("s_identity", {"INPUT0": "INPUT0"}, {"OUTPUT0": "t1"}),
        step("s_add", {"IN": "t1"}, {"OUT": "t2"}),
        step("s_identity", {"INPUT0": "t2"}, {"OUTPUT0": "OUTPUT0"})])
    # three identity steps: the tensor is handed on, never copied
    ensemble(repo, "identity3", ["INPUT0"], ["OUTPUT0"], [
        step("s_identity", {"INPUT0": "INPUT0"}, {"OUTPUT0": "t1"}),
        step("s_identity", {"INPUT0": "t1"}, {"OUTPUT0": "t2"}),
        step("s_identity", {"INPUT0": "t2"}, {"OUTPUT0": "OUTPUT0"})])
    # split, then A + 1 and B + 1 at once, then their sum: 5 * IN + 2; and A itself
    ensemble(repo, "diamond", ["IN"], ["SUM", "DOUBLE"], [
        step("s_split", {"IN": "IN"}, {"A": "a", "B": "b"}),
        step("s_add", {"IN": "a"}, {"OUT": "a1"}),
        step("s_add", {"IN": "b"}, {"OUT": "b1"}),
        step("s_sum", {"A": "a1", "B": "b1"}, {"OUT": "SUM"}),
        step("s_identity", {"INPUT0": "a"}, {"OUTPUT0": "DOUBLE"})])
    ensemble(repo, "failing", ["IN"], ["OUT"], [
        step("s_add", {"IN": "IN"}, {"OUT": "t"}),
        step("s_fail", {"IN": "t"}, {"OUT": "OUT"})])
    ensemble(repo, "slow", ["IN"], ["OUT"], [
        step("s_sleep", {"IN": "IN"}, {"OUT": "t"}),
        step("s_add", {"IN": "t"}, {"OUT": "OUT"})])
    ensemble(repo, "strings", ["IN"], ["OUT"], [
        step("s_upper", {"IN": "IN"}, {"OUT": "OUT"})], dtype="TYPE_STRING")
    # decoupled: 3 responses of repeat, each + 1
    ensemble(repo, "stream", ["IN"], ["OUT"], [
        step("s_repeat", {"IN": "IN"}, {"OUT": "r"}),
        step("s_add", {"IN": "r"}, {"OUT": "OUT"})])
    ensemble(repo, "batched", ["IN"], ["OUT"], [
        step("s_add_batch", {"IN": "IN"}, {"OUT": "OUT"})], max_batch=8)
    return repo
