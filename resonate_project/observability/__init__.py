"""What operators see: Prometheus metrics (``metrics``), OpenTelemetry traces (``tracing``) and
structured request logs (``logs``). Every edge reports through :func:`request_scope`."""
