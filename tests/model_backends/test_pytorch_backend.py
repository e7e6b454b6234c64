"""The built-in PyTorch backend (pbserve/model_backends/pytorch): TorchScript modules scripted
here, served by a real server, driven by tritonclient. Runs wherever torch imports (CI
installs the CPU wheel: .ci/run)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Dict, List

import numpy as np
import pytest
from tritonclient.utils import InferenceServerException

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated")

from client_inputs import typed_input as inp  # noqa: E402
from concurrent_calls import at_once  # noqa: E402
from pbserve.testing import running_server  # noqa: E402


class AddSub(torch.nn.Module):
    def forward(self, a, b):
        return a + b, a - b


class Named(torch.nn.Module):
    """Reports whether it ran in inference mode, and scales by 10 its second argument."""
    def forward(self, x, y):
        return x + 10 * y, torch.tensor([x.is_inference()])


class FromDict(torch.nn.Module):
    def forward(self, d: Dict[str, torch.Tensor]):
        return d["left"] * d["right"]


class Words(torch.nn.Module):
    def forward(self, words: List[str]) -> List[str]:
        return [w.upper() for w in words]


class WrongType(torch.nn.Module):
    def forward(self, x):
        return x.to(torch.int64)


def save(repo: Path, name: str, module, config: str) -> None:
    (repo / name / "1").mkdir(parents=True)
    torch.jit.script(module).save(str(repo / name / "1" / "model.pt"))
    (repo / name / "config.pbtxt").write_text(textwrap.dedent(config))


def io(kind: str, name: str, dtype: str, dims: str) -> str:
    return f'{kind} {{ name: "{name}" data_type: {dtype} dims: [ {dims} ] }}'


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("torch_repo")
    save(repo, "add_sub", AddSub(), f"""
        platform: "pytorch_libtorch"
        max_batch_size: 8
        dynamic_batching {{ max_queue_delay_microseconds: 200000 }}
        {io("input", "INPUT__1", "TYPE_FP32", "4")}
        {io("input", "INPUT__0", "TYPE_FP32", "4")}
        {io("output", "OUTPUT__1", "TYPE_FP32", "4")}
        {io("output", "OUTPUT__0", "TYPE_FP32", "4")}
        """)
    named = f"""
        backend: "pytorch"
        {io("input", "y", "TYPE_FP32", "2")}
        {io("input", "x", "TYPE_FP32", "2")}
        {io("output", "OUT", "TYPE_FP32", "2")}
        {io("output", "INFERENCE", "TYPE_BOOL", "1")}
        """
    save(repo, "named", Named(), named)
    save(repo, "named_plain", Named(), named + """
        parameters { key: "INFERENCE_MODE" value: { string_value: "false" } }
        parameters { key: "DISABLE_OPTIMIZED_EXECUTION" value: { string_value: "true" } }
        """)
    save(repo, "from_dict", FromDict(), f"""
        backend: "pytorch"
        max_batch_size: 4
        {io("input", "left", "TYPE_INT32", "2")}
        {io("input", "right", "TYPE_INT32", "2")}
        {io("output", "PRODUCT", "TYPE_INT32", "2")}
        """)
    save(repo, "words", Words(), f"""
        backend: "pytorch"
        {io("input", "W", "TYPE_STRING", "-1")}
        {io("output", "U", "TYPE_STRING", "-1")}
        """)
    save(repo, "wrong_type", WrongType(), f"""
        backend: "pytorch"
        {io("input", "X", "TYPE_FP32", "2")}
        {io("output", "Y", "TYPE_FP32", "2")}
        """)
    save(repo, "too_few", AddSub(), f"""
        backend: "pytorch"
        {io("input", "INPUT__0", "TYPE_FP32", "2")}
        {io("output", "OUTPUT__0", "TYPE_FP32", "2")}
        """)
    save(repo, "no_io", AddSub(), 'backend: "pytorch"')
    log = tmp_path_factory.mktemp("torch_log") / "server.log"
    with running_server(repo, log_path=log, ready_path="/v2/health/live",
                        ready_timeout=90) as srv:
        yield srv


def test_named_index_inputs_and_outputs_whatever_their_config_order(server) -> None:
    client = server.http_client()
    assert client.get_model_metadata("add_sub")["platform"] == "pytorch_libtorch"
    a = np.arange(8, dtype=np.float32).reshape(2, 4)
    b = np.ones((2, 4), np.float32)
    r = client.infer("add_sub", [inp("INPUT__0", a, "FP32"), inp("INPUT__1", b, "FP32")])
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__0"), a + b)
    np.testing.assert_array_equal(r.as_numpy("OUTPUT__1"), a - b)


def test_dynamic_batching_concatenates_requests_and_splits_outputs(server) -> None:
    def one(k: int) -> tuple:
        a = np.full((k, 4), k, np.float32)
        b = np.arange(4 * k, dtype=np.float32).reshape(k, 4)
        r = server.http_client().infer(
            "add_sub", [inp("INPUT__0", a, "FP32"), inp("INPUT__1", b, "FP32")])
        return r.as_numpy("OUTPUT__1"), a - b

    before = server.http_client().get_inference_statistics("add_sub")["model_stats"][0]
    for got, want in at_once(one, (1, 2, 3)).values():
        np.testing.assert_array_equal(got, want)
    after = server.http_client().get_inference_statistics("add_sub")["model_stats"][0]
    assert after["inference_count"] - before["inference_count"] == 6
    assert after["execution_count"] - before["execution_count"] < 3


def test_inputs_by_forward_argument_name_and_inference_mode(server) -> None:
    client = server.http_client()
    x, y = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    for model, inference in (("named", True), ("named_plain", False)):
        r = client.infer(model, [inp("x", x, "FP32"), inp("y", y, "FP32")])
        np.testing.assert_array_equal(r.as_numpy("OUT"), x + 10 * y)
        assert r.as_numpy("INFERENCE").tolist() == [inference], model


def test_a_dict_argument_gets_every_input_by_name(server) -> None:
    left = np.array([[1, 2], [3, 4]], np.int32)
    right = np.array([[5, 6], [7, 8]], np.int32)
    r = server.http_client().infer("from_dict", [inp("left", left, "INT32"),
                                                 inp("right", right, "INT32")])
    np.testing.assert_array_equal(r.as_numpy("PRODUCT"), left * right)


def test_strings_as_a_list_of_str(server) -> None:
    words = np.array([b"tensor", "scrïpt".encode()], dtype=object)
    r = server.http_client().infer("words", [inp("W", words, "BYTES")])
    # TorchScript's upper() changes ASCII letters only; the UTF-8 goes through intact
    assert r.as_numpy("U").tolist() == [b"TENSOR", "SCRïPT".encode()]


def test_errors_in_tritons_words(server) -> None:
    client = server.http_client()
    with pytest.raises(InferenceServerException,
                       match="configuration expects datatype TYPE_FP32 for output 'Y', model "
                             "provides TYPE_INT64"):
        client.infer("wrong_type", [inp("X", np.ones(2, np.float32), "FP32")])
    with pytest.raises(InferenceServerException, match=r"unexpected shape for input 'x' for "
                       r"model 'named'. Expected \[2\], got \[3\]"):
        client.infer("named", [inp("x", np.ones(3, np.float32), "FP32"),
                               inp("y", np.ones(2, np.float32), "FP32")])
    index = {m["name"]: m for m in client.get_model_repository_index()}
    assert "unable to load model 'too_few', configuration expects 1 inputs, model provides 2" \
        in index["too_few"]["reason"]
    assert "model configuration must contain at least one input, none were specified." \
        in index["no_io"]["reason"]
