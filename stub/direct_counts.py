"""What requests sent to a stub directly add to its model's statistics, added up by
their sender (a frontend process: pbserve/frontends/direct.py; a calling stub:
stub/direct_bls.py) until it tells the core (ModelAccounting.direct_requests)."""

from __future__ import annotations


class DirectCounts:
    """Figures by (model, version, batch size): requests, failures, success ns, failure
    ns, compute ns, cancelled (requests that ended by their client's leaving, not
    counted as run: an ensemble's that a frontend runs)."""

    def __init__(self) -> None:
        self._figures: dict[tuple[str, str, int], list[int]] = {}

    def __bool__(self) -> bool:
        return bool(self._figures)

    def add(self, model: str, version: str, size: int, failed: bool, took_ns: int,
            compute_ns: int) -> None:
        """One request that took `took_ns` from arrival to answer, `compute_ns` of it
        in the model."""
        figures = self._figures.get((model, version, size))
        if figures is None:
            figures = self._figures[(model, version, size)] = [0, 0, 0, 0, 0, 0]
        figures[0] += 1
        figures[1] += failed
        figures[3 if failed else 2] += took_ns
        figures[4] += compute_ns

    def cancelled(self, model: str, version: str, size: int) -> None:
        """One request whose client left before it was answered."""
        figures = self._figures.get((model, version, size))
        if figures is None:
            figures = self._figures[(model, version, size)] = [0, 0, 0, 0, 0, 0]
        figures[5] += 1

    def take(self) -> tuple:
        """The entries added up since the last take: (model, version, batch size,
        requests, failures, success ns, failure ns, compute ns, cancelled) each."""
        entries = tuple((*key, *figures) for key, figures in self._figures.items())
        self._figures.clear()
        return entries
