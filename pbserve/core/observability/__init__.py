"""What the server tells about itself: Triton's metrics (metrics), what a model's work
adds to them (model_stats), a model's custom metrics (custom_metrics), the trace
extension (tracing) and the log settings and format (log_settings, log_escape).
"""
