"""Sequence models on the built-in ONNX Runtime and PyTorch backends: the sequence
batcher's control inputs (START/READY/CORRID) fed to the graph under their config names,
data types and values, and implicit state (`sequence_batching.state`, numeric and
TYPE_STRING) kept per sequence in the backend; load errors in Triton's words; served by a
real server, driven by tritonclient gRPC sequences."""

from __future__ import annotations

import queue
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import triton_python_backend_utils as pb_utils  # noqa: E402
from backend_utils.testing import FakeRuntime, installed  # noqa: E402
from pbserve.model_backends.common import Batcher  # noqa: E402
from pbserve.model_backends.implicit_state import (  # noqa: E402
    initial_value, state_specs, with_initial)
from pbserve.testing import running_server  # noqa: E402
from model_files import save_graph, write  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

try:
    import torch
except ImportError:  # the TorchScript models are left out
    torch = None

FP32, INT32, UINT64 = TensorProto.FLOAT, TensorProto.INT32, TensorProto.UINT64
STRING = TensorProto.STRING

CONTROLS = """
    control_input [
      { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 7 ] } ] },
      { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 2 ] } ] },
      { name: "CORRID" control [ { kind: CONTROL_SEQUENCE_CORRID data_type: TYPE_UINT64 } ] }
    ]
"""


def onnx_accumulator(repo: Path) -> None:
    """OUTPUT = STATE_IN + INPUT (also the state output); the controls come back as
    outputs. One instance of 2 slots (direct strategy, waiting for both): two sequences
    run in one batch; the state starts from zero_data."""
    b = ["b", 1]
    save_graph(repo / "acc_onnx" / "1" / "model.onnx",
               [helper.make_node("Add", ["STATE_IN", "INPUT"], ["OUTPUT"]),
                helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"]),
                helper.make_node("Identity", ["START"], ["START_OUT"]),
                helper.make_node("Identity", ["READY"], ["READY_OUT"]),
                helper.make_node("Identity", ["CORRID"], ["CORRID_OUT"])],
               [("INPUT", FP32, b), ("START", INT32, b), ("READY", FP32, b),
                ("CORRID", UINT64, b), ("STATE_IN", FP32, b)],
               [("OUTPUT", FP32, b), ("STATE_OUT", FP32, b), ("START_OUT", INT32, b),
                ("READY_OUT", FP32, b), ("CORRID_OUT", UINT64, b)])
    write(repo / "acc_onnx" / "config.pbtxt", f"""
        backend: "onnxruntime"
        max_batch_size: 2
        instance_group [ {{ count: 1 kind: KIND_CPU }} ]
        sequence_batching {{
          direct {{ max_queue_delay_microseconds: 20000 minimum_slot_utilization: 1.0 }}
          {CONTROLS}
          state [ {{ input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_FP32
                     dims: [ 1 ]
                     initial_state {{ data_type: TYPE_FP32 dims: [ 1 ] zero_data: true
                                      name: "zeros" }} }} ]
        }}
        input [ {{ name: "INPUT" data_type: TYPE_FP32 dims: [ 1 ] }} ]
        output [ {{ name: "OUTPUT" data_type: TYPE_FP32 dims: [ 1 ] }},
                 {{ name: "START_OUT" data_type: TYPE_INT32 dims: [ 1 ] }},
                 {{ name: "READY_OUT" data_type: TYPE_FP32 dims: [ 1 ] }},
                 {{ name: "CORRID_OUT" data_type: TYPE_UINT64 dims: [ 1 ] }} ]
        """)


