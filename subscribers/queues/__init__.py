"""The queue subscriber: its target kind, durable named queues and their SQL."""
