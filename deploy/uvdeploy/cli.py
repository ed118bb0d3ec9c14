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
    out: Annotated[Path, typer.Option(help="The server's run folder.")],
    method: Annotated[
        str | None,
        typer.Option(help="feduv, fedhide, fedaws, fedgn or fedcs (a training run's)."),
    ] = None,
    centre_bundle: Annotated[
        Path | None,
        typer.Option(
            help="No training: the devices measure their recording chain's mean voice for this "
            "bundle (calibrated with uvexport calibrate --centre) under SecAgg+ and DP."
        ),
    ] = None,
    rounds: Annotated[int, typer.Option(help="Federated rounds.")] = 5,
    fraction: Annotated[float, typer.Option(help="The share of devices in a round.")] = 1.0,
    secagg: Annotated[
        str, typer.Option(help="auto (SecAgg+ for FedUV and for --dp distributed), on or off.")
    ] = "auto",
    dp: Annotated[
        str,
        typer.Option(
            help="User-level differential privacy: auto (distributed when SecAgg+ is on, off "
            "otherwise), off, central or distributed."
        ),
    ] = "auto",
    dp_epsilon: Annotated[
        float | None, typer.Option(help="DP budget ε of the whole run [default: 8].")
    ] = None,
    dp_delta: Annotated[
        float | None, typer.Option(help="DP δ [default: min(devices^-1.1, 1e-6)].")
    ] = None,
    dp_noise_multiplier: Annotated[
        float | None, typer.Option(help="DP noise multiplier z (instead of --dp-epsilon).")
    ] = None,
    dp_period: Annotated[
        int | None,
        typer.Option(
            help="DP: each device in at most one round of each period of this many rounds (0: "
            "Poisson sampling, whose ε does not hold against the server) [default: devices / "
            "cohort]."
        ),
    ] = None,
    dp_noise: Annotated[
        str | None,
        typer.Option(
            help="DP: independent (DP-FedAvg) or tree (DP-FTRL; needs --dp central and a fixed "
            "--clip-norm) [default: independent]."
        ),
    ] = None,
    clip_norm: Annotated[
        float | None,
        typer.Option(help="DP: each device's update clipped to this L2 norm [default: 1.0]."),
    ] = None,
    adaptive_clipping: Annotated[
        bool | None,
        typer.Option(
            "--adaptive-clipping/--no-adaptive-clipping",
            help="DP: the clip norm follows a quantile of the update norms [default: off].",
        ),
    ] = None,
    clip_quantile: Annotated[
        float | None, typer.Option(help="Adaptive clipping: the quantile γ [default: 0.5].")
    ] = None,
    clip_learning_rate: Annotated[
        float | None, typer.Option(help="Adaptive clipping: the step η_C [default: 0.2].")
    ] = None,
    clip_count_std: Annotated[
        float | None,
        typer.Option(help="Adaptive clipping: noise std σ_b of the count [default: cohort/20]."),
    ] = None,
    user: Annotated[str, typer.Option(help="The devices' template name.")] = "default",
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Any run-config key, as KEY=VALUE (repeatable)."),
    ] = None,
    stall_seconds: Annotated[
        float | None,
        typer.Option(
            help="Stop the run when neither its log nor a device's log has changed for so many "
            "seconds [default: never]."
        ),
    ] = None,
    timeout: Annotated[
        float | None,
        typer.Option(help="Stop the run when it has not finished after so many seconds."),
    ] = None,
) -> None:
    """A whole federation on this machine: a SuperLink and one SuperNode per device on
    loopback, `flwr run`, then every process stopped. Needs UVSDK_PASSPHRASE. With DP (the
    default under SecAgg+) the devices clip and noise their updates (docs/deploy.md)."""
    from uvtrain.config import read_toml_value

    from .local import run_local

    if (method is None) == (centre_bundle is None):
        raise ConfigError("give --method (a training run) or --centre-bundle (a chain's mean)")
    values: dict[str, Any] = {"secagg": secagg, "dp": dp}
    if centre_bundle is not None:
        if not centre_bundle.is_file():
            raise ConfigError(f"--centre-bundle {centre_bundle}: no such file")
        from uvsdk.bundle import Bundle
        from uvsdk.errors import UvsdkError

        from .centre import input_keys

        try:  # the devices decode their files as the bundle does
            keys = input_keys(Bundle(centre_bundle))
        except UvsdkError as error:
            raise ConfigError(f"--centre-bundle: {error}") from None
        values.update(method="fedhide", centre_bundle=str(centre_bundle.resolve()), **keys)
    else:
        values.update(method=method, rounds=rounds, fraction=fraction)
    optional = {
        "dp_epsilon": dp_epsilon,
        "dp_delta": dp_delta,
        "dp_noise_multiplier": dp_noise_multiplier,
        "dp_period": dp_period,
        "dp_noise": dp_noise,
        "clip_norm": clip_norm,
        "adaptive_clipping": adaptive_clipping,
        "clip_quantile": clip_quantile,
        "clip_learning_rate": clip_learning_rate,
        "clip_count_std": clip_count_std,
    }
    values.update({key: value for key, value in optional.items() if value is not None})
    for item in set_ or []:
        key, equals, value = item.partition("=")
        if not equals or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE")
        values[key.strip()] = read_toml_value(value)
    report = run_local(
        devices,
        out,
        values,
        echo=typer.echo,
        stall_seconds=stall_seconds,
        timeout=timeout,
        user=user,
    )
    privacy = report.get("privacy")
    if report.get("task") == "centre":
        spent = "no DP" if privacy is None else f"{privacy['mechanism']} DP at ε = "
        if privacy is not None:
            spent += f"{privacy['epsilon_release']:.3g} (the server's too)"
        typer.echo(
            f"the recording chain's mean voice of {report['devices']} devices ({spent}) is in "
            f"{out / report['bundle']}; report: {out / 'report.json'}"
        )
        return
    throughput = report["throughput"]
    spent = ""
    if privacy is not None:
        spent = (
            f", {privacy['mechanism']} DP at ε = {privacy['epsilon_release']:.3g} (against the "
            f"server: {privacy['epsilon_server']:.3g})"
        )
    typer.echo(
        f"{report['method']}: {report['rounds']} rounds on {report['deployment']['devices']} "
        f"devices{spent}, {throughput['rounds_per_s'] or 0:.3f} rounds/s; report: "
        f"{out / 'report.json'}"
    )


@deploy_app.command("app")
@errors_to_exit
def deploy_app_dir() -> None:
    """Print the Flower app folder, for `flwr run "$(uvtrain deploy app)" FEDERATION`."""
    from .local import app_dir

    typer.echo(str(app_dir()))