def onnx_simple_sequence(repo: Path) -> None:
    """Triton's simple_sequence shape: one config input, two control inputs in the graph,
    no batching, the oldest strategy, the state from a data file (100)."""
    save_graph(repo / "simple_onnx" / "1" / "model.onnx",
               [helper.make_node("Add", ["ACC", "INPUT"], ["OUTPUT"]),
                helper.make_node("Identity", ["OUTPUT"], ["ACC_OUT"]),
                helper.make_node("Mul", ["START", "READY"], ["FLAGS"])],
               [("INPUT", INT32, [1]), ("START", INT32, [1]), ("READY", INT32, [1]),
                ("ACC", INT32, [1])],
               [("OUTPUT", INT32, [1]), ("ACC_OUT", INT32, [1]), ("FLAGS", INT32, [1])])
    (repo / "simple_onnx" / "initial_state").mkdir(parents=True)
    np.array([100], np.int32).tofile(repo / "simple_onnx" / "initial_state" / "hundred")
    write(repo / "simple_onnx" / "config.pbtxt", """
        platform: "onnxruntime_onnx"
        max_batch_size: 0
        sequence_batching {
          oldest { max_candidate_sequences: 4 }
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
            { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
          ]
          state [ { input_name: "ACC" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ]
                    initial_state { data_type: TYPE_INT32 dims: [ 1 ] data_file: "hundred"
                                    name: "h" } } ]
        }
        input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] },
                 { name: "FLAGS" data_type: TYPE_INT32 dims: [ 1 ] },
                 { name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """)
    # the same graph, its config auto-completed: the control and state tensors left out
    (repo / "auto_onnx" / "1").mkdir(parents=True)
    (repo / "auto_onnx" / "1" / "model.onnx").write_bytes(
        (repo / "simple_onnx" / "1" / "model.onnx").read_bytes())
    write(repo / "auto_onnx" / "config.pbtxt", """
        backend: "onnxruntime"
        sequence_batching {
          control_input [
            { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] },
            { name: "READY" control [ { kind: CONTROL_SEQUENCE_READY int32_false_true: [ 0, 1 ] } ] }
          ]
          state [ { input_name: "ACC" output_name: "ACC_OUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        }
        """)
    # a control the graph lacks: Triton's load error
    save_graph(repo / "no_control" / "1" / "model.onnx",
               [helper.make_node("Identity", ["INPUT"], ["OUTPUT"])],
               [("INPUT", INT32, [1])], [("OUTPUT", INT32, [1])])
    write(repo / "no_control" / "config.pbtxt", """
        backend: "onnxruntime"
        sequence_batching { control_input [
          { name: "START" control [ { kind: CONTROL_SEQUENCE_START int32_false_true: [ 0, 1 ] } ] } ] }
        input [ { name: "INPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT" data_type: TYPE_INT32 dims: [ 1 ] } ]
        """)


def onnx_string_state(repo: Path) -> None:
    """TYPE_STRING state: OUTPUT (and the state output) is the state with INPUT appended,
    so each output lists the sequence's inputs after the initial state. Batching, its
    state from zero_data (Triton: empty strings); not batching, from a data file of
    length-prefixed strings."""
    save_graph(repo / "str_onnx" / "1" / "model.onnx",
               [helper.make_node("Concat", ["STATE_IN", "INPUT"], ["OUTPUT"], axis=1),
                helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])],
               [("INPUT", STRING, ["b", 1]), ("STATE_IN", STRING, ["b", "n"])],
               [("OUTPUT", STRING, ["b", "m"]), ("STATE_OUT", STRING, ["b", "m"])])
    write(repo / "str_onnx" / "config.pbtxt", """
        backend: "onnxruntime"
        max_batch_size: 2
        instance_group [ { count: 1 kind: KIND_CPU } ]
        sequence_batching {
          direct { max_queue_delay_microseconds: 20000 minimum_slot_utilization: 1.0 }
          state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_STRING
                    dims: [ -1 ]
                    initial_state { data_type: TYPE_STRING dims: [ 1 ] zero_data: true
                                    name: "empty" } } ]
        }
        input [ { name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "OUTPUT" data_type: TYPE_STRING dims: [ -1 ] } ]
        """)
    save_graph(repo / "str_file_onnx" / "1" / "model.onnx",
               [helper.make_node("Concat", ["STATE_IN", "INPUT"], ["OUTPUT"], axis=0),
                helper.make_node("Identity", ["OUTPUT"], ["STATE_OUT"])],
               [("INPUT", STRING, [1]), ("STATE_IN", STRING, ["n"])],
               [("OUTPUT", STRING, ["m"]), ("STATE_OUT", STRING, ["m"])])
    (repo / "str_file_onnx" / "initial_state").mkdir(parents=True)
    (repo / "str_file_onnx" / "initial_state" / "words").write_bytes(
        b"".join(len(w).to_bytes(4, "little") + w for w in (b"x", b"", b"yz")))
    write(repo / "str_file_onnx" / "config.pbtxt", """
        backend: "onnxruntime"
        sequence_batching {
          state [ { input_name: "STATE_IN" output_name: "STATE_OUT" data_type: TYPE_STRING
                    dims: [ -1 ]
                    initial_state { data_type: TYPE_STRING dims: [ 3 ] data_file: "words"
                                    name: "words" } } ]
        }
        input [ { name: "INPUT" data_type: TYPE_STRING dims: [ 1 ] } ]
        output [ { name: "OUTPUT" data_type: TYPE_STRING dims: [ -1 ] } ]
        """)


