"""tritonclient inputs straight from numpy arrays (datatype from the array's dtype),
`infer_at_once`, requests sent together from clients of their own, and
`send_and_hang_up`, a client that leaves before its answer."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import np_to_triton_dtype


def http_input(name: str, array: np.ndarray, binary: bool = True) -> httpclient.InferInput:
    tensor = httpclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array, binary_data=binary)
    return tensor


def grpc_input(name: str, array: np.ndarray) -> grpcclient.InferInput:
    tensor = grpcclient.InferInput(name, list(array.shape), np_to_triton_dtype(array.dtype))
    tensor.set_data_from_numpy(array)
    return tensor


def typed_input(name: str, array: np.ndarray, datatype: str, module=httpclient):
    """An InferInput of `module` (tritonclient.http or .grpc) with `datatype` as given."""
    tensor = module.InferInput(name, list(array.shape), datatype)
    tensor.set_data_from_numpy(array)
    return tensor


def infer_at_once(client_of: Callable[[], object], model: str, inputs: list[list],
                  answered: list | None = None) -> list:
    """One request of `model` for each of `inputs`, all at once, each from its own
    thread and client (`client_of()`): each one's result or error, in order; `answered`
    gets each index as its answer comes."""
    results: list = [None] * len(inputs)

    def one(i: int) -> None:
        client = client_of()
        try:
            results[i] = client.infer(model, inputs[i])
        except Exception as err:  # noqa: BLE001 - the caller looks at it
            results[i] = err
        finally:
            client.close()  # in its own thread (not left to __del__ on another)
        if answered is not None:
            answered.append(i)
    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return results


def send_and_hang_up(server, model: str, marker: Path, input_name: str = "MARKER") -> None:
    """An HTTP client that sends its request and goes away before the answer: one BYTES
    input, `input_name`, naming `marker` (where the model writes what it saw)."""
    body = json.dumps({"inputs": [{"name": input_name, "datatype": "BYTES", "shape": [1],
                                   "data": [str(marker)]}]}).encode()
    with socket.create_connection(("127.0.0.1", server.http_port), timeout=5) as sock:
        sock.sendall(b"POST /v2/models/%s/infer HTTP/1.1\r\nHost: x\r\n"
                     b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
                     % (model.encode(), len(body), body))
        time.sleep(0.5)  # the model is running now
