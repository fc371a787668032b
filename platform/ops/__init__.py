"""Beside the work: metrics, tracing, gauges, retention, background services."""
