"""The command line's commands, a module a family (observer.cli puts them together).

common   the options, settings and logging every command shares
scoring  score; judge FILE, judge agreement, judge canary
runs     run (the daemon, --once), backfill, demo
reading  check, explain, discover
ops      config show, alerts, fleet, init-langfuse
"""
