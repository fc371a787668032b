"""Runs from outside: the workflow client, operations, public records."""
