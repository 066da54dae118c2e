"""Flower's own round floor: a minimal plain-Flower FedAvg app on a real loopback federation.

Issue #12 asks that collabfl's DPFL round time be compared with a plain Flower app doing
the same learning work on the same machine with the same number of SuperNodes. This runs
that app (benchmarks/flower_floor/: a ClientApp training collabfl's MNIST-1D model shape
for a given number of SGD steps on generated data, a ServerApp with Flower's own FedAvg;
no collabfl code) on one ``flower-superlink`` and N ``flower-supernode`` processes with
Flower's default settings (subprocess isolation, default polling intervals).

Timing: the ServerApp prints ``time.monotonic()`` at each aggregation and at each round's
end (FedAvg's ``evaluate_fn`` hook, also called once before round 1); the clock is
system-wide, so those marks are placed against the moment this script launched the
SuperLink, not against when the streamed log happened to arrive.

    python benchmarks/flower_floor.py [--clients 4] [--rounds 4] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import queue
import subprocess
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from _common import format_table, median, write_results

from collabfl.flower.processes import flower_binary, flower_env
from collabfl.kernel.ports import PortReservation
from collabfl.kernel.supervisor import stop_group, with_parent_death_signal
from collabfl.launcher.federation import HOST

APP_DIR = Path(__file__).resolve().parent / "flower_floor"
CONNECTION = "floor"
MARKER = "FLOOR_EVENT"
"""Prefix of the ServerApp's timeline lines (benchmarks/flower_floor/floor_app/server_app.py)."""
STEADY = ("wall_s", "train_phase_s", "evaluate_phase_s", "client_compute_s", "overhead_s")
"""The per-round figures whose steady-state medians are reported."""


