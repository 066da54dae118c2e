"""A failed step is never a result (issue 31).

On GPU clients DPFL's collaboration raised on every client in round 0; the run went on as
plain local training, printed a DPFL results table and exited 0. Here a step that raises on
every client ends the run ``failed`` with the sentence saying which step did not happen (and
the command exits non-zero); a step that raises on some clients leaves the run finished, but
its summary, its records and the results table name the failures.
"""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from flwr.app import Error, Message
from rich.console import Console
from test_flower_pool import ScriptedGrid, _pool, _round
from test_flower_pool import flower_task as flower_task  # autouse: Flower's task identity
from typer.testing import CliRunner

from collabfl.cli.main import app
from collabfl.client.node import ClientNode
from collabfl.client.peers import MemoryModelStore
from collabfl.engine.config import load_config
from collabfl.engine.methods import parse_method_spec
from collabfl.engine.report.run_dir import read_run
from collabfl.engine.step_failures import StepLedger, fatal
from collabfl.launcher.federation import federation_up
from collabfl.strategies.protocol import Instruction, StepFailed
from collabfl.strategies.verbs import Collaborate, Evaluate, Train, Verb
from tests.support.cli_runs import IN_THIS_PROCESS, SMALL
from tests.support.ledger import FakeLedger
from tests.support.runtime_equality import settings

pytestmark = pytest.mark.federation


def _simulate(out: Path, *extra: str) -> tuple[int, str]:
    flags = [arg for o in [*SMALL, *extra] for arg in ("--set", o)]
    result = CliRunner().invoke(app, ["simulate", *flags, *IN_THIS_PROCESS, "--out", str(out)])
    return result.exit_code, result.output


def _summary(out: Path) -> dict:
    (summary,) = json.loads((out / "summary.json").read_text())
    return summary


def test_a_collaboration_that_fails_on_every_client_fails_the_run(tmp_path, monkeypatch):
    """Peers whose models arrive where the node cannot read them (``meta``): every client's
    collaboration raises, as it did on GPU clients before the fix."""
    published = MemoryModelStore.fetch
    monkeypatch.setattr(
        MemoryModelStore, "fetch", lambda self, owner, r: published(self, owner, r).to("meta")
    )
    code, output = _simulate(tmp_path / "out")
    assert code == 1, output
    summary = _summary(tmp_path / "out")
    expected = "dpfl collaboration failed on 6/6 clients in round 0; no peer model was used"
    assert summary["status"] == "failed"
    assert summary["message"].startswith(expected)
    assert summary["rounds"] == 1 < summary["rounds_planned"]
    assert summary["step_failures"]["per_round"] == {"0": 6}
    assert summary["step_failures"]["per_client"] == {str(k): 1 for k in range(6)}
    assert expected in " ".join(output.split())
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| dpfl (failed after 1/3 rounds; 0/6 clients) |" in table
    assert f"- {expected}" in table
    failures = read_run(tmp_path / "out" / "dpfl").failures
    assert [(f["round"], f["client"], f["step"]) for f in failures] == [
        (0, k, "collaborate") for k in range(6)
    ]


def test_a_step_that_fails_on_some_clients_is_named_beside_the_result(tmp_path, monkeypatch):
    collaborate = ClientNode._collaborate

    def broken_on_client_1(self, round_index, task):
        if self.client_id == 1:
            raise ValueError("injected")
        return collaborate(self, round_index, task)

    monkeypatch.setattr(ClientNode, "_collaborate", broken_on_client_1)
    code, output = _simulate(tmp_path / "out")
    assert code == 0, output
    summary = _summary(tmp_path / "out")
    assert summary["status"] == "finished" and "message" not in summary
    failures = summary["step_failures"]
    assert failures["per_client"] == {"1": 3}
    assert failures["per_round"] == {"0": 1, "1": 1, "2": 1}
    first = failures["notes"][0]
    assert first == (
        "dpfl collaboration failed on 1/6 clients in round 0 (client 1); they used no peer "
        "model (client 1: collaborate step failed: ValueError: injected)"
    )
    table = (tmp_path / "out" / "results.md").read_text()
    assert "| dpfl (3 failed client steps; 5/6 clients) |" in table
    assert f"- {first}" in table


def test_the_ledger_counts_failures_against_the_clients_sent_the_step():
    ledger = StepLedger()
    program = [
        Instruction(4, Train(1.0)),
        Instruction(4, Collaborate("none", (), ())),
        Instruction(4, Evaluate()),
    ]
    ledger.sent({0: program, 1: program, 2: program[:1]})
    error = StepFailed(Verb.COLLABORATE, ValueError("x"))
    flower_text = f"error 0: <class 'collabfl.strategies.protocol.StepFailed'>:<'{error}'>"
    ledger.failed(4, 0, flower_text)
    ledger.failed(4, 2, "TimeoutError: the SuperNode had no message")
    taken = [f.record() for f in ledger.take()]
    assert [(f["client"], f["step"], f["clients_sent"]) for f in taken] == [
        (0, "collaborate", 2),
        (2, "step", 3),
    ]
    assert fatal("dpfl", taken[:1]) is None
    ledger.failed(4, 1, str(error))
    assert ledger.take()[0].clients_sent == 1  # a new count: round 4's sends were taken
    assert ledger.take() == []


def test_a_federation_whose_clients_cannot_open_the_run_fails(tmp_path):
    """The run asks for a CUDA device no client has: every client's round-0 message fails;
    before, such a run went on, or ended with whatever the failures left. (`federation up`
    refuses such a device before starting anything; the launcher is driven directly here,
    as a remote coordinator's run would reach clients whose devices it cannot check.)"""
    overrides = [*settings(clients=2, rounds=2), "device=cuda:63"]
    overrides.append(f"data.cache_dir={json.dumps(str(tmp_path / 'cache'))}")
    config = load_config(None, overrides)
    out = tmp_path / "real"
    console = Console(file=io.StringIO(), width=200)
    with pytest.raises(RuntimeError) as failed:
        federation_up(config, [parse_method_spec("dpfl", config)], out, console, timeout_s=300)
    said = " ".join(str(failed.value).split())
    assert "ended as failed: dpfl step failed on 2/2 clients in round 0" in said, said
    assert "device 'cuda:63'" in said
    summary = json.loads((out / "dpfl" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["clients_reported"] == "0/2"


class FailingGrid(ScriptedGrid):
    """Node 12's ClientApp fails every program with a collaboration error."""

    def push_messages(self, messages: list[Message]) -> list[str]:
        ids = super().push_messages(messages)
        error = StepFailed(Verb.COLLABORATE, ValueError("peer on cuda:0, own model on cpu"))
        for message in messages:
            if message.metadata.dst_node_id == 12:
                reason = f"{type(error).__name__}: {error}"  # as the warm executor says it
                failed = Message(Error(code=0, reason=reason), reply_to=message)
                self.replies[message.metadata.message_id] = failed
        return ids


def test_a_federated_client_error_is_a_failed_step_of_the_round():
    grid, ledger, timings = FailingGrid(), FakeLedger(), []
    pool = _pool(grid, ledger, timings)
    answered = pool.send_programs(_round(3))
    assert sorted(answered) == [0, 1]
    # One event says why client 2 has no reply: its error, not also a "no_reply".
    assert [(e.round, e.kind) for e in ledger.events if e.client_id == 2] == [(3, "client_error")]
    assert 2 in pool.silent
    (failure,) = pool.step_ledger.take()
    assert (failure.round, failure.client, failure.step, failure.clients_sent) == (
        3,
        2,
        "collaborate",
        3,
    )
    assert fatal("dpfl", [failure.record()]) is None
