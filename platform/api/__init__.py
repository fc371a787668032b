"""Ripple HTTP API."""
