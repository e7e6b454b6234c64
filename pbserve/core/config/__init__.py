"""A model's configuration: config.pbtxt parsed and normalized as Triton does
(model_config, config_checks), where its fields come from, with their precedence
(config_sources), and the GPUs a config may place instances on (gpus).
"""