if torch is not None:
    class Accumulator(torch.nn.Module):
        """OUTPUT__0 = state + INPUT (and the state output); START comes back."""

        def forward(self, INPUT__0, START__1, READY__2, STATE__3):
            total = STATE__3 + INPUT__0
            return total, total, START__1 * READY__2


def torch_accumulator(repo: Path) -> None:
    (repo / "acc_torch" / "1").mkdir(parents=True)
    torch.jit.script(Accumulator()).save(str(repo / "acc_torch" / "1" / "model.pt"))
    write(repo / "acc_torch" / "config.pbtxt", """
        backend: "pytorch"
        max_batch_size: 2
        sequence_batching {
          control_input [
            { name: "START__1" control [ { kind: CONTROL_SEQUENCE_START fp32_false_true: [ 0, 1 ] } ] },
            { name: "READY__2" control [ { kind: CONTROL_SEQUENCE_READY fp32_false_true: [ 0, 3 ] } ] }
          ]
          state [ { input_name: "STATE__3" output_name: "STATE_OUT__1" data_type: TYPE_FP32
                    dims: [ 1 ] } ]
        }
        input [ { name: "INPUT__0" data_type: TYPE_FP32 dims: [ 1 ] } ]
        output [ { name: "OUTPUT__0" data_type: TYPE_FP32 dims: [ 1 ] },
                 { name: "FLAGS__2" data_type: TYPE_FP32 dims: [ 1 ] } ]
        """)


if torch is not None:
    class StringAppender(torch.nn.Module):
        """A List[str] state: OUTPUT__0 (and the state output) is it with INPUT__0
        appended; START__2 is taken as Triton's *_sequence_object models take it."""

        def forward(self, INPUT__0: list[str], STATE__1: list[str],
                    START__2: torch.Tensor) -> tuple[list[str], list[str]]:
            joined = STATE__1 + INPUT__0
            return joined, joined


START_INT32 = ('{ name: "START__2" control [ { kind: CONTROL_SEQUENCE_START '
               'int32_false_true: [ 0, 1 ] } ] }')


def torch_string_config(control: str = START_INT32, state_type: str = "TYPE_STRING",
                        max_batch_size: int = 0, output_dims: int = 1) -> str:
    """The config of StringAppender: with batching, a scalar string per batch item."""
    reshape = " reshape { shape: [ ] }" if max_batch_size else ""
    return f"""
        backend: "pytorch"
        max_batch_size: {max_batch_size}
        sequence_batching {{
          control_input [ {control} ]
          state [ {{ input_name: "STATE__1" output_name: "STATE_OUT__1" data_type: {state_type}
                     dims: [ -1 ]
                     initial_state {{ data_type: {state_type} dims: [ 1 ] zero_data: true
                                      name: "empty" }} }} ]
        }}
        input [ {{ name: "INPUT__0" data_type: TYPE_STRING dims: [ 1 ]{reshape} }} ]
        output [ {{ name: "OUTPUT__0" data_type: TYPE_STRING dims: [ {output_dims} ]{reshape} }} ]
        """


def torch_string_state(repo: Path) -> None:
    """The List[str] state model, and configs Triton refuses: a CORRID control of a type
    torch lacks (L0_libtorch_io_types' libtorch_invalid_sequence_int32), a state of one,
    a List[str] state of two dimensions with the batch."""
    (repo / "str_torch" / "1").mkdir(parents=True)
    torch.jit.script(StringAppender()).save(str(repo / "str_torch" / "1" / "model.pt"))
    write(repo / "str_torch" / "config.pbtxt", torch_string_config(output_dims=-1))
    corrid = ('{ name: "CORRID__2" control [ { kind: CONTROL_SEQUENCE_CORRID '
              'data_type: TYPE_UINT32 } ] }')
    refused = {"torch_corrid_u32": torch_string_config(control=corrid),
               "torch_state_u16": torch_string_config(state_type="TYPE_UINT16"),
               "torch_str_state_2d": torch_string_config(max_batch_size=2)}
    for name, text in refused.items():
        (repo / name / "1").mkdir(parents=True)
        (repo / name / "1" / "model.pt").write_bytes(
            (repo / "str_torch" / "1" / "model.pt").read_bytes())
        write(repo / name / "config.pbtxt", text)


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("sequence_repo")
    onnx_accumulator(repo)
    onnx_simple_sequence(repo)
    onnx_string_state(repo)
    if torch is not None:
        torch_accumulator(repo)
        torch_string_state(repo)
    log = tmp_path_factory.mktemp("sequence_log") / "server.log"
    with running_server(repo, log_path=log, ready_path="/v2/health/live",
                        ready_timeout=60) as srv:
        yield srv


