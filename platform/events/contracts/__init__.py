"""Event contracts: topic schemas, their versions and compatibility rules."""
