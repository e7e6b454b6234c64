"""`InferenceResponse`: what a model returns or sends for one request, and what BLS gets back."""

from __future__ import annotations

from collections.abc import Sequence

from ._parameters import parameters_to_json
from .error import TritonError, TritonModelException
from .tensor import Tensor


class InferenceResponse:
    """`InferenceResponse(output_tensors=[], error=None, parameters=None)`.

    A response with an error carries no outputs to the client (the runtime drops them).
    """

    __slots__ = ("_output_tensors", "_error", "_parameters")

    def __init__(
        self,
        output_tensors: Sequence[Tensor] = (),
        error: TritonError | None = None,
        parameters: dict[str, bool | int | str] | None = None,
    ) -> None:
        # None is a TypeError, as Triton's binding says (an empty list is fine).
        if not isinstance(output_tensors, (list, tuple)):
            raise TypeError(
                f"output_tensors must be a list of Tensor, got {type(output_tensors).__name__}"
            )
        for tensor in output_tensors:
            if tensor is None:
                raise TritonModelException(
                    "Output tensor for inference response should not be empty."
                )
            if not isinstance(tensor, Tensor):
                raise TypeError(
                    f"output_tensors must be a list of Tensor, found {type(tensor).__name__}"
                )
        if error is not None and not isinstance(error, TritonError):
            raise TypeError(f"error must be a TritonError or None, got {type(error).__name__}")
        self._output_tensors = list(output_tensors)
        self._error = error
        self._parameters = parameters_to_json(parameters)

    @classmethod
    def _incoming(
        cls,
        *,
        output_tensors: list[Tensor],
        error: TritonError | None = None,
        parameters_json: str = "{}",
    ) -> InferenceResponse:
        """A response the runtime built (BLS result): no validation, parameters as JSON
        text (which, unlike a model's, may hold doubles)."""
        response = cls.__new__(cls)
        response._output_tensors = output_tensors
        response._error = error
        response._parameters = parameters_json or "{}"
        return response

    def output_tensors(self) -> list[Tensor]:
        return self._output_tensors

    def has_error(self) -> bool:
        return self._error is not None

    def error(self) -> TritonError | None:
        return self._error

    def parameters(self) -> str:
        """JSON text of the parameters (use json.loads)."""
        return self._parameters

    def __repr__(self) -> str:
        names = [t.name() for t in self._output_tensors]
        return f"InferenceResponse(outputs={names}, error={self._error!r})"


def _error_response(message: str) -> InferenceResponse:
    """A response carrying an INTERNAL error, as BLS returns transport failures."""
    return InferenceResponse._incoming(output_tensors=[], error=TritonError(message))
