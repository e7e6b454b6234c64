"""A loaded model's statistics as its work ends: what each batch, each response of a
decoupled model and each request's final response add to its `ModelStats` (metrics.py),
as Triton counts them. The model's instances tell it of batches and responses
(instances/instance.py), the model of final responses (model.py)."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Callable

from pbserve.core.observability.metrics import BACKEND, CANCELED, REJECTED, ModelStats
from pbserve.core.observability.response_stats import CANCEL, EMPTY, FAIL, SUCCESS
from pbserve.errors import ErrorCode, ServerError

if TYPE_CHECKING:
    from pbserve.core.pending import PendingRequest
    from pbserve.core.types import InferResponse


class ModelAccounting:
    """Adds up `stats`, and calls `on_request_done` after each request's final response.
    Every method is called on the server's event loop and must not block."""

    __slots__ = ("_on_request_done", "stats")

    def __init__(self, stats: ModelStats, on_request_done: Callable[[], None] | None
                 ) -> None:
        self.stats = stats
        self._on_request_done = on_request_done

    def batch_done(self, batch: list[PendingRequest]) -> None:
        """A batch sent to a stub is over: answered, failed, or its stub died or was
        stopped (the model's execution statistics, Triton's). Once per batch, before the
        instance tells its scheduler it is idle; its requests may still owe responses (a
        decoupled model's)."""
        stats = self.stats
        stats.exec_count += 1
        if not batch or not batch[0].exec_start_ns:
            return
        now = time.monotonic_ns()
        if len(batch) == 1:  # the common case, without the sums
            pending = batch[0]
            size, input_ns, output_ns = pending.batch_size or 1, pending.input_ns, \
                pending.output_ns
        else:
            # The batch that ran: its requests' batch dimensions added up, as Triton.
            size = sum([pending.batch_size or 1 for pending in batch])
            input_ns = sum([pending.input_ns for pending in batch])
            output_ns = sum([pending.output_ns for pending in batch])
        figures = stats.batches.get(size)
        if figures is None:
            figures = stats.batches[size] = [0, 0, 0, 0]
        figures[0] += 1
        figures[1] += now - batch[0].exec_start_ns
        figures[2] += input_ns
        figures[3] += output_ns
        for pending in batch:  # added to the model's figures if it succeeds (`completed`)
            if pending.exec_start_ns:
                pending.compute_ns = now - pending.exec_start_ns

    def responded(self, pending: PendingRequest, error: bool, empty: bool,
                  arrived_ns: int) -> None:
        """A decoupled model's response of `pending`, made of the stub's message that
        arrived at `arrived_ns`: its response statistics by index. Just after the
        response was delivered."""
        now = time.monotonic_ns()
        outcome = CANCEL if pending.cancelled else FAIL if error else EMPTY if empty \
            else SUCCESS
        since = pending.last_response_ns or pending.exec_start_ns or arrived_ns
        self.stats.responses.add(pending.responses, outcome, max(arrived_ns - since, 0),
                                 now - arrived_ns)
        pending.responses += 1
        pending.last_response_ns = now

    def completed(self, pending: PendingRequest, response: InferResponse) -> None:
        """A request's final response: its statistics, then `on_request_done`."""
        stats = self.stats
        stats.pending -= 1
        now = time.monotonic_ns()
        arrival_ns = pending.arrival_ns
        took_us = (now - arrival_ns) // 1000
        stats.request_us += took_us
        stats.last_inference_ms = int(time.time() * 1000)
        # As Triton's Python backend: a request the model answered with an error response
        # (InferenceResponse(error=...)) succeeded; one whose execute raised failed.
        if response.error is None or pending.model_errors:
            stats.success += 1
            stats.success_us += took_us
            stats.inference_count += pending.batch_size or 1  # no batching: 1 each
            # As Triton, only successes add to the queue and compute figures.
            start_ns = pending.exec_start_ns
            if start_ns:
                stats.queue_us += (start_ns - arrival_ns) // 1000
                stats.compute_infer_us += (pending.compute_ns or now - start_ns) // 1000
            stats.compute_input_ns += pending.input_ns
            stats.compute_output_ns += pending.output_ns
        else:
            stats.failures[_failure_reason(pending, response.error)] += 1
            stats.failure_us += took_us
        if self._on_request_done is not None:
            self._on_request_done()


    def direct_requests(self, size: int, requests: int, failures: int, success_ns: int,
                        failure_ns: int, compute_ns: int, cancelled: int = 0) -> None:
        """Requests of batch size `size` a frontend process sent to the model's stubs
        itself (pbserve/frontends/direct.py), as it adds them up: each an execution of
        its own; its compute is the stub's round trip, its queue time none (it waited in
        the stub's queue, as a request queued ahead does, counted as compute)."""
        stats = self.stats
        succeeded = requests - failures
        stats.success += succeeded
        stats.success_us += success_ns // 1000
        stats.inference_count += succeeded * size
        stats.exec_count += requests
        stats.request_us += (success_ns + failure_ns) // 1000
        stats.compute_infer_us += compute_ns // 1000
        if failures:
            stats.failures[BACKEND] += failures
            stats.failure_us += failure_ns // 1000
        if cancelled:
            stats.failures[CANCELED] += cancelled
        stats.last_inference_ms = int(time.time() * 1000)
        figures = stats.batches.setdefault(size, [0, 0, 0, 0])
        figures[0] += requests
        figures[1] += compute_ns

    def stub_batches(self, sizes: tuple, requests: tuple) -> None:
        """What a stub's own batches added (stub/batcher.py BatchCounts): executions
        and their compute time by batch size; the requests' successes (their
        inferences, time from arrival in their frontend to answer, queue time in the
        stub, compute time), failures and cancellations, as `batch_done` and
        `completed` add them up."""
        stats = self.stats
        for size, executions, compute_ns in sizes:
            stats.exec_count += executions
            figures = stats.batches.setdefault(size, [0, 0, 0, 0])
            figures[0] += executions
            figures[1] += compute_ns
        successes, inferences, success_ns, queue_ns, compute_ns, failures, cancelled, \
            failure_ns = requests
        stats.success += successes
        stats.success_us += success_ns // 1000
        stats.inference_count += inferences
        stats.queue_us += queue_ns // 1000
        stats.compute_infer_us += compute_ns // 1000
        stats.request_us += (success_ns + failure_ns) // 1000
        stats.failures[BACKEND] += failures
        stats.failures[CANCELED] += cancelled
        stats.failure_us += failure_ns // 1000
        stats.last_inference_ms = int(time.time() * 1000)

    def direct_responses(self, figures: dict) -> None:
        """A decoupled model's response statistics a frontend process counted of its
        direct requests (pbserve/frontends/direct.py), as `responded` counts them."""
        self.stats.responses.merge(figures)


def _failure_reason(pending: PendingRequest, error: ServerError) -> str:
    """Triton's reason label for a request that failed."""
    if pending.cancelled or error.code == ErrorCode.CANCELLED:
        return CANCELED
    if not pending.exec_start_ns:
        return REJECTED  # never reached execute
    return BACKEND
