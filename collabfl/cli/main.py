"""The `collabfl` command line: experiments on one machine.

`--help`, `--version` and the admin commands start without torch: a command imports the
experiment machinery (config, methods, runtimes) in its own body.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import click
import typer
from rich.text import Text

from collabfl.cli.admin import admin_app  # the package registers every admin command
from collabfl.engine.report.console import plain_console
from collabfl.flower.processes import CLIENT_RUNTIMES, DEFAULT_RUNTIME
from collabfl.kernel import exit_status
from collabfl.kernel.printable import shown

if TYPE_CHECKING:
    from collabfl.engine.config import ExperimentConfig
    from collabfl.engine.methods import MethodSpec

app = typer.Typer(
    help="collabfl: personalized federated learning with learned collaboration.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
)
console = plain_console()
err_console = plain_console(stderr=True)

ConfigArg = Annotated[
    Path | None,
    typer.Argument(help="TOML config (default: the built-in quickstart settings)"),
]
SetOpt = Annotated[
    list[str] | None,
    typer.Option("--set", help="override a config value: --set data.alpha=0.5 (repeatable)"),
]
OutOpt = Annotated[Path | None, typer.Option("--out", help="run directory (default: runs/...)")]
OverwriteOpt = Annotated[
    bool, typer.Option("--overwrite", help="replace the earlier run held by --out")
]
ResumeOpt = Annotated[
    bool,
    typer.Option(
        "--resume",
        help="continue the run held by --out: keep the methods (and seeds) that finished "
        "with the same settings, run the rest, then write the whole comparison",
    ),
]
LogOpt = Annotated[
    str, typer.Option("--log-level", help="DEBUG, INFO (a line per round), WARNING, ERROR")
]
SeedsOpt = Annotated[
    str | None,
    typer.Option(
        "--seeds",
        help="run once per seed, e.g. 0,1,2 (each into <out>/seed_N), and report mean ± std "
        "across the seeds that finished (default: the config's seed)",
    ),
]
TensorBoardOpt = Annotated[
    Path | None,
    typer.Option(
        "--tensorboard",
        help="also write TensorBoard event files here (tracking.tensorboard; needs the "
        "tensorboard package)",
    ),
]
METHODS_HELP = "`collabfl methods` lists the methods."


def _print_version(wanted: bool) -> None:
    if wanted:
        from collabfl import __version__

        typer.echo(f"collabfl {__version__}")
        raise typer.Exit()


@app.callback()
def options(
    version: Annotated[
        bool,
        typer.Option(
            "--version", callback=_print_version, is_eager=True, help="print the version and exit"
        ),
    ] = False,
) -> None:
    """Options that apply before any command."""


def _setup(log_level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, log_level.upper(), logging.WARNING),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )


def _output_dir(
    out: Path | None, overwrite: bool, config: ExperimentConfig, kind: str, resume: bool = False
) -> Path:
    """`--out` checked before anything is written, or a new folder under runs/."""
    from collabfl.engine.report.run_dir import claim_output_dir

    if resume and overwrite:
        raise ValueError("--resume keeps the run held by --out, --overwrite deletes it: pick one")
    if resume and out is None:
        raise ValueError("--resume needs --out, the folder of the run to continue")
    if out is not None:
        return out if resume else claim_output_dir(out, overwrite)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("runs") / f"{stamp}-{config.name}-{kind}"
    path, n = base, 1
    while path.exists():  # two runs started in the same second
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


def _check_resume(
    out_dir: Path, runs: list[tuple[int, ExperimentConfig, list[MethodSpec]]], seeds: bool
) -> None:
    """Refuse `--resume` before anything runs when --out holds another kind of run (one
    seed against several) or a run of other settings; a missing folder is run afresh."""
    from collabfl.engine.experiment import kept_runs, seed_folder
    from collabfl.engine.recording import safe_name
    from collabfl.engine.report.run_dir import OUTPUT_MARKERS, SEEDS_FILE

    if out_dir.exists() and not out_dir.is_dir():
        raise ValueError(f"--out {out_dir} is a file, not a folder")
    if not out_dir.exists() or not any(out_dir.iterdir()):
        return
    if not any((out_dir / marker).exists() for marker in OUTPUT_MARKERS):
        raise ValueError(f"--out {out_dir} is not empty and holds no collabfl run to resume")
    if (out_dir / SEEDS_FILE).exists() != seeds:
        held = "one seed: resume without --seeds" if seeds else "several seeds: give its --seeds"
        raise ValueError(f"--resume: {out_dir} holds a run of {held}")
    for seed, _, specs in runs:
        folder = out_dir / seed_folder(seed) if seeds else out_dir
        kept_runs(specs, {s.label: folder / safe_name(s.label) for s in specs})


def parse_seeds(text: str) -> list[int]:
    """`0,1,2` → [0, 1, 2]: distinct non-negative integers, at least one."""
    try:
        seeds = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise ValueError(f"--seeds {text!r} must be comma-separated integers, e.g. 0,1,2") from None
    if not seeds or min(seeds) < 0 or len(set(seeds)) != len(seeds):
        raise ValueError(f"--seeds {text!r} must name distinct non-negative integers, e.g. 0,1,2")
    return seeds


def _experiment_overrides(overrides: list[str] | None, tensorboard: Path | None) -> list[str]:
    extra = [f"tracking.tensorboard={tensorboard}"] if tensorboard is not None else []
    return [*(overrides or []), *extra]


def _run(
    config: Path | None,
    overrides: list[str],
    seeds: str | None,
    out: Path | None,
    overwrite: bool,
    resume: bool,
    kind: str | None,
    methods: Callable[[ExperimentConfig], list[str]],
) -> None:
    """Load and check everything, claim the run directory, then run a comparison (once per
    seed with `seeds`; a default run folder is named after `kind`, else the config's
    method). Ctrl-C or `kill` stops it (workers too) and says what is left."""
    from collabfl.engine.config import ConfigError, check_partition_file, load_config
    from collabfl.engine.methods import parse_method_spec

    settings = load_config(config, overrides)
    check_partition_file(settings)
    runs = []
    for seed in parse_seeds(seeds) if seeds is not None else [settings.seed]:
        seeded = load_config(config, [*overrides, f"seed={seed}"])
        specs = [parse_method_spec(name, seeded) for name in methods(seeded)]
        if not specs:
            raise ConfigError("--methods names no method")
        runs.append((seed, seeded, specs))
    # torch and the runtimes only now: a refused config is answered without their seconds
    from collabfl.engine.experiment import run_comparison, run_seeds
    from collabfl.engine.interrupts import sigterm_interrupts
    from collabfl.engine.tracking import require_tracking

    require_tracking(settings)
    out_dir = _output_dir(out, overwrite, settings, kind or settings.method, resume)
    if resume:
        _check_resume(out_dir, runs, seeds is not None)
    try:
        with sigterm_interrupts():
            if seeds is None:
                summaries = run_comparison(runs[0][1], runs[0][2], out_dir, console, resume)
            else:
                summaries = run_seeds(runs, out_dir, console, resume)
    except KeyboardInterrupt:
        covered = "methods" if seeds is None else "seeds"
        err_console.print(
            f"interrupted: {out_dir} holds the rounds done so far (unfinished runs marked "
            f"interrupted); summary.json and results.md cover the {covered} that finished. "
            "The same command with --resume runs the rest.",
            highlight=False,
            soft_wrap=True,
        )
        raise typer.Exit(code=exit_status.INTERRUPTED) from None
    failed = [s for s in summaries if s.get("status") == "failed"]
    for summary in failed:
        why = summary.get("message", "a seed's run failed; see its summary.json")
        err_console.print(f"{summary['method']} failed: {why}", highlight=False, markup=False)
    if failed:
        raise typer.Exit(code=exit_status.FAILURE)


def _error_line(error: Exception) -> Text:
    """``error: MESSAGE``, the word in bold red and the message as written."""
    return Text.assemble(("error:", "bold red"), " ", shown(str(error)))


def _fail(error: Exception) -> None:
    err_console.print(_error_line(error), highlight=False, soft_wrap=True)
    raise typer.Exit(code=exit_status.USAGE)


@app.command()
def simulate(
    config: ConfigArg = None,
    overrides: SetOpt = None,
    seeds: SeedsOpt = None,
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
    resume: ResumeOpt = False,
    tensorboard: TensorBoardOpt = None,
    log_level: LogOpt = "WARNING",
) -> None:
    """Run the config's `method` (`--set method=NAME`) in the in-process runtime."""
    _setup(log_level)
    try:
        overrides = _experiment_overrides(overrides, tensorboard)
        _run(config, overrides, seeds, out, overwrite, resume, None, lambda s: [s.method])
    except (FileNotFoundError, ValueError) as error:  # ConfigError is a ValueError
        _fail(error)


