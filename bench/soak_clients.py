"""The soak's clients: one thread each, one path each, every request's outcome recorded.

Paths: `http` (add_sub, HTTP unary), `grpc` (add_sub, gRPC unary), `grpc_stream` (add_sub
over a gRPC stream, one response a request), `decoupled` (repeat over a gRPC stream,
three responses a request), `bls` (bls_pipeline over gRPC: it calls add_sub and
identity). A request not answered within `timeout` is lost; a client that saw one opens
a new connection (a stream's answers no longer match its requests).
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np

PATHS = ("http", "grpc", "grpc_stream", "decoupled", "bls")
RETRY_PAUSE_S = 0.05  # a client pauses this long after a failure, as a retrying one does


@dataclass(frozen=True)
class Outcome:
    """One request: when it was sent and ended (time.monotonic), how it ended."""
    path: str
    sent: float
    ended: float
    result: str  # "ok", "failed" or "lost"
    error: str = ""


@dataclass
class Record:
    """Every outcome of a run, from every client thread."""
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, path: str, sent: float, result: str, error: str = "") -> None:
        outcome = Outcome(path, sent, time.monotonic(), result, error)
        with self.lock:
            self.outcomes.append(outcome)

    def snapshot(self) -> list[Outcome]:
        with self.lock:
            return list(self.outcomes)


def error_text(err: BaseException) -> str:
    """`[status] message` of a tritonclient error (`[stream]` for an error on a gRPC
    stream, which carries no status), else the exception's text."""
    status = getattr(err, "status", None)
    if callable(status):
        message = err.message() if callable(getattr(err, "message", None)) else str(err)
        return f"[{status() or 'stream'}] {message}"
    return f"{type(err).__name__}: {err}"


def _is_timeout(text: str) -> bool:
    """A client-side timeout (the answer never came), not an error the server sent."""
    if text.startswith("[StatusCode.DEADLINE_EXCEEDED]"):
        return True
    low = text.lower()
    return not text.startswith("[") and ("timed out" in low or "timeout" in low)


def _add_sub_inputs(module):
    a = np.arange(16, dtype=np.float32)
    inputs = [module.InferInput(n, [16], "FP32") for n in ("INPUT0", "INPUT1")]
    for tensor in inputs:
        tensor.set_data_from_numpy(a)
    return inputs, (lambda result: np.array_equal(result.as_numpy("OUTPUT0"), a + a))


def _unary(make_client, model: str, inputs, check, path: str, url: str, stop: threading.Event,
           record: Record, timeout: float, **call) -> None:
    client = make_client(url)
    while not stop.is_set():
        sent = time.monotonic()
        try:
            result = client.infer(model, inputs, **call)
        except Exception as err:  # noqa: BLE001 - every failure is counted
            text = error_text(err)
            record.add(path, sent, "lost" if _is_timeout(text) else "failed", text)
            if _is_timeout(text):
                client.close()
                client = make_client(url)
            time.sleep(RETRY_PAUSE_S)
            continue
        ok = check(result)
        record.add(path, sent, "ok" if ok else "failed", "" if ok else f"{model}: wrong answer")
    client.close()


def run_http(url: str, stop: threading.Event, record: Record, timeout: float) -> None:
    import tritonclient.http as httpclient

    inputs, check = _add_sub_inputs(httpclient)
    _unary(lambda u: httpclient.InferenceServerClient(u, network_timeout=timeout),
           "add_sub", inputs, check, "http", url, stop, record, timeout)


