"""`collabfl admin results`: a run's results and files read from the coordinator over its
TLS service, and the paths an operator's request must not reach (issue #42, item 7)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
from support.coordinator import served, valid_request
from support.pki import TestCA
from typer.testing import CliRunner, Result

from collabfl.cli.admin import admin_app
from collabfl.cli.admin import results as admin_results
from collabfl.coordinator.service_client import CoordinatorClient, CoordinatorError
from collabfl.coordinator.store.run_files import CHUNK_BYTES
from collabfl.coordinator.store.state import CoordinatorState
from collabfl.kernel.tls import ClientTLS, ServerTLS

TABLE = "| Method | Test acc (%) |\n|:---|---:|\n| dpfl | 90.92 ± 8.13 |\n"
BIG = bytes(range(256)) * (CHUNK_BYTES // 256 * 2 + 7)  # two chunks and a bit


@dataclass
class Coordinator:
    address: str
    ca: TestCA
    flags: list[str]
    """`collabfl admin` flags that connect as the operator."""
    secret: Path
    """A file beside the runs folder that no request may read."""
    folder: Path
    """Run r1's folder."""

    def operator(self) -> CoordinatorClient:
        alice = self.ca.operator()
        return CoordinatorClient(
            self.address, 5, ClientTLS(self.ca.cert_pem, alice.cert, alice.key)
        )


@pytest.fixture
def coordinator(tmp_path: Path) -> Iterator[Coordinator]:
    """A TLS coordinator with run r1 (a results table, a graph, a large file) and run r2
    that has written nothing yet; its database and a planted secret lie outside runs/."""
    ca = TestCA()
    own = ca.coordinator()
    runs = tmp_path / "runs"
    folder = runs / "r1"
    (folder / "graphs").mkdir(parents=True)
    (folder / "results.md").write_text(TABLE)
    (folder / "graphs" / "round_0000.json").write_text("{}")
    (folder / "metrics.jsonl").write_bytes(BIG)
    secret = tmp_path / "secret.key"
    secret.write_text("do not read")
    (folder / "leak").symlink_to(secret)
    (folder / "up").symlink_to(tmp_path, target_is_directory=True)
    certs = tmp_path / "operator"
    certs.mkdir()
    cert, key = ca.operator().write(certs, "alice")
    flags = ["--ca", str(ca.write_ca(certs)), "--cert", str(cert), "--key", str(key)]
    tls = ServerTLS(own.cert, own.key, client_ca=ca.cert_pem)
    with (
        CoordinatorState(tmp_path / "coordinator.db") as state,
        served(state, tls, runs) as address,
    ):
        state.create_run("r1", "dpfl", valid_request())
        state.create_run("r2", "dpfl", valid_request(out_dir="study/two"))
        yield Coordinator(address, ca, ["--coordinator", address, *flags], secret, folder)


def _admin(coordinator: Coordinator, *args: str) -> Result:
    return CliRunner().invoke(admin_app, [*coordinator.flags, *args])


def test_results_prints_the_table_and_downloads_the_files(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    into = tmp_path / "laptop"
    result = _admin(coordinator, "results", "r1", "--download", str(into))
    assert result.exit_code == 0, result.output
    assert TABLE.strip() in result.stdout
    assert "3 files" in result.stdout and f"copied to {into}" in result.stdout
    assert (into / "results.md").read_text() == TABLE
    assert (into / "graphs" / "round_0000.json").read_text() == "{}"
    assert (into / "metrics.jsonl").read_bytes() == BIG
    assert sorted(p.name for p in into.iterdir()) == ["graphs", "metrics.jsonl", "results.md"]


def test_a_run_without_results_says_so(coordinator: Coordinator) -> None:
    result = _admin(coordinator, "results", "r2")
    assert result.exit_code == 0, result.output
    assert "run r2 has no results table yet (running, last round none)" in result.stdout
    assert "0 files" in result.stdout


def test_an_unknown_run_is_refused(coordinator: Coordinator) -> None:
    result = _admin(coordinator, "results", "nope")
    assert result.exit_code == 2
    assert "nope" in result.stderr


def _refused(call: object, code: grpc.StatusCode) -> str:
    with pytest.raises(CoordinatorError) as caught:
        call()  # type: ignore[operator]
    assert caught.value.code == code, caught.value
    return str(caught.value)


@pytest.mark.parametrize("run_id", ["../x", "..", "r1/../r1", "/etc", ""])
def test_a_run_id_that_is_a_path_is_refused(coordinator: Coordinator, run_id: str) -> None:
    with coordinator.operator() as operator:
        _refused(lambda: operator.run_results(run_id), grpc.StatusCode.INVALID_ARGUMENT)
        _refused(
            lambda: operator.read_run_file(run_id, "results.md"), grpc.StatusCode.INVALID_ARGUMENT
        )


@pytest.mark.parametrize(
    "path",
    [
        "../../secret.key",
        "graphs/../../../secret.key",
        str(Path("/etc/passwd")),
        "leak",  # a link to the secret
        "up/secret.key",  # through a linked folder
        "graphs",  # a folder
        "./results.md",
        "",
    ],
)
def test_a_file_outside_the_run_folder_is_never_read(coordinator: Coordinator, path: str) -> None:
    with coordinator.operator() as operator:
        message = _refused(
            lambda: operator.read_run_file("r1", path), grpc.StatusCode.INVALID_ARGUMENT
        )
        assert "do not read" not in message
        listed = [f.path for f in operator.run_results("r1").files]
    assert listed == ["graphs/round_0000.json", "metrics.jsonl", "results.md"]


def test_reads_are_chunked_and_bounded(coordinator: Coordinator) -> None:
    with coordinator.operator() as operator:
        first, size = operator.read_run_file("r1", "metrics.jsonl")
        tail, _ = operator.read_run_file("r1", "metrics.jsonl", size - 3)
        past, _ = operator.read_run_file("r1", "metrics.jsonl", 2**63 + 5)
    assert (len(first), size, tail, past) == (CHUNK_BYTES, len(BIG), BIG[-3:], b"")


def test_another_role_cannot_read_results(coordinator: Coordinator) -> None:
    for credential in (coordinator.ca.member(0), coordinator.ca.coordinator()):
        tls = ClientTLS(coordinator.ca.cert_pem, credential.cert, credential.key)
        with CoordinatorClient(coordinator.address, 5, tls) as caller:
            _refused(lambda: caller.run_results("r1"), grpc.StatusCode.PERMISSION_DENIED)
            _refused(
                lambda: caller.read_run_file("r1", "results.md"),
                grpc.StatusCode.PERMISSION_DENIED,
            )


def test_a_file_pruned_since_the_listing_is_skipped(
    coordinator: Coordinator, tmp_path: Path
) -> None:
    """A running run deletes old graph files (retention) while the laptop downloads."""
    into = tmp_path / "laptop"
    with coordinator.operator() as operator:
        listed = operator.run_results("r1").files
        (coordinator.folder / "graphs" / "round_0000.json").unlink()
        copied = admin_results._download(operator, "r1", listed, into)
    assert [f.path for f in copied] == ["metrics.jsonl", "results.md"]
    assert not (into / "graphs" / "round_0000.json").exists()
