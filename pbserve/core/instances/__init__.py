"""One model instance and its stub process: the instance's batches and the stub's
messages (instance), their responses and the output blocks given back (outputs), what it
tells its model (events), its stub's life: launch, restart, stop (supervisor), the child
process and its queues (stub_process), how it is started (stub_launch, zygote_launcher),
its output lines (stub_stdio) and its debugger (model_debug); warmup and the model's own
readiness check (warmup, user_readiness), and a model with no instance that can run
(outage). What the instances share (stub calls, memory, latency) is in the folders
beside this one.
"""