def run_grpc(url: str, stop: threading.Event, record: Record, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    inputs, check = _add_sub_inputs(grpcclient)
    _unary(grpcclient.InferenceServerClient, "add_sub", inputs, check, "grpc", url, stop,
           record, timeout, client_timeout=timeout)


def run_bls(url: str, stop: threading.Event, record: Record, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    x = np.arange(16, dtype=np.float32)
    tensor = grpcclient.InferInput("INPUT", [16], "FP32")
    tensor.set_data_from_numpy(x)
    want = 3 * (x - x.mean())
    _unary(grpcclient.InferenceServerClient, "bls_pipeline", [tensor],
           lambda result: np.allclose(result.as_numpy("OUTPUT"), want), "bls", url, stop,
           record, timeout, client_timeout=timeout)


def _stream(model: str, inputs, answers_per_request: int, check, path: str, url: str,
            stop: threading.Event, record: Record, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    while not stop.is_set():
        client = grpcclient.InferenceServerClient(url)
        answers: queue.Queue = queue.Queue()
        client.start_stream(callback=lambda result, error: answers.put((result, error)))
        lost = False
        while not stop.is_set() and not lost:
            sent = time.monotonic()
            client.async_stream_infer(model, inputs)
            got, error = [], ""
            try:
                while len(got) < answers_per_request and not error:
                    result, err = answers.get(timeout=timeout)
                    if err is not None:
                        error = error_text(err)
                    else:
                        got.append(result)
            except queue.Empty:
                record.add(path, sent, "lost", f"no answer within {timeout} s")
                lost = True
                continue
            if error:
                record.add(path, sent, "failed", error)
                time.sleep(RETRY_PAUSE_S)
            else:
                ok = check(got)
                record.add(path, sent, "ok" if ok else "failed",
                           "" if ok else f"{model}: wrong answers")
        client.stop_stream()
        client.close()


def run_grpc_stream(url: str, stop: threading.Event, record: Record, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    inputs, check = _add_sub_inputs(grpcclient)
    _stream("add_sub", inputs, 1, lambda got: check(got[0]), "grpc_stream", url, stop,
            record, timeout)


def run_decoupled(url: str, stop: threading.Event, record: Record, timeout: float) -> None:
    import tritonclient.grpc as grpcclient

    values = np.array([7, 8, 9], dtype=np.int32)
    tensor = grpcclient.InferInput("IN", [3], "INT32")
    tensor.set_data_from_numpy(values)
    _stream("repeat", [tensor], len(values),
            lambda got: [int(r.as_numpy("OUT")[0]) for r in got] == values.tolist(),
            "decoupled", url, stop, record, timeout)


RUNNERS: dict[str, Callable[[str, threading.Event, Record, float], None]] = {
    "http": run_http, "grpc": run_grpc, "grpc_stream": run_grpc_stream,
    "decoupled": run_decoupled, "bls": run_bls}


def start_clients(paths: tuple[str, ...], clients: int, urls: dict[str, str],
                  stop: threading.Event, record: Record, timeout: float
                  ) -> list[threading.Thread]:
    """`clients` threads, paths taken in turn; `urls`: "http" and "grpc" addresses."""
    threads = []
    for i in range(clients):
        path = paths[i % len(paths)]
        url = urls["http" if path == "http" else "grpc"]
        threads.append(threading.Thread(target=RUNNERS[path], daemon=True,
                                        args=(url, stop, record, timeout)))
    for thread in threads:
        thread.start()
    return threads


def summarize(outcomes: list[Outcome], paths: tuple[str, ...], seconds: float) -> list[str]:
    """Lines: sent, answered, failed, lost per path and for all; the commonest errors."""
    lines = []
    errors: collections.Counter = collections.Counter()
    total = collections.Counter()
    for path in paths:
        counts = collections.Counter(o.result for o in outcomes if o.path == path)
        sent = sum(counts.values())
        total.update(counts)
        lines.append(f"{path:12s} sent {sent:7d}  answered {sent - counts['lost']:7d}  "
                     f"failed {counts['failed']:5d}  lost {counts['lost']:4d}")
    errors.update(o.error[:200] for o in outcomes if o.result != "ok")
    sent = sum(total.values())
    lines.append(f"{'all':12s} sent {sent:7d}  answered {sent - total['lost']:7d}  failed "
                 f"{total['failed']:5d}  lost {total['lost']:4d}  ({sent / seconds:.0f} req/s)")
    lines += [f"  {count} x {message}" for message, count in errors.most_common(10)]
    return lines
