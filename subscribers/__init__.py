"""Ripple subscribers: how a fanned-out event reaches queues, webhooks and workflows."""

from ripple.platform.core.limits import RateLimit
from ripple.subscribers.targets import QueueTarget, Target, WebhookTarget, WorkflowTarget

__all__ = ["QueueTarget", "RateLimit", "Target", "WebhookTarget", "WorkflowTarget"]
