"""Triton's system shared memory extension, driven the way a user drives it: a real
pbserve, real stubs, segments made with `tritonclient.utils.shared_memory`, the
`tritonclient` HTTP and gRPC clients, and perf_analyzer where it is installed.

Every segment a test creates is named `/pbserve_test_<pid>_...` and destroyed by the
test (the suite's leak check would see it otherwise)."""

from __future__ import annotations

import contextlib
import json
import os
import queue
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
import tritonclient.utils.shared_memory as shm
from tritonclient.utils import InferenceServerException, np_to_triton_dtype

from client_inputs import http_input as h_in
from pbserve.core.config.gpus import visible_gpus
from pbserve.testing import running_server, stub_pids
from polling import wait_for

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "models" / "examples"
TEST_MODELS = ROOT / "tests" / "models"
ANCHOR_MODELS = ROOT.parent / "shared" / "perf" / "anchor_models"
ANCHOR_ENV = ROOT.parent / "shared" / "perf" / "env_anchor.sh"
MIB16 = 16 << 20


@pytest.fixture(scope="module")
def server():
    """identity and repeat (models/examples), bls_forward (a BLS call to identity).
    (Client regions through frontend processes: tests/frontends, and the conformance
    suite with --frontend-processes 2.)"""
    load = [arg for name in ("identity", "repeat", "bls_forward")
            for arg in ("--load-model", name)]
    with running_server(EXAMPLES, TEST_MODELS, args=["--model-control-mode", "explicit",
                                                     *load]) as running:
        yield running


@pytest.fixture
def http(server):
    client = server.http_client()
    yield client
    client.unregister_system_shared_memory()
    client.close()


@pytest.fixture
def grpc(server):
    client = server.grpc_client()
    yield client
    client.unregister_system_shared_memory()
    client.close()


@contextlib.contextmanager
def segment(tag: str, size: int):
    """A client's POSIX segment (destroyed at the end); yields (handle, key)."""
    key = f"/pbserve_test_{os.getpid()}_{tag}"
    handle = shm.create_shared_memory_region(tag, key, size)
    try:
        yield handle, key
    finally:
        shm.destroy_shared_memory_region(handle)


