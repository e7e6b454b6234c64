"""What the stubs ask of the parent (CALL and NOTIFY messages), one module a concern:

- `dispatch`: `StubCalls`, the one entry: each call to its concern by its op, answered
  at once or run as a task, cancelled with the requests it serves or its stub;
- `bls`: BLS calls to the models of this process, or of others (`remote`);
- `metrics`: custom metrics (pb_utils.MetricFamily), their deletes come as NOTIFYs;
- `model_control`: pb_utils.load_model, unload_model, is_model_ready;
- `remote`: the seam for models other processes serve (the layer above sets one);
- `caller`: what a call needs of the instance whose stub made it.

Nothing here imports the instances, the models or the manager above: they are passed in,
seen as `caller.Caller`, `bls.CalledModel` and `model_control.ModelRepository`.
"""