class Federation:
    """One SuperLink and N SuperNodes as process groups under ``work_dir``; all of them
    (with Flower's own children: SuperExec, ServerApp and ClientApp processes) are killed
    on exit, also when a wait fails."""

    def __init__(self, clients: int, work_dir: Path) -> None:
        self.clients = clients
        self.work_dir = work_dir
        self.logs = work_dir / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.env = {**os.environ, **flower_env(work_dir / "flwr"), "PYTHONUNBUFFERED": "1"}
        self.reserved = PortReservation(clients + 1)  # until exit: no one else takes them
        self.link_port, *self.node_ports = self.reserved.ports
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        self._write_connection()

    def _write_connection(self) -> None:
        """FLWR_HOME/config.toml with one insecure loopback connection for ``flwr``."""
        home = Path(self.env["FLWR_HOME"])
        home.mkdir(parents=True, exist_ok=True)
        (home / "config.toml").write_text(
            f'[superlink]\ndefault = "{CONNECTION}"\n[superlink.{CONNECTION}]\n'
            f'address = "{HOST}:{self.link_port}"\ninsecure = true\n'
        )

    def __enter__(self) -> Federation:
        return self

    def __exit__(self, *exc: object) -> None:
        """SuperNodes first, then the SuperLink (each with its whole process group)."""
        for name in sorted(self.processes, key=lambda n: n == "superlink"):
            stop_group(self.processes[name], grace_s=10.0)
        self.reserved.release()

    def spawn(self, name: str, command: list[str]) -> None:
        with (self.logs / f"{name}.log").open("wb") as log:
            self.processes[name] = subprocess.Popen(
                with_parent_death_signal(command),
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def start_superlink(self) -> None:
        self.spawn("superlink", [
            flower_binary("flower-superlink"), "--insecure",
            "--database", str((self.work_dir / "superlink.db").resolve()),
            "--disable-runtime-dependency-installation",
            "--host", HOST, "--port", str(self.link_port),
        ])  # fmt: skip

    def start_supernodes(self) -> None:
        for k, port in enumerate(self.node_ports):
            self.spawn(f"supernode-{k}", [
                flower_binary("flower-supernode"), "--insecure",
                "--superlink", f"{HOST}:{self.link_port}",
                "--host", HOST, "--port", str(port),
                "--node-config", f"partition-id={k} num-partitions={self.clients}",
            ])  # fmt: skip

    def check_alive(self) -> None:
        for name, process in self.processes.items():
            if process.poll() is not None:
                log = self.logs / f"{name}.log"
                raise RuntimeError(f"{name} exited with {process.returncode}; see {log}")

    def wait_healthy(self, deadline: float) -> None:
        """Until the SuperLink answers ``/health``."""
        url = f"http://{HOST}:{self.link_port}/health"
        while True:
            self.check_alive()
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, OSError):
                pass
            _before(deadline, "the SuperLink was not healthy")
            time.sleep(0.1)

    def wait_online(self, deadline: float) -> None:
        """Until the SuperLink lists all N SuperNodes online (``flwr run`` does not retry)."""
        command = [flower_binary("flwr"), "supernode", "list", CONNECTION, "--format", "json"]
        online = 0
        while True:
            self.check_alive()
            done = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=60)
            try:
                nodes = json.loads(done.stdout).get("nodes", [])
            except (ValueError, AttributeError):
                nodes = []
            online = sum(1 for node in nodes if node.get("status") == "online")
            if online >= self.clients:
                return
            _before(deadline, f"{online} of {self.clients} SuperNodes online")
            time.sleep(0.2)

    def run_app(self, run_config: Mapping[str, float | int], deadline: float) -> list[dict]:
        """``flwr run --stream`` until the run ends; the ServerApp's timeline events."""
        overrides = " ".join(f"{key}={value!r}" for key, value in run_config.items())
        command = [flower_binary("flwr"), "run", str(APP_DIR), CONNECTION, "--stream"]
        process = subprocess.Popen(
            [*command, "-c", overrides],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            env=self.env,
            start_new_session=True,
        )
        self.processes["flwr-run"] = process
        lines: queue.Queue[str | None] = queue.Queue()
        assert process.stdout is not None
        threading.Thread(target=_pump, args=(process.stdout, lines), daemon=True).start()
        events, seen = [], []
        with (self.logs / "flwr-run.log").open("w") as log:
            while (line := _next_line(lines, deadline)) is not None:
                log.write(line)
                seen.append(line)
                if MARKER in line:
                    events.append(json.loads(line.split(MARKER, 1)[1]))
            process.wait(timeout=max(1.0, deadline - time.monotonic()))
        if process.returncode != 0:
            tail = " | ".join(s.strip() for s in seen[-5:])
            raise RuntimeError(f"flwr run exited with {process.returncode}: {tail}")
        return events


def _pump(stream: IO[bytes], lines: queue.Queue[str | None]) -> None:
    """Copy a process's output into ``lines`` (None at its end), so reads can time out."""
    for raw in stream:
        lines.put(raw.decode(errors="replace"))
    lines.put(None)


def _next_line(lines: queue.Queue[str | None], deadline: float) -> str | None:
    try:
        return lines.get(timeout=max(0.0, deadline - time.monotonic()))
    except queue.Empty:
        raise TimeoutError("the Flower run did not finish in time") from None


def _before(deadline: float, what: str) -> None:
    if time.monotonic() > deadline:
        raise TimeoutError(f"{what} by the deadline")


