"""The `observer` command line. Thin: parse arguments, call the core, print.

Exit codes (README, "Exit codes", is the contract): 0 success; 1 `--strict` and
some input was bad, the trace `explain` was asked for is not there, or an unexpected
error; 2 bad usage, bad configuration or a bad file; 3 Langfuse (or the fleet's
Redis) unreachable; 4 Langfuse rejected the keys; 130 Ctrl-C where no graceful stop
applies.

The errors a user can act on (ConfigError, StateError, ExplainError, RemoteError ...)
are turned into `observer: <message>` on stderr and the exit code in one place, the
group every command runs under (`_Commands.invoke`); the commands let them rise.
Any other error is a bug: one line says so, and its traceback shows only under
`--debug` or log level debug. The commands themselves are in `observer.commands`, a
module a family; what they do is in `observer.app` (and `observer.app.score_file`);
what they print, in `observer.views`.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from observer.commands import ops, reading, runs, scoring
from observer.commands.common import DEBUG, EXIT_INTERRUPTED
from observer.views.console import closed_pipe_exit

# pydantic looks for plugins in the entry points of every installed distribution when it
# builds its first model: tens of milliseconds of every start in a large environment, for
# plugins observer does not use. A value set in the environment is left as it is.
os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")

EXIT_BAD_INPUT = 2  # bad configuration, state file or input file (app.EXIT_CONFIG)
EXIT_NOT_FOUND = 1  # the trace `explain` was asked for is not there
EXIT_UNEXPECTED = 1  # an error observer did not expect: a bug (--debug: its traceback)

# The errors a user can fix, by exit code: (module, class) so that none is imported
# to be caught (`observer --help` and `observer score` stay quick). The first match wins.
_USER_ERRORS = (
    ("observer.app.explain", "TraceNotFound", EXIT_NOT_FOUND),
    ("observer.app.explain", "ExplainError", EXIT_BAD_INPUT),
    ("observer.errors", "ConfigError", EXIT_BAD_INPUT),
    ("observer.state.db", "StateError", EXIT_BAD_INPUT),
    ("observer.records", "NotRecords", EXIT_BAD_INPUT),
    ("observer.errors", "UnsupportedServer", EXIT_BAD_INPUT),
    ("observer.errors", "AuthRejected", 4),  # app.EXIT_AUTH
    ("observer.errors", "RemoteError", 3),  # app.EXIT_UNREACHABLE: unreachable, 5xx, refused
)


def user_error_exit(error: BaseException) -> int | None:
    """The exit code for an error the user can fix, or None for any other error.
    A module not imported yet cannot have raised its error, so it is not imported."""
    for module, name, code in _USER_ERRORS:
        loaded = sys.modules.get(module)
        if loaded is not None and isinstance(error, getattr(loaded, name)):
            return code
    return None


class _Commands(click.Group):
    """The group every command runs under: where errors become exit codes, once."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            closed_pipe_exit()
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # click's own: usage errors (2), --help, --version
        except KeyboardInterrupt:  # where no graceful stop is set up: never click's "Aborted!"
            click.echo("observer: interrupted", err=True)
            raise SystemExit(EXIT_INTERRUPTED) from None
        except Exception as error:
            code = user_error_exit(error)
            if code is None:
                # `score` reads no [log]: its variable asks for the traceback all the same.
                asked = os.environ.get("OBSERVER_LOG__LEVEL", "").strip().lower() == "debug"
                if ctx.meta.get(DEBUG) or asked:
                    raise
                click.echo(
                    f"observer: unexpected error: {type(error).__name__}: {error}\n"
                    "  This is a bug in observer; `observer --debug ...` shows where it happened.",
                    err=True,
                )
                raise SystemExit(EXIT_UNEXPECTED) from None
            click.echo(f"observer: {error}", err=True)
            raise SystemExit(code) from None


@click.group(cls=_Commands, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="observer", prog_name="observer")  # read when asked
@click.option(
    "--debug",
    is_flag=True,
    help="Log at debug level, and show the traceback of an unexpected error.",
)
@click.pass_context
def main(ctx: click.Context, debug: bool) -> None:
    """Trust signals for RAG answers traced in Langfuse."""
    ctx.meta[DEBUG] = debug


for command in (
    scoring.score,
    scoring.judge,
    runs.run,
    runs.backfill,
    runs.demo,
    reading.check,
    reading.explain_command,
    reading.discover_command,
    ops.config,
    ops.alerts,
    ops.fleet,
    ops.init_langfuse_command,
):
    main.add_command(command)
