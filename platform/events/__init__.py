"""Topics, publishing, fan-out, subscriptions and backfills."""
