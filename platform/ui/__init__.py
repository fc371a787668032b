"""The web dashboard: server-rendered pages under `/ui/` (see `routes`)."""
