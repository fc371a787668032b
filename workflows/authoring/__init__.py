"""What workflow code is written against: definitions, context, flow control."""