@app.command()
def compare(
    config: ConfigArg = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help="comma-separated specs, e.g. dpfl,local,fedavg or 'dpfl:budget=0.1' "
            f"(default: the config's `methods`). {METHODS_HELP}",
        ),
    ] = None,
    overrides: SetOpt = None,
    seeds: SeedsOpt = None,
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
    resume: ResumeOpt = False,
    tensorboard: TensorBoardOpt = None,
    log_level: LogOpt = "WARNING",
) -> None:
    """Run several methods on the same partition and print one results table."""
    _setup(log_level)
    try:
        overrides = _experiment_overrides(overrides, tensorboard)
        chosen = split_methods(methods) if methods else None
        _run(
            config, overrides, seeds, out, overwrite, resume, "compare",
            lambda s: chosen or s.methods,
        )  # fmt: skip
    except (FileNotFoundError, ValueError) as error:  # ConfigError is a ValueError
        _fail(error)


@app.command()
def methods() -> None:
    """List the methods `--methods` and `method` accept, one line on each."""
    from collabfl.engine.registry import REGISTRY

    names = REGISTRY.names()
    width = max(map(len, names))
    for name in names:
        line = f"{name:<{width}}  {REGISTRY.entry(name).summary}".rstrip()
        console.print(line, highlight=False, soft_wrap=True)