def run_interleaved(client, model: str, input_name: str, dtype, values: dict[int, list],
                    outputs=None, batched: bool | None = None) -> dict[int, list]:
    """The sequences' requests, step by step, each step's requests sent together (so
    that they can run in one batch); the results of each sequence in order. Each request
    has one element ([1, 1] for a batching model: by default the FP32 ones)."""
    results: dict[int, list] = {corrid: [] for corrid in values}
    steps = max(len(v) for v in values.values())
    batched = dtype == np.float32 if batched is None else batched
    datatype = {np.float32: "FP32", np.int32: "INT32", object: "BYTES"}[dtype]
    for step in range(steps):
        done: queue.Queue = queue.Queue()
        sent = 0
        for corrid, seq in values.items():
            if step >= len(seq):
                continue
            array = np.array([[seq[step]]] if batched else [seq[step]], dtype)
            tensor = grpcclient.InferInput(input_name, list(array.shape), datatype)
            tensor.set_data_from_numpy(array)
            client.async_infer(
                model, [tensor], callback=lambda result, error, c=corrid: done.put((c, result, error)),
                sequence_id=corrid, sequence_start=step == 0,
                sequence_end=step == len(seq) - 1,
                outputs=[grpcclient.InferRequestedOutput(o) for o in outputs]
                if outputs else None)
            sent += 1
        for _ in range(sent):
            corrid, result, error = done.get(timeout=20)
            assert error is None, str(error)
            results[corrid].append(result)
    return results


def test_onnx_accumulator_keeps_each_sequences_state(server) -> None:
    client = server.grpc_client()
    assert client.is_model_ready("acc_onnx")
    values = {11: [1.0, 2.0, 3.0, 4.0], 22: [10.0, 20.0, 30.0]}
    results = run_interleaved(client, "acc_onnx", "INPUT", np.float32, values)
    for corrid, seq in values.items():
        got = [float(r.as_numpy("OUTPUT")[0, 0]) for r in results[corrid]]
        assert got == list(np.cumsum(seq)), (corrid, got)
        # START as the config says (int32 [0, 7]), READY (fp32 [0, 2]), the CORRID
        assert [int(r.as_numpy("START_OUT")[0, 0]) for r in results[corrid]] == \
            [7] + [0] * (len(seq) - 1)
        assert {float(r.as_numpy("READY_OUT")[0, 0]) for r in results[corrid]} == {2.0}
        assert {int(r.as_numpy("CORRID_OUT")[0, 0]) for r in results[corrid]} == {corrid}
        # the state output is not the config's: never sent to the client
        assert all(r.as_numpy("STATE_OUT") is None for r in results[corrid])
    stats = client.get_inference_statistics("acc_onnx").model_stats[0]
    assert stats.inference_count == 7 and stats.execution_count < 7  # batched
    # the same correlation id again: the state starts over from zero
    again = run_interleaved(client, "acc_onnx", "INPUT", np.float32, {11: [5.0, 5.0]})
    assert [float(r.as_numpy("OUTPUT")[0, 0]) for r in again[11]] == [5.0, 10.0]


def test_simple_sequence_style_onnx_model_loads_and_runs(server) -> None:
    """Graph inputs that are control inputs and a state input (4 graph inputs for 1
    config input): it loads; the state starts from its data file."""
    client = server.grpc_client()
    assert client.is_model_ready("simple_onnx")
    values = {5: [1, 2, 3], 6: [-1, -1]}
    results = run_interleaved(client, "simple_onnx", "INPUT", np.int32, values)
    assert [int(r.as_numpy("OUTPUT")[0]) for r in results[5]] == [101, 103, 106]
    assert [int(r.as_numpy("OUTPUT")[0]) for r in results[6]] == [99, 98]
    assert [int(r.as_numpy("FLAGS")[0]) for r in results[5]] == [1, 0, 0]
    # listed among the config's outputs, the state output can be asked for
    asked = run_interleaved(client, "simple_onnx", "INPUT", np.int32, {7: [1, 1]},
                            outputs=["ACC_OUT"])
    assert [int(r.as_numpy("ACC_OUT")[0]) for r in asked[7]] == [101, 102]
    assert asked[7][0].as_numpy("OUTPUT") is None


