"""The red-team suite: every hostile input and fault once found against observer, kept.

Issue 43 tried observer as an attacker would; each finding is a test here that
failed before its fix (the inputs are in `tests/redteam/inputs.py`, the CPU
bound in `tests/redteam/cpu.py`). A new finding adds its input and its test.
"""
