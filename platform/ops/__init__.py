"""Beside the work: metrics, tracing, gauges, retention, schedules."""
