"""`ModelConfig`: the config a model's `auto_complete_config` may fill in.

Only additions that cannot contradict what the user wrote are accepted; anything
else is a ValueError (Triton's wording), which fails the model load.
"""

from __future__ import annotations

import json
from typing import Any

_INPUT_PROPERTIES = ("name", "data_type", "dims", "optional")
_OUTPUT_PROPERTIES = ("name", "data_type", "dims")


class ModelConfig:
    """`ModelConfig(json_text)`; `as_dict()` is the live dict the server reads back."""

    def __init__(self, model_config: str) -> None:
        self._model_config: dict[str, Any] = json.loads(model_config)

    def as_dict(self) -> dict[str, Any]:
        return self._model_config

    def _model_name(self) -> str:
        return str(self._model_config.get("name", ""))

    def set_max_batch_size(self, max_batch_size: int) -> None:
        """Raise the batch size; lowering one the config already sets is an error."""
        current = self._model_config.get("max_batch_size", 0)
        if current > max_batch_size:
            raise ValueError(
                f"configuration specified max_batch_size {current}, but in "
                f"auto-complete-config function for model '{self._model_name()}' "
                f"specified max_batch_size {max_batch_size}"
            )
        self._model_config["max_batch_size"] = max_batch_size

    def set_dynamic_batching(self) -> None:
        """Choose the dynamic batcher unless another scheduler was configured."""
        for scheduler in ("sequence_batching", "ensemble_scheduling"):
            if scheduler in self._model_config:
                raise ValueError(
                    f"Configuration specified scheduling_choice as '{scheduler}', but "
                    f"auto-complete-config function for model '{self._model_name()}' "
                    "tries to set scheduling_choice as 'dynamic_batching'"
                )
        self._model_config.setdefault("dynamic_batching", {})

    def add_input(self, input: dict[str, Any]) -> None:  # noqa: A002 - Triton's name
        """Add an input, or complete the same-named one (unset type/dims only)."""
        self._add_tensor("input", input, _INPUT_PROPERTIES)

    def add_output(self, output: dict[str, Any]) -> None:
        """Add an output, or complete the same-named one (unset type/dims only)."""
        self._add_tensor("output", output, _OUTPUT_PROPERTIES)

    def _add_tensor(self, kind: str, tensor: dict[str, Any], allowed: tuple[str, ...]) -> None:
        model = self._model_name()
        label = tensor.get("name", "")
        for key in tensor:
            if key not in allowed:
                names = ", ".join(f"'{p}'" for p in allowed[:-1]) + f" and '{allowed[-1]}'"
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model "
                    f"'{model}' contains property other than {names}."
                )
        if "name" not in tensor:
            raise ValueError(
                f"{kind} in auto-complete-config function for model '{model}' is "
                "missing 'name' property."
            )
        for key in ("data_type", "dims"):
            if key not in tensor:
                raise ValueError(
                    f"{kind} '{label}' in auto-complete-config function for model "
                    f"'{model}' is missing '{key}' property."
                )

        existing_list = self._model_config.setdefault(kind, [])
        for existing in existing_list:
            if existing.get("name") != label:
                continue
            existing_type = existing.get("data_type", "TYPE_INVALID")
            if existing_type != "TYPE_INVALID" and existing_type != tensor["data_type"]:
                raise ValueError(
                    f"unable to load model '{model}', configuration expects datatype "
                    f"{existing_type} for {kind} '{label}', model provides "
                    f"{tensor['data_type']}"
                )
            existing_dims = existing.get("dims")
            if existing_dims and existing_dims != tensor["dims"]:
                raise ValueError(
                    f"model '{model}', tensor '{label}': the model expects dims "
                    f"{tensor['dims']} but the model configuration specifies dims "
                    f"{existing_dims}"
                )
            if (
                "optional" in existing
                and "optional" in tensor
                and existing["optional"] != tensor["optional"]
            ):
                raise ValueError(
                    f"model '{model}', tensor '{label}': the model expects optional "
                    f"{tensor['optional']} but the model configuration specifies "
                    f"optional {existing['optional']}"
                )
            existing["data_type"] = tensor["data_type"]
            existing["dims"] = tensor["dims"]
            if "optional" in tensor:
                existing["optional"] = tensor["optional"]
            return
        existing_list.append(tensor)

    def set_model_transaction_policy(self, transaction_policy_dict: dict[str, Any]) -> None:
        """Set `decoupled`; changing a value the config states explicitly is an error."""
        model = self._model_name()
        for key in transaction_policy_dict:
            if key != "decoupled":
                raise ValueError(
                    "model transaction property in auto-complete-config function for "
                    f"model '{model}' contains property other than 'decoupled'."
                )
        policy = self._model_config.setdefault("model_transaction_policy", {})
        if "decoupled" in transaction_policy_dict:
            wanted = transaction_policy_dict["decoupled"]
            if "decoupled" in policy and policy["decoupled"] != wanted:
                raise ValueError(
                    "trying to change decoupled property in auto-complete-config for "
                    f"model '{model}', which is already set to '{policy['decoupled']}'."
                )
            policy["decoupled"] = wanted

    def __repr__(self) -> str:
        return f"ModelConfig({self._model_name()!r})"
