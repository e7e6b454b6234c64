"""Model instances and their stub processes: an instance's batches (instance), their
responses and the output blocks given back (outputs), its stub's life: launch, restart,
stop (supervisor), what it tells its model (events), the child process and its queues
(stub_process), calls a stub makes of the parent, BLS among them (stub_calls,
remote_calls), the parent's pool blocks (block_refs), private temp dirs (private_dir),
giving shared memory back (shm_upkeep), warmup and the model's own readiness check
(warmup, user_readiness), the GPUs (gpus), and a model with no instance that can run
(outage).
"""
