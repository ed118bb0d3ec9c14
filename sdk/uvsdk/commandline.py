"""What the three commands (``uvsdk``, ``uvtrain``, ``uvexport``) share about their command
lines: ``-h`` beside ``--help``, ``--version``, and usage errors as one line on stderr with exit
code 2 (no usage box). Imports click and typer only (``uvsdk --help`` stays light).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import Any

import click
import typer
from typer.core import TyperGroup

from .errors import printable

#: The exit code of a command whose reader went away (``uvsdk info | head -1``): what a shell
#: reports for a Unix tool that SIGPIPE ended (128 + 13), and, like such a tool, no message.
BROKEN_PIPE_EXIT = 141
#: ``context_settings`` of every command line: ``-h`` is ``--help`` (inherited by subcommands).
CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}


def version_line(program: str) -> str:
    """``"uvsdk 0.1.0"``: the installed distribution's version (all three commands are one
    distribution, ``uvsdk``)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        number = version("uvsdk")
    except PackageNotFoundError:  # run from a source tree that was never installed
        number = "unknown (not installed)"
    return f"{program} {number}"


def version_option(program: str) -> click.Option:
    """``--version``: print :func:`version_line` and exit 0, before anything else is parsed."""

    def show(ctx: click.Context, _: click.Parameter, value: bool) -> None:
        if value and not ctx.resilient_parsing:
            typer.echo(version_line(program))
            ctx.exit(0)

    return click.Option(
        ["--version"],
        is_flag=True,
        expose_value=False,
        is_eager=True,
        callback=show,
        help="Print the version and exit.",
    )


def reader_gone() -> int:
    """Whoever read standard output has gone: point it at the null device, so that nothing
    written later (Python flushes it at exit) fails again, say nothing, and return
    :data:`BROKEN_PIPE_EXIT`. SIGPIPE itself stays ignored: set to its default it would also end
    the process on a closed socket (the keyring's D-Bus connection)."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return BROKEN_PIPE_EXIT


class OneLineUsageGroup(TyperGroup):
    """A command group with ``--version``, and usage errors as one line on stderr and exit 2,
    like every other error (no usage box): ``PROGRAM: error: MESSAGE (see COMMAND --help)``.
    The program is the group's name (``typer.Typer(name=...)``)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.params.append(version_option(self.name or "uvsdk"))

    def main(  # type: ignore[override]
        self,
        args: Any = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        **extra: Any,
    ) -> Any:
        program = prog_name or self.name or "uvsdk"
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError:  # the command alone: its help was printed
            code = 2
        except click.UsageError as error:
            given = list(sys.argv[1:] if args is None else args)
            typer.echo(f"{program}: error: {usage_line(error, given, program)}", err=True)
            code = 2
        except click.Abort:
            typer.echo(f"{program}: error: interrupted", err=True)
            code = 130
        except click.ClickException as error:
            typer.echo(f"{program}: error: {' '.join(error.format_message().split())}", err=True)
            code = error.exit_code
        except BrokenPipeError:  # a usage line written to a reader that went away
            code = reader_gone()
        code = code if isinstance(code, int) else 0
        if standalone_mode:
            sys.exit(code)
        return code

    # Help is written while the command line is parsed (the group's, then a command's in
    # invoke), where click, or rich (SystemExit(1) raised while handling the BrokenPipeError),
    # would turn a closed pipe into exit code 1, which means "rejected" for uvsdk.
    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _closed_pipe_exits():
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _closed_pipe_exits():
            return super().invoke(ctx)


@contextlib.contextmanager
def _closed_pipe_exits() -> Any:
    """A closed standard output, however it is reported, ends in :func:`reader_gone`'s exit."""
    try:
        yield
    except BrokenPipeError:
        raise click.exceptions.Exit(reader_gone()) from None
    except SystemExit as error:
        if isinstance(error.__context__, BrokenPipeError):
            raise click.exceptions.Exit(reader_gone()) from None
        raise


def usage_line(error: click.UsageError, given: list[str], program: str) -> str:
    """A usage error as one line: click's message, a hint for a file name that looks like an
    option, and the command whose ``--help`` explains."""
    message = printable(" ".join(error.format_message().split()))
    command = error.ctx.command_path if error.ctx is not None else program
    if isinstance(error, click.NoSuchOption):
        # click names the option it failed on ('-d' of '-dash.wav'): show the word as typed
        word = next((a for a in given if a.startswith(error.option_name)), error.option_name)
        if not word.startswith("--") or "." in word:
            message += (
                f" (a file whose name starts with '-': write ./{printable(word)} or put -- "
                "before the files)"
            )
    return f"{message} (see {command} --help)"