@app.command()
def doctor(
    coordinator: Annotated[
        str | None,
        typer.Option("--coordinator", help="the coordinator's Fleet gateway, HOST:PORT (9093)"),
    ] = None,
    service: Annotated[
        str | None,
        typer.Option("--service", help="the coordinator service, HOST:PORT (9300)"),
    ] = None,
    ca: Annotated[Path | None, typer.Option("--ca", help="the federation CA (PEM)")] = None,
    data: Annotated[
        str | None,
        typer.Option(
            "--data", help="this participant's data file, or its data.source pkg.mod:factory"
        ),
    ] = None,
    client_id: Annotated[
        int, typer.Option("--client-id", help="the client id a data.source factory is called for")
    ] = 0,
    peers: Annotated[
        list[str] | None,
        typer.Option("--peer", help="another member's peer port, HOST:PORT; repeat for each"),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="a daemon's state folder; a client's saved settings fill in what is not given",
        ),
    ] = None,
    device: Annotated[
        str | None, typer.Option("--device", help="the device a client trains on (cuda:1, ...)")
    ] = None,
    members: Annotated[
        bool,
        typer.Option(
            "--members",
            help="also every member's peer port, as your operator credential lists them (run "
            "on the coordinator: is each participant reachable from it)",
        ),
    ] = False,
) -> None:
    """Check this machine against the federation: one line per check, ✓ or ✗ with the fix
    (! passed, act soon). Exit status 1 when any check fails. Given nothing: Python, torch,
    Flower and gRPC versions, CUDA, the run folder and a state folder kept here
    ($COLLABFL_STATE_DIR, /var/lib/collabfl, /var/lib/collabfl-client)."""
    from collabfl.cli.doctor import Inputs, checks, from_state_dir, run
    from collabfl.cli.doctor_local import bare_checks

    peers = list(peers or ())
    if members:
        peers += _member_peer_addresses()
    try:
        inputs = Inputs(
            coordinator, service, ca, data, tuple(peers), state_dir, device, client_id=client_id
        )
        if state_dir is not None:
            inputs = from_state_dir(state_dir, inputs)
        found = checks(inputs) or bare_checks()  # given nothing: this machine
    except ValueError as error:
        _fail(error)
    if not run(found, lambda line: console.print(line, highlight=False, soft_wrap=True)):
        raise typer.Exit(code=exit_status.FAILURE)


def _member_peer_addresses() -> list[str]:
    """Every member's peer address, from the coordinator the saved operator credential
    names (exit 2 without one, 3 when the coordinator does not answer)."""
    from collabfl.coordinator.enrolment.operator_credential import OperatorCredential, default_path
    from collabfl.coordinator.service_client import (
        CoordinatorClient,
        CoordinatorError,
        CoordinatorUnreachable,
    )
    from collabfl.kernel.tls import ClientTLS

    path = Path(os.environ.get("COLLABFL_CREDENTIAL") or default_path())
    if not path.exists():
        _fail(ValueError(f"--members needs an operator credential ({path}): collabfl admin login"))
    saved = OperatorCredential.load(path)
    tls = ClientTLS(saved.ca, saved.cert, saved.key)
    try:
        with CoordinatorClient(saved.coordinator, 10.0, tls) as client:
            found = client.status().members
    except (CoordinatorError, CoordinatorUnreachable) as error:
        err_console.print(_error_line(error), highlight=False)
        raise typer.Exit(exit_status.FAILURE) from None
    return [m.peer_address for m in found if m.peer_address]


