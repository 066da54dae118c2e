"""`collabfl admin results RUN`: a run's results where the operator is, not only where it ran.

A run writes its folder on the coordinator machine (results.md, summary.json, metrics,
plots); an operator on a laptop reads it through the coordinator service, which lists the
folder and reads its files a chunk at a time (coordinator/store/run_files.py keeps every request
inside the folder). `--download DIR` copies the files under DIR at the paths they have in the
run's folder, and writes nothing outside DIR whatever path the coordinator names.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Annotated

import typer

from collabfl.cli.admin import tables
from collabfl.cli.admin.connection import EXIT_REFUSED, admin_app, coordinator_client, fail
from collabfl.cli.admin.tables import AsJson, print_json
from collabfl.engine.report.table import human_bytes
from collabfl.kernel.atomic import replacing

if TYPE_CHECKING:
    from collabfl.coordinator.service_client import CoordinatorClient
    from collabfl.coordinator.store.run_files import RunFile


@admin_app.command()
def results(
    ctx: typer.Context,
    run_id: Annotated[str, typer.Argument(metavar="RUN")],
    download: Annotated[
        Path | None,
        typer.Option(
            metavar="DIR",
            file_okay=False,
            help="also copy the run's files (results, summary, metrics, plots) into DIR",
        ),
    ] = None,
    as_json: AsJson = False,
) -> None:
    """The run's results table (results.md) and the files its folder holds on the
    coordinator; `--download DIR` copies them here."""
    with coordinator_client(ctx) as client:
        run = client.get_run(run_id)
        found = client.run_results(run_id)
        if download is not None:
            found = replace(found, files=_download(client, run_id, found.files, download))
    if as_json:
        print_json(found)
        return
    if found.results_md:
        typer.echo(found.results_md.rstrip("\n"))  # markdown, as written: copy it anywhere
    else:
        last = "none" if run.last_completed_round is None else str(run.last_completed_round)
        tables.console.print(
            f"run {run_id} has no results table yet ({run.status}, last round {last})",
            highlight=False,
        )
    total = human_bytes(sum(f.size for f in found.files))
    more = " (more not listed)" if found.truncated else ""
    where = f"copied to {download}" if download is not None else "--download DIR copies them"
    tables.console.print(
        f"{len(found.files)} files{more}, {total}, in the run's folder: {where}",
        highlight=False,
        soft_wrap=True,  # a path to copy is never broken
    )


def _download(
    client: CoordinatorClient, run_id: str, files: list[RunFile], into: Path
) -> list[RunFile]:
    """Each file under ``into`` at its path in the run's folder, read a chunk at a time; the
    files copied. One deleted since it was listed (a running run prunes graphs) is skipped."""
    import grpc

    from collabfl.coordinator.service_client import CoordinatorError

    root = into.resolve()
    copied = []
    for listed in files:
        target = _target(root, listed.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            _copy(client, run_id, listed, target)
        except CoordinatorError as error:
            if error.code != grpc.StatusCode.NOT_FOUND:
                raise
            target.unlink(missing_ok=True)
            continue
        copied.append(listed)
    return copied


def _copy(client: CoordinatorClient, run_id: str, listed: RunFile, target: Path) -> None:
    """One file, in place only once whole: an interrupted download leaves no half file."""
    with replacing(target) as partial, partial.open("wb") as out:
        offset, size = 0, listed.size
        while offset < size:
            data, size = client.read_run_file(run_id, listed.path, offset)
            if not data:
                break
            out.write(data)
            offset += len(data)


def _target(root: Path, path: str) -> Path:
    """Where ``path`` (as the coordinator names it) goes under ``root``; one that would
    land elsewhere (absolute, ``..``) ends the command."""
    pure = PurePosixPath(path)
    target = (root / pure).resolve()
    if pure.is_absolute() or ".." in pure.parts or not target.is_relative_to(root):
        fail(f"the coordinator named a file outside the run's folder: {path!r}", EXIT_REFUSED)
    return target
