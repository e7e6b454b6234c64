"""The server's core: models, their instances and stubs, their requests.

- `manager` (ModelManager: the InferenceCore the frontends serve; loading, unloading,
  the repository API), `model` (one loaded model version and its request path),
  `loaded_model` (a model resolved for one request), `api` (the InferenceCore protocol),
  `types` (requests, responses, tensors), `pending` (a request in flight), `validation`
  (a request checked against its model's config before it is queued), `options` (what
  the core takes from the command line), `load_progress` (start-up loads, logged);
- `config/`: a model's configuration and its precedence, the GPUs;
- `repository/`: the model repository, its polling, file overrides, model environments;
- `ensemble/`: ensembles, their graph and its steps;
- `cache/`: the response cache;
- `scheduling/`: the default and dynamic batching scheduler, the sequence batcher, the
  rate limiter;
- `instances/`: one model instance and its stub process;
- `stub_calls/`: what stubs ask of the parent: BLS, custom metrics, model control;
- `memory/`: the parent's shared memory (pool blocks, gathered inputs, giving memory
  back) and clients' registered regions;
- `latency/`: polling instead of sleeping: the hop, the hint that a request is coming,
  the linger;
- `observability/`: metrics, custom metrics, tracing, log settings.
"""