def test_auto_complete_leaves_out_control_and_state_tensors(server) -> None:
    client = server.http_client()
    assert client.is_model_ready("auto_onnx")
    cfg = client.get_model_config("auto_onnx")
    assert [i["name"] for i in cfg["input"]] == ["INPUT"]
    assert sorted(o["name"] for o in cfg["output"]) == ["FLAGS", "OUTPUT"]
    results = run_interleaved(server.grpc_client(), "auto_onnx", "INPUT", np.int32,
                              {9: [4, 4]})
    assert [int(r.as_numpy("OUTPUT")[0]) for r in results[9]] == [4, 8]


def test_a_control_missing_from_the_graph_fails_the_load(server) -> None:
    client = server.http_client()
    assert not client.is_model_ready("no_control")
    reason = {m["name"]: m for m in client.get_model_repository_index()}["no_control"][
        "reason"]
    assert "configuration specified sequence control 'START', but model does not provide " \
           "that input" in reason, reason


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torchscript_accumulator_keeps_each_sequences_state(server) -> None:
    client = server.grpc_client()
    assert client.is_model_ready("acc_torch")
    values = {3: [1.0, 1.0, 1.0], 4: [2.0, 4.0]}
    results = run_interleaved(client, "acc_torch", "INPUT__0", np.float32, values)
    assert [float(r.as_numpy("OUTPUT__0")[0, 0]) for r in results[3]] == [1.0, 2.0, 3.0]
    assert [float(r.as_numpy("OUTPUT__0")[0, 0]) for r in results[4]] == [2.0, 6.0]
    # START (fp32 [0, 1]) times READY (fp32 [0, 3])
    assert [float(r.as_numpy("FLAGS__2")[0, 0]) for r in results[3]] == [3.0, 0.0, 0.0]


def strings(result, name: str) -> list[str]:
    return [v.decode() for v in result.as_numpy(name).reshape(-1)]


def test_onnx_string_state_starts_empty_and_is_kept_per_sequence(server) -> None:
    """TYPE_STRING state (Triton's *_sequence_object models): zero_data is empty
    strings, each sequence keeps its own, two sequences run in one batch."""
    client = server.grpc_client()
    assert client.is_model_ready("str_onnx")
    values = {31: ["a", "b", "c"], 32: ["x", "y"]}
    results = run_interleaved(client, "str_onnx", "INPUT", object, values, batched=True)
    assert [strings(r, "OUTPUT") for r in results[31]] == \
        [["", "a"], ["", "a", "b"], ["", "a", "b", "c"]]
    assert [strings(r, "OUTPUT") for r in results[32]] == [["", "x"], ["", "x", "y"]]
    stats = client.get_inference_statistics("str_onnx").model_stats[0]
    assert stats.inference_count == 5 and stats.execution_count < 5  # batched
    again = run_interleaved(client, "str_onnx", "INPUT", object, {31: ["q"]}, batched=True)
    assert strings(again[31][0], "OUTPUT") == ["", "q"]  # END dropped the kept state


def test_onnx_string_state_from_a_data_file(server) -> None:
    """A TYPE_STRING initial_state data_file holds length-prefixed strings."""
    client = server.grpc_client()
    results = run_interleaved(client, "str_file_onnx", "INPUT", object, {41: ["a", "b"]})
    assert [strings(r, "OUTPUT") for r in results[41]] == \
        [["x", "", "yz", "a"], ["x", "", "yz", "a", "b"]]


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torchscript_string_state_is_a_list_of_str(server) -> None:
    client = server.grpc_client()
    assert client.is_model_ready("str_torch")
    # one instance, one slot (no batching): the sequences run one after the other
    results = run_interleaved(client, "str_torch", "INPUT__0", object, {51: ["a", "b"]})
    assert [strings(r, "OUTPUT__0") for r in results[51]] == [["", "a"], ["", "a", "b"]]
    results = run_interleaved(client, "str_torch", "INPUT__0", object, {52: ["c"]})
    assert [strings(r, "OUTPUT__0") for r in results[52]] == [["", "c"]]


