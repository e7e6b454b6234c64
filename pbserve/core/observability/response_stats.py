"""A decoupled model's statistics per response index (Triton's `response_stats`): the
n-th response of every request is counted under the key "n" as a success (it has
outputs), a failure (an error), an empty response (no outputs: a final flag alone) or a
cancellation (sent after the request was cancelled), with its compute_infer (the time
since the request's previous response, or its execution start) and compute_output (the
time the parent took to make the response of the stub's message), as Triton's core
counts what a backend reports. Triton's Python backend reports none: there the object
stays empty."""

from __future__ import annotations

from typing import Any

SUCCESS, FAIL, EMPTY, CANCEL = "success", "fail", "empty_response", "cancel"
_FIGURES = ("compute_infer", "compute_output", SUCCESS, FAIL, EMPTY, CANCEL)


class ResponseStats:
    """Figures by response index: name -> [count, ns]."""

    def __init__(self) -> None:
        self._by_index: dict[int, dict[str, list[int]]] = {}

    def __bool__(self) -> bool:
        return bool(self._by_index)

    def add(self, index: int, outcome: str, infer_ns: int, output_ns: int) -> None:
        """Response `index` of a request ended as `outcome` (SUCCESS, FAIL, EMPTY,
        CANCEL) after `infer_ns` in the model and `output_ns` made into a response."""
        figures = self._by_index.get(index)
        if figures is None:
            figures = self._by_index[index] = {name: [0, 0] for name in _FIGURES}
        infer = figures["compute_infer"]
        infer[0] += 1
        infer[1] += infer_ns
        if outcome in (SUCCESS, FAIL) and output_ns:
            output = figures["compute_output"]
            output[0] += 1
            output[1] += output_ns
        else:
            output_ns = 0  # an empty response or a cancellation has no output to make
        total = figures[outcome]
        total[0] += 1
        total[1] += infer_ns + output_ns

    def figures(self) -> dict[int, dict[str, list[int]]]:
        """What was counted, as plain data (a frontend process sends it to the core)."""
        return self._by_index

    def merge(self, figures: dict[int, dict[str, list[int]]]) -> None:
        """Add what another ResponseStats counted (its `figures()`)."""
        for index, theirs in figures.items():
            mine = self._by_index.get(index)
            if mine is None:
                mine = self._by_index[index] = {name: [0, 0] for name in _FIGURES}
            for name, (count, ns) in theirs.items():
                figure = mine[name]
                figure[0] += count
                figure[1] += ns

    def statistics(self) -> dict[str, Any]:
        """Triton's `response_stats` object: {"0": {"compute_infer": {"count", "ns"},
        ...}, ...}."""
        return {str(index): {name: {"count": count, "ns": ns}
                             for name, (count, ns) in figures.items()}
                for index, figures in sorted(self._by_index.items())}
