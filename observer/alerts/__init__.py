"""Alerts: rules over the signal history (pure), rule state, and notifiers (I/O)."""
