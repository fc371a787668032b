"""Webhooks: the target kind, deliveries, dispatcher, signing, SSRF guard, transport."""
