"""``uvtrain deploy``: the deployment's commands, added to the ``uvtrain`` command line through
the ``uvtrain.commands`` entry point (pyproject.toml), so that the trainer never imports this
package. Nothing heavy at import: each command imports what it runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from uvtrain.cli import errors_to_exit
from uvtrain.errors import ConfigError

deploy_app = typer.Typer(
    help="Train across real devices with Flower (docs/deploy.md).", no_args_is_help=True
)


@deploy_app.command("devices")
@errors_to_exit
def deploy_devices(
    dataset: Annotated[str, typer.Option(help="A built-in dataset (see uvtrain data list).")],
    clients: Annotated[int, typer.Option(help="How many devices (its first clients).")],
    out: Annotated[Path, typer.Option(help="Folder for the device folders.")],
    seed: Annotated[int, typer.Option(help="The dataset's seed.")] = 0,
) -> None:
    """Device folders from a dataset: DEVICE/samples (training, enrollment) and DEVICE/test."""
    from .local import write_devices

    folders = write_devices(dataset, out, clients=clients, seed=seed)
    typer.echo(f"{len(folders)} device folders in {out}")


@deploy_app.command("local")
@errors_to_exit
def deploy_local(
    devices: Annotated[Path, typer.Option(help="Folder of device folders (each with samples/).")],
    method: Annotated[str, typer.Option(help="feduv, fedhide, fedaws, fedgn or fedcs.")],
    out: Annotated[Path, typer.Option(help="The server's run folder.")],
    rounds: Annotated[int, typer.Option(help="Federated rounds.")] = 5,
    fraction: Annotated[float, typer.Option(help="ε: the share of devices in a round.")] = 1.0,
    secagg: Annotated[str, typer.Option(help="auto (SecAgg+ for FedUV), on or off.")] = "auto",
    user: Annotated[str, typer.Option(help="The devices' template name.")] = "default",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Any run-config key, as KEY=VALUE (repeatable)."),
    ] = None,
    timeout: Annotated[float | None, typer.Option(help="Give up after so many seconds.")] = None,
) -> None:
    """A whole federation on this machine: a SuperLink and one SuperNode per device on
    loopback, `flwr run`, then every process stopped. Needs UVSDK_PASSPHRASE."""
    from uvtrain.config import read_toml_value

    from .local import run_local

    values: dict[str, Any] = {
        "method": method,
        "rounds": rounds,
        "fraction": fraction,
        "secagg": secagg,
    }
    for item in set_ or []:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        values[key.strip()] = read_toml_value(value)
    report = run_local(devices, out, values, echo=typer.echo, timeout=timeout, user=user)
    throughput = report["throughput"]
    typer.echo(
        f"{report['method']}: {report['rounds']} rounds on {report['deployment']['devices']} "
        f"devices, {throughput['rounds_per_s'] or 0:.3f} rounds/s; report: {out / 'report.json'}"
    )


@deploy_app.command("app")
@errors_to_exit
def deploy_app_dir() -> None:
    """Print the Flower app folder, for `flwr run "$(uvtrain deploy app)" FEDERATION`."""
    from .local import app_dir

    typer.echo(str(app_dir()))
