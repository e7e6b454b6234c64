"""Cases of the python_backend repository's examples/, each run with its own client script
the way Triton's qa/L0_backend_python/examples/test.sh runs them (cwd: the checkout)."""

from __future__ import annotations

import importlib.util

from spec import Case, Client, Model

PB = "python_backend"
# The pytorch example (and the BLS examples that call it) run where torch imports.
NO_TORCH = "" if importlib.util.find_spec("torch") else "needs torch"


def example(folder: str, name: str, model: str = "model.py",
            config: str | None = "config.pbtxt") -> Model:
    return Model(f"examples/{folder}", name=name, model=model, config=config)


def script(path: str, *args: str) -> Client:
    return Client((path, *args), ".", pytest=False, checkout=PB)


ADD_SUB = example("add_sub", "add_sub")
PYTORCH = example("pytorch", "pytorch")

CASES: tuple[Case, ...] = (
    Case("ex_add_sub", PB, (ADD_SUB,), clients=(script("examples/add_sub/client.py"),)),
    Case("ex_bls_sync", PB, (ADD_SUB, PYTORCH, example("bls", "bls_sync", "sync_model.py",
                                                       "sync_config.pbtxt")),
         clients=(script("examples/bls/sync_client.py"),), skip=NO_TORCH),
    Case("ex_bls_async", PB, (ADD_SUB, PYTORCH, example("bls", "bls_async", "async_model.py",
                                                        "async_config.pbtxt")),
         clients=(script("examples/bls/async_client.py"),), skip=NO_TORCH),
    Case("ex_decoupled_repeat", PB,
         (example("decoupled", "repeat_int32", "repeat_model.py", "repeat_config.pbtxt"),),
         clients=(script("examples/decoupled/repeat_client.py"),)),
    Case("ex_decoupled_square", PB,
         (example("decoupled", "square_int32", "square_model.py", "square_config.pbtxt"),),
         clients=(script("examples/decoupled/square_client.py"),)),
    Case("ex_auto_complete", PB,
         (example("auto_complete", "nobatch_auto_complete", "nobatch_model.py", None),
          example("auto_complete", "batch_auto_complete", "batch_model.py", None)),
         clients=(script("examples/auto_complete/client.py"),)),
    Case("ex_bls_decoupled_sync", PB,
         (example("decoupled", "square_int32", "square_model.py", "square_config.pbtxt"),
          example("bls_decoupled", "bls_decoupled_sync", "sync_model.py",
                  "sync_config.pbtxt")),
         clients=(script("examples/bls_decoupled/sync_client.py"),)),
    Case("ex_bls_decoupled_async", PB,
         (example("decoupled", "square_int32", "square_model.py", "square_config.pbtxt"),
          example("bls_decoupled", "bls_decoupled_async", "async_model.py",
                  "async_config.pbtxt")),
         clients=(script("examples/bls_decoupled/async_client.py"),)),
    Case("ex_custom_metrics", PB, (example("custom_metrics", "custom_metrics"),),
         clients=(script("examples/custom_metrics/client.py"),)),
    Case("ex_pytorch", PB, (PYTORCH,), clients=(script("examples/pytorch/client.py"),),
         skip=NO_TORCH),
    Case("ex_jax", PB, (), skip="needs jax"),
    Case("ex_instance_kind", PB, (), skip="resnet50: needs torch, torchvision and a GPU"),
    Case("ex_preprocessing", PB, (), skip="needs torch/torchvision, an ONNX model and "
         "TensorRT (not run by Triton's L0 examples test either)"),
)
