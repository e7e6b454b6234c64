"""The model repository: scanning it (repository), polling it for changes
(repository_poller), models loaded from files sent with a load request (file_override),
and the Python environment a model's stubs run in (execution_env).
"""
