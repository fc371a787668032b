"""Ripple workflows: durable async workflows journaled in Postgres."""