def raw(server, method: str, path: str, body: bytes | None = None) -> tuple[int, str]:
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body,
                                     method=method)
    try:
        with urllib.request.urlopen(request, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def error_of(call) -> InferenceServerException:
    with pytest.raises(InferenceServerException) as info:
        call()
    return info.value


def shm_input(module, name: str, array: np.ndarray, region: str, offset: int = 0,
              byte_size: int | None = None):
    tensor = module.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_shared_memory(region, array.nbytes if byte_size is None else byte_size,
                             offset)
    return tensor


def shm_output(module, name: str, region: str, byte_size: int, offset: int = 0):
    output = module.InferRequestedOutput(name)
    output.set_shared_memory(region, byte_size, offset)
    return output


# --- registering -----------------------------------------------------------------------

def test_server_metadata_lists_the_extension(http):
    assert "system_shared_memory" in http.get_server_metadata()["extensions"]


def test_regions_register_list_and_unregister_over_both_protocols(http, grpc):
    with segment("reg_a", 8192) as (_, key_a), segment("reg_b", 8192) as (_, key_b):
        http.register_system_shared_memory("a", key_a, 4096, offset=4096)
        grpc.register_system_shared_memory("b", key_b, 100, offset=7)
        expected = [{"name": "a", "key": key_a, "offset": 4096, "byte_size": 4096},
                    {"name": "b", "key": key_b, "offset": 7, "byte_size": 100}]
        assert http.get_system_shared_memory_status() == expected
        assert http.get_system_shared_memory_status("b") == expected[1:]
        status = grpc.get_system_shared_memory_status(as_json=True)["regions"]
        assert status["a"] == {"name": "a", "key": key_a, "offset": "4096", "byte_size": "4096"}
        assert set(status) == {"a", "b"}
        grpc.unregister_system_shared_memory("a")
        assert [r["name"] for r in http.get_system_shared_memory_status()] == ["b"]
        http.unregister_system_shared_memory("not_registered")  # no error, as Triton
        http.unregister_system_shared_memory()
        assert grpc.get_system_shared_memory_status(as_json=True) == {}


def test_registration_errors_are_tritons(server, http, grpc):
    with segment("errs", 8192) as (_, key):
        http.register_system_shared_memory("r", key, 64)
        cases = [
            (lambda c: c.register_system_shared_memory("r", key, 64),
             400, "StatusCode.ALREADY_EXISTS", "shared memory region 'r' already in manager"),
            (lambda c: c.register_system_shared_memory("x", "/pbserve_test_no_such_key", 64),
             500, "StatusCode.INTERNAL",
             "Unable to open shared memory region: '/pbserve_test_no_such_key'"),
            (lambda c: c.register_system_shared_memory("x", key, 4097, offset=4096),
             400, "StatusCode.INVALID_ARGUMENT",
             "failed to register shared memory region 'x': invalid args"),
            (lambda c: c.register_system_shared_memory("x", key, 0),
             400, "StatusCode.INVALID_ARGUMENT", "failed to register shared memory region "
             "'x': unable to process address spaceInvalid argument"),
            (lambda c: c.get_system_shared_memory_status("nope"),
             404, "StatusCode.NOT_FOUND", "Unable to find system shared memory region: 'nope'"),
        ]
        for call, status, code, message in cases:
            err = error_of(lambda: call(http))
            assert (err.status(), err.message()) == (str(status), message)
            err = error_of(lambda: call(grpc))
            assert (err.status(), err.message()) == (code, message)
        assert [r["name"] for r in http.get_system_shared_memory_status()] == ["r"]
    assert raw(server, "POST", "/v2/systemsharedmemory/register", b"{}") == (
        400, '{"error":"\'region name\' is necessary to register system shared memory region"}')
    assert raw(server, "POST", "/v2/systemsharedmemory/region/r/register",
               b'{"offset": 0, "byte_size": 8}') == (
        400, '{"error":"Shared memory register request has no \'key\' field"}')
    assert raw(server, "GET", "/v2/systemsharedmemory/region/r/register")[0] == 405
    assert raw(server, "POST", "/v2/systemsharedmemory/status", b"")[0] == 405


def test_the_servers_own_shared_memory_cannot_be_registered(server, http):
    own = next(n for n in os.listdir("/dev/shm") if n.startswith(f"pbserve-{server.pid}-"))
    err = error_of(lambda: http.register_system_shared_memory("mine", "/" + own, 64))
    assert err.status() == "400"
    assert err.message() == (f"cannot register shared memory region 'mine' with key '/{own}' "
                             f"as the key contains the reserved prefix 'pbserve-'")
    assert http.get_system_shared_memory_status() == []


def test_cuda_shared_memory_is_refused(server, http, grpc):
    assert http.get_cuda_shared_memory_status() == []
    assert grpc.get_cuda_shared_memory_status(as_json=True) == {}
    message = "failed to register CUDA shared memory region: 'c', GPUs not supported"
    status, body = raw(server, "POST", "/v2/cudasharedmemory/region/c/register",
                       json.dumps({"raw_handle": {"b64": "AAAA"}, "device_id": 0,
                                   "byte_size": 64}).encode())
    if not visible_gpus():  # what the server sees too (the CUDA driver)
        assert (status, json.loads(body)["error"]) == (400, message)
        err = error_of(lambda: grpc.register_cuda_shared_memory("c", b"\0" * 64, 0, 64))
        assert (err.status(), err.message()) == ("StatusCode.INVALID_ARGUMENT", message)
    else:
        assert status == 501 and "not supported by pbserve" in json.loads(body)["error"]
    grpc.unregister_cuda_shared_memory()
    http.unregister_cuda_shared_memory()


# --- inference -------------------------------------------------------------------------

ARRAYS = {
    "FP32": np.linspace(-3, 3, 1000, dtype=np.float32),
    "INT8": np.arange(-100, 100, dtype=np.int8),
    "UINT64": np.array([0, 1, 2**64 - 1], dtype=np.uint64),
    "FP16": np.array([0.5, -1.25, 65504], dtype=np.float16),
    "BOOL": np.array([True, False, True]),
}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_inputs_come_from_and_outputs_go_into_regions_bit_exact(protocol, http, grpc):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    with segment("in", 1 << 16) as (inp, in_key), segment("out", 1 << 16) as (out, out_key):
        client.register_system_shared_memory("in", in_key, 1 << 15, offset=4096)
        client.register_system_shared_memory("out", out_key, (1 << 16) - 1, offset=1)
        inputs, outputs, places, offset = [], [], {}, 0
        for datatype, array in ARRAYS.items():
            shm.set_shared_memory_region(inp, [array], offset=4096 + offset)
            inputs.append(shm_input(module, f"INPUT_{datatype}", array, "in", offset))
            outputs.append(shm_output(module, f"OUTPUT_{datatype}", "out", array.nbytes,
                                      offset + 3))
            places[datatype] = offset
            offset += array.nbytes + 13  # odd offsets: nothing here needs alignment
        result = client.infer("identity", inputs, outputs=outputs)
        for datatype, array in ARRAYS.items():
            got = shm.get_contents_as_numpy(out, array.dtype, array.shape,
                                            offset=1 + places[datatype] + 3)
            assert got.tobytes() == array.tobytes(), datatype
            output = result.get_output(f"OUTPUT_{datatype}")
            shape = output["shape"] if protocol == "http" else list(output.shape)
            assert [int(d) for d in shape] == list(array.shape)
        if protocol == "http":  # only name, datatype and shape, as Triton
            assert result.get_output("OUTPUT_FP32") == {
                "name": "OUTPUT_FP32", "datatype": "FP32", "shape": [1000]}
        else:
            assert set(result.get_response().raw_output_contents) == {b""}


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_16_mib_in_and_out_of_regions_bit_exact(protocol, http, grpc):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    rng = np.random.default_rng(7)
    with segment("big_in", MIB16) as (inp, in_key), segment("big_out", MIB16) as (out, out_key):
        client.register_system_shared_memory("big_in", in_key, MIB16)
        client.register_system_shared_memory("big_out", out_key, MIB16)
        for _ in range(2):  # the second request reuses the stub's mapping
            array = rng.random(MIB16 // 4, dtype=np.float32)
            shm.set_shared_memory_region(inp, [array])
            client.infer("identity", [shm_input(module, "INPUT_FP32", array, "big_in")],
                         outputs=[shm_output(module, "OUTPUT_FP32", "big_out", MIB16)])
            got = shm.get_contents_as_numpy(out, np.float32, [MIB16 // 4])
            assert np.array_equal(got, array)


def test_one_side_in_a_region_the_other_on_the_wire(http, grpc):
    array = np.arange(32, dtype=np.int32) * 7
    with segment("mix", 4096) as (handle, key):
        http.register_system_shared_memory("mix", key, 4096)
        shm.set_shared_memory_region(handle, [array])
        result = http.infer("identity", [shm_input(httpclient, "INPUT_INT32", array, "mix")])
        assert np.array_equal(result.as_numpy("OUTPUT_INT32"), array)
        result = grpc.infer("identity", [shm_input(grpcclient, "INPUT_INT32", array, "mix")])
        assert np.array_equal(result.as_numpy("OUTPUT_INT32"), array)
        strings = np.array([b"abc", b"", "\u00e9t\u00e9".encode()], dtype=np.object_)
        tensor = grpcclient.InferInput("INPUT_STRING", [3], "BYTES")
        tensor.set_data_from_numpy(strings)
        grpc.infer("identity", [tensor], outputs=[
            shm_output(grpcclient, "OUTPUT_STRING", "mix", 64, offset=1024)])
        got = shm.get_contents_as_numpy(handle, np.object_, [3], offset=1024)
        assert got.tolist() == strings.tolist()


def test_a_bls_model_hands_a_region_input_on_and_answers_into_a_region(http):
    """bls_forward passes its input (a view of the client's region) to identity, whose
    stub maps the region too, and answers with identity's output, which its stub copies
    into the client's region."""
    array = np.random.default_rng(3).random(1 << 18, dtype=np.float32)  # 1 MiB
    with segment("bls", 4 << 20) as (handle, key):
        http.register_system_shared_memory("bls", key, 4 << 20)
        shm.set_shared_memory_region(handle, [array])
        http.infer("bls_forward", [shm_input(httpclient, "INPUT_FP32", array, "bls")],
                   outputs=[shm_output(httpclient, "OUTPUT_FP32", "bls", 2 << 20, 2 << 20)])
        got = shm.get_contents_as_numpy(handle, np.float32, array.shape, offset=2 << 20)
        assert np.array_equal(got, array)


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_bad_region_references_get_tritons_errors(protocol, http, grpc):
    client, module = (http, httpclient) if protocol == "http" else (grpc, grpcclient)
    http_status = {"StatusCode.INVALID_ARGUMENT": "400", "StatusCode.NOT_FOUND": "404",
                   "StatusCode.INTERNAL": "500"}
    array = np.ones(16, dtype=np.float32)
    with segment("bad", 4096) as (handle, key):
        client.register_system_shared_memory("bad", key, 128)
        shm.set_shared_memory_region(handle, [np.full(1024, 9, np.uint8)])
        cases = [
            (shm_input(module, "INPUT_FP32", array, "nowhere"), None, "StatusCode.NOT_FOUND",
             "Unable to find shared memory region: 'nowhere'"),
            (shm_input(module, "INPUT_FP32", array, "bad", offset=128), None,
             "StatusCode.INVALID_ARGUMENT", "Invalid offset for shared memory region: 'bad'"),
            (shm_input(module, "INPUT_FP32", array, "bad", offset=100), None,
             "StatusCode.INVALID_ARGUMENT",
             "Invalid offset + byte size for shared memory region: 'bad'"),
            (shm_input(module, "INPUT_FP32", array, "bad", byte_size=32), None,
             "StatusCode.INVALID_ARGUMENT", "[request id: <id_unknown>] input byte size "
             "mismatch for input 'INPUT_FP32' for model 'identity'. Expected 64, got 32"),
            (shm_input(module, "INPUT_FP32", array, "bad"),
             shm_output(module, "OUTPUT_FP32", "nowhere", 64), "StatusCode.NOT_FOUND",
             "Unable to find shared memory region: 'nowhere'"),
            (shm_input(module, "INPUT_FP32", array, "bad"),
             shm_output(module, "OUTPUT_FP32", "bad", 32, offset=64), "StatusCode.INTERNAL",
             "shared memory size specified with the request for output 'OUTPUT_FP32' "
             "(32 bytes) should be at least 64 bytes to hold the results"),
        ]
        for tensor, output, code, message in cases:
            err = error_of(lambda: client.infer("identity", [tensor], outputs=output and [output]))
            status = http_status[code] if protocol == "http" else code
            assert (err.status(), err.message()) == (status, message)
        # the refused output wrote nothing: the region still holds what the client put there
        assert (shm.get_contents_as_numpy(handle, np.uint8, [128]) == 9).all()


def test_malformed_shared_memory_parameters_are_refused(server, grpc):
    def infer(params: dict, **extra) -> tuple[int, str]:
        body = {"inputs": [{"name": "INPUT_FP32", "datatype": "FP32", "shape": [4],
                            "parameters": params, **extra}]}
        status, reply = raw(server, "POST", "/v2/models/identity/infer",
                            json.dumps(body).encode())
        return status, json.loads(reply)["error"]

    assert infer({"shared_memory_region": "r", "shared_memory_byte_size": 16},
                 data=[1, 2, 3, 4]) == (400, (
        "Input must set only one of the following fields: 'data', 'binary_data_size' in "
        "'parameters', 'shared_memory_region' in 'parameters'. But set 'data' "
        "'shared_memory_region' (input 'INPUT_FP32')"))
    assert infer({"shared_memory_region": 5}) == (
        400, "Unable to parse 'shared_memory_region': expected a string")
    assert infer({"shared_memory_region": "r", "shared_memory_offset": -1}) == (
        400, "Unable to parse 'shared_memory_offset': expected an unsigned integer")
    body = {"inputs": [{"name": "INPUT_FP32", "datatype": "FP32", "shape": [1], "data": [1]}],
            "outputs": [{"name": "OUTPUT_FP32", "parameters": {
                "shared_memory_region": "r", "shared_memory_byte_size": 4,
                "binary_data": True}}]}
    status, reply = raw(server, "POST", "/v2/models/identity/infer", json.dumps(body).encode())
    assert (status, json.loads(reply)["error"]) == (
        400, "Output can't set both 'shared_memory_region' and 'binary_data'")

    tensor = grpcclient.InferInput("INPUT_FP32", [4], "FP32")
    tensor.set_data_from_numpy(np.ones(4, np.float32))
    tensor._input.parameters["shared_memory_region"].string_param = "r"
    err = error_of(lambda: grpc.infer("identity", [tensor]))
    assert err.message() == ("'shared_memory_byte_size' must be specified along with "
                             "'shared_memory_region' parameter for tensor 'INPUT_FP32'")
    tensor._input.parameters["shared_memory_byte_size"].string_param = "16"
    err = error_of(lambda: grpc.infer("identity", [tensor]))
    assert err.message() == ("invalid value type for 'shared_memory_byte_size' parameter "
                             "for tensor 'INPUT_FP32', expected int64_param.")


# --- decoupled models ------------------------------------------------------------------

def stream(grpc, model: str, inputs: list, outputs=None) -> list:
    """Every response (or error) of one request over a gRPC stream, up to the final."""
    events: queue.Queue = queue.Queue()
    grpc.start_stream(callback=lambda result, error: events.put(error or result))
    try:
        grpc.async_stream_infer(model, inputs, outputs=outputs,
                                enable_empty_final_response=True)
        got = []
        while True:
            event = events.get(timeout=20)
            got.append(event)
            if isinstance(event, InferenceServerException):
                return got
            final = event.get_response().parameters["triton_final_response"].bool_param
            if final:
                return got
    finally:
        grpc.stop_stream()


def test_decoupled_model_reads_inputs_from_a_region_and_refuses_output_regions(http, grpc):
    values = np.array([5, 6, 7], dtype=np.int32)
    with segment("dec", 4096) as (handle, key):
        http.register_system_shared_memory("dec", key, 4096)
        shm.set_shared_memory_region(handle, [values])
        responses = stream(grpc, "repeat", [shm_input(grpcclient, "IN", values, "dec")])
        assert [int(r.as_numpy("OUT")[0]) for r in responses[:-1]] == [5, 6, 7]
        refused = stream(grpc, "repeat", [shm_input(grpcclient, "IN", values, "dec")],
                         outputs=[shm_output(grpcclient, "OUT", "dec", 4, offset=2048)])
        assert len(refused) == 1 and "decoupled transaction policy" in refused[0].message()


def test_unregistering_a_region_in_use_waits_for_its_request(server, http, grpc):
    values = np.array([1, 2, 3], dtype=np.int32)
    delay = np.array([300], dtype=np.uint32)
    with segment("busy", 4096) as (handle, key):
        http.register_system_shared_memory("busy", key, 4096)
        shm.set_shared_memory_region(handle, [values, delay])
        events: queue.Queue = queue.Queue()
        grpc.start_stream(callback=lambda result, error: events.put(error or result))
        try:
            grpc.async_stream_infer("repeat", [
                shm_input(grpcclient, "IN", values, "busy"),
                shm_input(grpcclient, "DELAY", delay, "busy", offset=values.nbytes)])
            assert int(events.get(timeout=20).as_numpy("OUT")[0]) == 1
            http.unregister_system_shared_memory("busy")
            # still in use: still listed (Triton unregisters it when its requests complete)
            assert [r["name"] for r in http.get_system_shared_memory_status()] == ["busy"]
            assert [int(events.get(timeout=20).as_numpy("OUT")[0]) for _ in range(2)] == [2, 3]
        finally:
            grpc.stop_stream()
        wait_for(lambda: http.get_system_shared_memory_status() == [], "the deferred unregister")


# --- mappings ---------------------------------------------------------------------------

def family(pid: int) -> list[int]:
    """`pid` and its stubs (children of the server, or of its stub zygote)."""
    return [pid, *stub_pids(pid)]


def mappings(pids: list[int], key: str) -> list[tuple[int, int, int]]:
    """(pid, length, file offset) of each mapping of the segment `key` in `pids`."""
    found = []
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
                fields = line.split()
                if len(fields) >= 6 and fields[5] == f"/dev/shm{key}":
                    start, end = (int(x, 16) for x in fields[0].split("-"))
                    found.append((pid, end - start, int(fields[2], 16)))
    return found


def test_only_the_registered_window_is_mapped_and_unregister_unmaps_it(server, http):
    array = np.arange(1250, dtype=np.float32)  # 5000 bytes
    with segment("win", 5 * 4096) as (handle, key):
        http.register_system_shared_memory("win", key, 5000, offset=4096 + 100)
        shm.set_shared_memory_region(handle, [array], offset=4096 + 100)
        http.infer("identity", [shm_input(httpclient, "INPUT_FP32", array, "win")],
                   outputs=[shm_output(httpclient, "OUTPUT_FP32", "win", 5000)])
        found = mappings(family(server.pid), key)
        assert {pid for pid, _, _ in found} >= {server.pid} and len(found) >= 2  # + a stub
        # pages 1 and 2 of the segment hold [4196, 9196): only they are mapped
        assert {(length, offset) for _, length, offset in found} == {(2 * 4096, 4096)}
        http.unregister_system_shared_memory("win")
        wait_for(lambda: mappings(family(server.pid), key) == [], "every mapping to go")
        assert shm.get_contents_as_numpy(handle, np.float32, [1250], 4196).tolist() == \
            array.tolist()  # the client's segment itself is untouched


def test_a_segment_gone_before_a_stub_maps_it_fails_the_request_not_the_stub(server, http):
    array = np.arange(16, dtype=np.float32)
    processes = set(family(server.pid))
    with segment("gone", 4096) as (handle, key):
        http.register_system_shared_memory("gone", key, 4096)
        shm.set_shared_memory_region(handle, [array])
    # unlinked while registered: the parent's mapping keeps the memory, no stub can open it
    err = error_of(lambda: http.infer(
        "identity", [shm_input(httpclient, "INPUT_FP32", array, "gone")]))
    assert err.status() == "500"
    assert f"cannot open shared memory '{key}'" in err.message()
    http.unregister_system_shared_memory("gone")
    assert set(family(server.pid)) == processes  # no stub died
    result = http.infer("identity", [h_in("INPUT_FP32", array)])
    assert np.array_equal(result.as_numpy("OUTPUT_FP32"), array)


def test_a_server_stopping_with_regions_registered_exits_cleanly_and_leaves_them():
    array = np.arange(64, dtype=np.int64)
    with segment("exit", 4096) as (handle, key):
        with running_server(EXAMPLES, args=["--model-control-mode", "explicit",
                                            "--load-model", "identity"]) as alone:
            client = alone.http_client()
            client.register_system_shared_memory("exit", key, 4096)
            shm.set_shared_memory_region(handle, [array])
            client.infer("identity", [shm_input(httpclient, "INPUT_INT64", array, "exit")],
                         outputs=[shm_output(httpclient, "OUTPUT_INT64", "exit", 512, 1024)])
            assert mappings(family(alone.pid), key)
            assert alone.stop() == 0
        assert os.path.exists(f"/dev/shm{key}")  # the client's, never unlinked by the server
        got = shm.get_contents_as_numpy(handle, np.int64, [64], offset=1024)
        assert np.array_equal(got, array)


def test_client_shm_can_be_disallowed():
    with running_server(EXAMPLES, args=["--allow-client-shm=false"]) as off:
        client = off.http_client()
        with segment("off", 4096) as (_, key):
            err = error_of(lambda: client.register_system_shared_memory("off", key, 64))
        assert (err.status(), err.message()) == ("501", (
            "Client shared memory is disabled. Start the server with "
            "'--allow-client-shm=true' to enable."))
        assert client.get_system_shared_memory_status() == []


# --- perf_analyzer ----------------------------------------------------------------------

def perf_analyzer_command() -> list[str] | None:
    """perf_analyzer from PATH or this venv, else the perf anchor's (env_anchor.sh)."""
    found = shutil.which("perf_analyzer") or shutil.which(
        "perf_analyzer", path=str(Path(sys.executable).parent))
    if found:  # the tritonclient wheel ships none (a placeholder package): some installs do
        with contextlib.suppress(OSError, subprocess.TimeoutExpired):
            probe = subprocess.run([found, "--version"], capture_output=True, timeout=30)
            if b"perf_analyzer" in probe.stdout + probe.stderr:
                return [found]
    if ANCHOR_ENV.exists() and Path("/tmp/anchor-venv/bin/perf_analyzer").exists():
        return ["bash", "-c", f'source {ANCHOR_ENV} && exec "$PERF_ANALYZER" "$@"', "pa"]
    return None


PERF_ANALYZER = perf_analyzer_command()


@pytest.mark.skipif(PERF_ANALYZER is None, reason="no perf_analyzer (neither on PATH nor "
                    "the perf anchor's: ../shared/perf/setup_anchor.sh)")
@pytest.mark.skipif(not ANCHOR_MODELS.is_dir(), reason=f"no {ANCHOR_MODELS}")
@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_runs_with_system_shared_memory(protocol):
    before = perf_analyzer_segments()
    with running_server(ANCHOR_MODELS) as anchor:
        url = anchor.grpc_url if protocol == "grpc" else anchor.http_url
        result = subprocess.run(
            [*PERF_ANALYZER, "-m", "identity_fp32", "-i", protocol, "-u", url,
             "--shape", "INPUT0:4194304", "--shared-memory", "system",
             "--output-shared-memory-size", str(MIB16), "--concurrency-range", "1",
             "--measurement-interval", "500", "--max-trials", "3",
             "--stability-percentage", "100"],
            capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
        assert "Throughput:" in result.stdout
        assert anchor.http_client().get_system_shared_memory_status() == []
    assert perf_analyzer_segments() - before == set()  # it cleaned up: nothing refused


def perf_analyzer_segments() -> set[str]:
    """perf_analyzer names its segments after the tensors (INPUT0_0_0, OUTPUT0)."""
    return {n for n in os.listdir("/dev/shm") if re.fullmatch(r"(INPUT|OUTPUT)\d+(_\d+)*", n)}
