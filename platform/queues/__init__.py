"""Durable named queues and their SQL."""
