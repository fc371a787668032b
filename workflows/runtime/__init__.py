"""Executing claimed runs: the engine, bodies, journal, writer, worker."""
