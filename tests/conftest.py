"""Shared test setup."""

import os
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import torch

from collabfl.kernel.ports import PortReservation

# A config folder of the suite's own: an operator credential saved by `collabfl admin login`
# (or by a coordinator started here) must neither steer the tests' admin commands nor land in
# the real home. Daemons and commands the tests start inherit it.
os.environ["XDG_CONFIG_HOME"] = tempfile.mkdtemp(prefix="collabfl-tests-config-")

# The models under test are tiny: one thread is fastest and avoids oversubscribing a shared
# two-core machine when other processes (benchmarks, a second test run) are busy.
torch.set_num_threads(1)

SLOWEST_FIRST = (
    "test_federation_coalitions.py",
    "test_federation_restart.py",
    "test_federation_superlink_memory.py",
    "test_federation_client_faults.py",
    "test_federation_supernode_kill.py",
    "test_federation_e2e.py",
    "test_client_waits.py",
    "test_flower_floor.py",
    "test_multihost.py",
    "test_federation_foreign_app.py",
    "test_federation_short_start.py",
    "test_gpu_workload.py",
    "test_federation_user_code.py",
    "test_federation_stop.py",
    "test_warm_runtime.py",
    "test_seeds_progress_tracking.py",
    "test_simulate_e2e.py",
    "test_spo_federated.py",
    "test_compare_interrupt.py",
    "test_fleet_gateway.py",
    "test_supernode_restore.py",
    "test_spo.py",
    "test_coalition_methods.py",
    "test_coordinator_daemon.py",
    "test_cli_startup.py",
    "test_admin_json.py",
    "test_daemons.py",
    "test_admin_cli.py",
)
"""The slowest files, longest first (as measured with ``--durations``): with ``--dist
loadfile`` and ``--no-loadscope-reorder`` (pyproject.toml) the workers take files in
collection order, so starting these first keeps one of them from being the last thing a run
waits for, while the many quick files fill the gaps at the end."""


def pytest_collection_modifyitems(items):
    def rank(item) -> int:
        name = item.path.name
        return SLOWEST_FIRST.index(name) if name in SLOWEST_FIRST else len(SLOWEST_FIRST)

    items.sort(key=rank)  # stable: the order within a file and among the rest is kept


@pytest.fixture(scope="session")
def mnist1d_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An MNIST-1D cache folder each test process shares: generating the small federations'
    data costs up to 2 CPU-s a size, and only the cache's own tests need an empty folder."""
    return tmp_path_factory.mktemp("mnist1d-cache")


@pytest.fixture
def reserve_ports() -> Iterator[Callable[[int], list[int]]]:
    """``reserve_ports(n)``: n loopback ports no one else gets until the test ends, for the
    processes a test starts to bind (kernel/ports.py): a probed and closed port can be taken
    by another test's connection before the process binds it."""
    taken: list[PortReservation] = []

    def reserve(count: int) -> list[int]:
        taken.append(PortReservation(count))
        return taken[-1].ports

    yield reserve
    for reservation in taken:
        reservation.release()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A loopback port that refuses connections for the whole test: reserved, never listened
    on, so no other test's server can open it meanwhile."""
    with PortReservation(1) as reserved:
        yield reserved.ports[0]