@pytest.mark.skipif(torch is None, reason="torch is not installed")
def test_torchscript_refuses_sequence_tensors_of_types_torch_lacks(server) -> None:
    """Triton's pytorch backend's words: a CORRID control (L0_libtorch_io_types), a
    state of a type torch lacks, a List[str] state of 2 dimensions with the batch."""
    index = {m["name"]: m for m in server.http_client().get_model_repository_index()}
    expected = {
        "torch_corrid_u32": "input 'CORRID__2' type 'TYPE_UINT32' is not supported by "
                            "PyTorch.",
        "torch_state_u16": "unsupported datatype TYPE_UINT16 for input state 'STATE__1' "
                           "for model 'torch_state_u16'",
        "torch_str_state_2d": "Triton only supports 1 dimensional List of String as output "
                              "for 'STATE_OUT__1' for model 'torch_str_state_2d'",
    }
    for name, words in expected.items():
        assert index[name]["state"] == "UNAVAILABLE", index[name]
        assert words in index[name]["reason"], index[name]["reason"]


def test_string_initial_state_values_and_bad_files(tmp_path) -> None:
    """Unit test of implicit_state: zeros of a TYPE_STRING state are empty strings; a
    data file that ends inside an element, or holds another count, fails naming it."""
    config = {"sequence_batching": {"state": [{
        "input_name": "S", "output_name": "S_OUT", "data_type": "TYPE_STRING", "dims": [-1],
        "initial_state": [{"data_type": "TYPE_STRING", "dims": [2], "name": "init",
                           "data_file": "f"}]}]}}
    (spec,) = state_specs(config)
    assert initial_value(replace(spec, initial_state=None)).tolist() == [b""]
    (tmp_path / "initial_state").mkdir()
    path = tmp_path / "initial_state" / "f"
    path.write_bytes(b"\x01\x00\x00\x00a\x02\x00\x00\x00bc")
    assert initial_value(spec, str(tmp_path)).tolist() == [b"a", b"bc"]
    path.write_bytes(b"\x01\x00\x00\x00a\x05\x00\x00\x00bc")
    with pytest.raises(ValueError, match="ends inside element 1 \\(5 bytes\\)"):
        initial_value(spec, str(tmp_path))
    path.write_bytes(b"\x01\x00\x00\x00a")
    with pytest.raises(ValueError, match="holds 1 elements of TYPE_STRING, dims \\[2\\] "
                                         "need 2"):
        with_initial([spec], str(tmp_path))


def test_batcher_keeps_state_per_sequence_and_drops_it_at_end() -> None:
    """Unit test of common.Batcher: START takes the initial state, END and
    drop_sequence (a sequence ended without END) forget the kept one."""
    config = {"max_batch_size": 0,
              "input": [{"name": "X", "data_type": "TYPE_FP32", "dims": [1]}],
              "output": [{"name": "Y", "data_type": "TYPE_FP32", "dims": [1]}],
              "sequence_batching": {"state": [{
                  "input_name": "S", "output_name": "S_OUT", "data_type": "TYPE_FP32",
                  "dims": [1], "initial_state": [{"data_type": "TYPE_FP32", "dims": ["1"],
                                                  "zero_data": True, "name": "z"}]}]}}
    seen = []

    def run(inputs, names):
        seen.append(names)
        total = inputs["S"] + inputs["X"]
        return {"Y": total, "S_OUT": total}

    def request(corrid: int, flags: int, x: float):
        return pb_utils.InferenceRequest(
            model_name="m", correlation_id=corrid, flags=flags, requested_output_names=[],
            inputs=[pb_utils.Tensor("X", np.array([x], np.float32))])

    with installed(FakeRuntime()):
        batcher = Batcher(config, run, states=state_specs(config))
        y = [pb_utils.get_output_tensor_by_name(r, "Y").as_numpy()[0] for r in
             batcher.execute([request(1, 1, 2.0), request(2, 1, 5.0)])
             + batcher.execute([request(1, 0, 3.0), request(2, 2, 1.0)])]
        assert y == [2.0, 5.0, 5.0, 6.0]
        assert seen[0] == ["Y", "S_OUT"]  # the state output is always computed
        assert set(batcher._kept) == {1}  # sequence 2 ended
        batcher.drop_sequence(1)
        assert not batcher._kept
