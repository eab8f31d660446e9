"""Trace fixtures captured from the real instrumentation libraries, and their tests."""
