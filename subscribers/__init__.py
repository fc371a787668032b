"""Ripple subscribers: how a fanned-out event reaches queues, webhooks and workflows."""