def round_table(events: list[dict], rounds: int) -> list[dict[str, float]]:
    """Each round's wall time (round end to round end) split into its two Flower messages
    (train, evaluate) and the slowest node's compute in each."""
    by_kind: dict[str, dict[int, dict]] = {}
    for event in events:
        by_kind.setdefault(event["event"], {})[event["round"]] = event
    ends, trained = by_kind.get("round_end", {}), by_kind.get("trained", {})
    evaluated = by_kind.get("evaluated", {})
    if sorted(ends) != list(range(rounds + 1)) or sorted(trained) != list(range(1, rounds + 1)):
        raise RuntimeError(f"expected {rounds} rounds, the ServerApp reported {sorted(ends)}")
    table = []
    for r in range(1, rounds + 1):
        start, end, train = ends[r - 1]["t"], ends[r]["t"], trained[r]
        evaluate = evaluated.get(r, {"t": end, "slowest_eval_s": 0.0, "accuracy": float("nan")})
        compute = train["slowest_train_s"] + evaluate["slowest_eval_s"]
        table.append({
            "round": r,
            "wall_s": end - start,
            "train_phase_s": train["t"] - start,
            "evaluate_phase_s": evaluate["t"] - train["t"],
            "slowest_train_s": train["slowest_train_s"],
            "slowest_eval_s": evaluate["slowest_eval_s"],
            "client_compute_s": compute,
            "overhead_s": end - start - compute,
            "weight_change": ends[r]["change"],
            "train_replies": train["replies"],
            "train_loss": train["train_loss"],
            "accuracy": evaluate["accuracy"],
        })  # fmt: skip
    return table


def measure_flower_floor(
    clients: int,
    rounds: int,
    steps: int,
    work_dir: Path,
    *,
    samples: int = 800,
    batch_size: int = 32,
    lr: float = 0.05,
    fraction_evaluate: float = 1.0,
    timeout_s: float = 600.0,
) -> dict[str, Any]:
    """Launch the federation, run the app for ``rounds`` rounds of ``steps`` SGD steps on
    ``samples`` samples per node, and return its per-round timeline and medians.

    Steady-state medians leave out round 1 (the first ClientApp starts, warm-up). Raises
    if any wait passes ``timeout_s`` from launch; every process is stopped either way.
    """
    run_config = {
        "num-server-rounds": rounds, "min-nodes": clients, "local-steps": steps,
        "samples": samples, "batch-size": batch_size, "lr": lr,
        "fraction-evaluate": fraction_evaluate,
    }  # fmt: skip
    with Federation(clients, work_dir) as federation:
        launched = time.monotonic()
        deadline = launched + timeout_s
        federation.start_superlink()
        federation.wait_healthy(deadline)
        federation.start_supernodes()
        federation.wait_online(deadline)
        online = time.monotonic()
        events = federation.run_app(run_config, deadline)
    table = round_table(events, rounds)
    first_end = next(e["t"] for e in events if e["event"] == "round_end" and e["round"] == 1)
    strategy_start = next(e["t"] for e in events if e["event"] == "round_end" and e["round"] == 0)
    steady = table[1:] or table
    return {
        "settings": {"clients": clients, "rounds": rounds, "steps": steps} | run_config,
        "launch_to_online_s": online - launched,
        "launch_to_strategy_start_s": strategy_start - launched,
        "launch_to_first_round_s": first_end - launched,
        "rounds": table,
        "steady_median": {key: median([r[key] for r in steady]) for key in STEADY},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=20, help="local SGD steps per round")
    parser.add_argument("--samples", type=int, default=800, help="training samples per node")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds from launch")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        figures = measure_flower_floor(
            args.clients, args.rounds, args.steps, Path(tmp),
            samples=args.samples, batch_size=args.batch_size, lr=args.lr,
            timeout_s=args.timeout,
        )  # fmt: skip
    rows = [
        [r["round"], *(f"{r[k]:.2f}" for k in STEADY), f"{r['weight_change']:.3f}"]
        for r in figures["rounds"]
    ]
    print(format_table(["round", "wall", "train msg", "eval msg", "compute", "flower", "Δw"], rows))
    print(f"launch → all online: {figures['launch_to_online_s']:.1f} s")
    print(f"launch → first round done: {figures['launch_to_first_round_s']:.1f} s")
    print("steady-state median (rounds ≥ 2):", json.dumps(figures["steady_median"], indent=1))
    print(f"wrote {write_results('flower_floor', figures, vars(args))}")


if __name__ == "__main__":
    main()
