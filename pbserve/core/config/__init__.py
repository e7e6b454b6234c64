"""A model's configuration: config.pbtxt parsed and normalized as Triton does
(model_config, config_checks), and where its fields come from, with their precedence
(config_sources).
"""
