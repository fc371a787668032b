"""Process entry points: `ripple serve`, `ripple worker` and `ripple dev` compose the API and
the worker's services here."""
