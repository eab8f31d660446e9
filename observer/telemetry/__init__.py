"""The daemon's own logs and metrics."""
