"""The parent's backend: models, their instances and stubs, their requests.

- `manager` (ModelManager: the InferenceCore the frontends serve; loading, unloading,
  the repository API), `model` (one loaded model version and its request path),
  `api` (the InferenceCore protocol), `types` (requests, responses, tensors),
  `shared_memory` (clients' registered regions), `pending` (a request in flight),
  `validation` (a request checked against its model's config before it is queued);
- `config/`: a model's configuration and its precedence;
- `repository/`: the model repository, its polling, file overrides, model environments;
- `scheduling/`: the default and dynamic batching scheduler, the sequence batcher;
- `instances/`: instances and their stub processes, stub calls (BLS), pool blocks,
  outages;
- `observability/`: metrics, custom metrics, tracing, log settings.
"""