app.add_typer(admin_app, name="admin")

federation_app = typer.Typer(
    help="A real federation of processes on this machine.", rich_markup_mode="markdown"
)
app.add_typer(federation_app, name="federation")


@federation_app.command("up")
def federation_up_command(
    config: ConfigArg = None,
    clients: Annotated[
        int | None, typer.Option("--clients", help="number of client daemons (data.num_clients)")
    ] = None,
    methods: Annotated[
        str | None,
        typer.Option(
            "--methods",
            help=f"specs to run one after another (default: `method`). {METHODS_HELP}",
        ),
    ] = None,
    overrides: SetOpt = None,
    out: OutOpt = None,
    overwrite: OverwriteOpt = False,
    timeout: Annotated[float, typer.Option(help="seconds one run may take")] = 3600.0,
    runtime: Annotated[
        str,
        typer.Option(
            click_type=click.Choice(CLIENT_RUNTIMES),
            help="how clients run messages: a process per message, or one warm executor",
        ),
    ] = DEFAULT_RUNTIME,
    tls: Annotated[
        bool,
        typer.Option(
            "--tls/--insecure",
            help="issue a CA and role certificates into the run's federation/tls folder and "
            "run every daemon with TLS (default: insecure, loopback only)",
        ),
    ] = False,
    log_level: LogOpt = "WARNING",
) -> None:
    """Start a coordinator and N client daemons on loopback, run the experiment, tear down."""
    from collabfl.engine.config import ConfigError, check_partition_file, load_config
    from collabfl.engine.methods import parse_method_spec

    _setup(log_level)
    try:
        extra = [f"data.num_clients={clients}"] if clients is not None else []
        settings = load_config(config, [*(overrides or []), *extra])
        check_partition_file(settings)
        if settings.tracking.tensorboard is not None:
            raise ConfigError(
                "tracking.tensorboard is written by simulate and compare only; a real "
                "federation records to its run directory"
            )
        names = split_methods(methods) if methods else [settings.method]
        specs = [parse_method_spec(name, settings) for name in names]
        # torch and Flower only now: a refused config is answered without their seconds
        from collabfl.engine.experiment import resolve_device
        from collabfl.launcher.federation import federation_up

        for spec in specs:  # every daemon runs on this machine: its device must be here
            resolve_device(spec.config.device)
        out_dir = _output_dir(out, overwrite, settings, "federation")
        federation_up(
            settings, specs, out_dir, console, timeout_s=timeout, runtime=runtime, tls=tls
        )
    except (FileNotFoundError, ValueError, RuntimeError, TimeoutError, ConnectionError) as error:
        _fail(error)


@federation_app.command("prepare")
def federation_prepare_command(
    out: Annotated[Path, typer.Option("--out", help="folder for client-K.npz files")],
    config: ConfigArg = None,
    clients: Annotated[
        int | None, typer.Option("--clients", help="number of clients (data.num_clients)")
    ] = None,
    overrides: SetOpt = None,
) -> None:
    """Write one data file per client (demo data for daemons on separate machines)."""
    from collabfl.engine.config import load_config
    from collabfl.launcher.federation import write_client_files

    try:
        extra = [f"data.num_clients={clients}"] if clients is not None else []
        settings = load_config(config, [*(overrides or []), *extra])
        files = write_client_files(settings, out)
    except (FileNotFoundError, ValueError) as error:  # ConfigError is a ValueError
        _fail(error)
    console.print(f"wrote {len(files)} client data files to {out}")


def split_methods(text: str) -> list[str]:
    """Split a --methods list on commas that start a new method, not inside its options.

    `dpfl:budget=5,select_every=2,local` → ["dpfl:budget=5,select_every=2", "local"].
    """
    specs: list[str] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if "=" in part and ":" not in part and specs:
            specs[-1] += "," + part
        else:
            specs.append(part)
    return specs


def main() -> None:
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(exit_status.INTERRUPTED)
