"""Ripple's benchmark suite (`make bench`); measures, never asserts."""
