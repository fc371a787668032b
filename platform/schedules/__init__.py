"""Schedules: the ticks that start workflow runs or publish events, kept in Postgres."""
