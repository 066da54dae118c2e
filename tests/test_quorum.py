"""A run's quorum: its default per method, and the wait below it (a fake clock; the real
federation's pause, resume and failure are in test_federation_client_faults.py)."""

from __future__ import annotations

import pytest

from collabfl.engine.config import ConfigError, load_config
from collabfl.engine.methods import parse_method_spec, read_run_request, run_request
from collabfl.engine.quorum import Quorum, QuorumLost, await_quorum, run_quorum
from collabfl.engine.run_options import RunOptions


def quorum_of(method: str, expected: int, *overrides: str) -> Quorum:
    spec = parse_method_spec(method, load_config(None, list(overrides)))
    return run_quorum(spec.name, spec.config.federation, expected)


def test_methods_that_learn_from_peers_need_two_clients_unless_told_otherwise() -> None:
    assert quorum_of("dpfl", 4).size == 2
    assert quorum_of("fedavg", 4).size == 1
    assert quorum_of("dpfl", 1).size == 1  # a one-client run asks for no more
    assert quorum_of("dpfl", 4, "federation.quorum=3", "federation.quorum_wait_s=7") == Quorum(
        3, 7.0
    )
    with pytest.raises(ConfigError, match=r"federation.quorum is 5 .* 4 clients"):
        quorum_of("dpfl", 4, "federation.quorum=5")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def test_a_paused_run_resumes_when_enough_clients_are_back() -> None:
    clock, said = Clock(), []
    online = iter([{0}, {0}, {0, 2}])
    await_quorum(
        Quorum(2, 60.0), [0, 1, 2], {0}, lambda: next(online), 5,
        lambda kind, message: said.append((kind, message)), clock, clock.sleep,
    )  # fmt: skip
    assert [kind for kind, _ in said] == ["quorum_lost", "quorum_regained"]
    assert "missing: client 1, client 2" in said[0][1] and "round 5" in said[0][1]
    assert clock.now == 3.0


def test_a_run_below_its_quorum_for_the_whole_wait_fails_naming_who_is_missing() -> None:
    clock, said = Clock(), []
    with pytest.raises(QuorumLost, match=r"fewer than 2 .* 10 s .*missing: client 1$"):
        await_quorum(
            Quorum(2, 10.0), [0, 1], {0}, lambda: {0}, 3,
            lambda kind, message: said.append(kind), clock, clock.sleep,
        )  # fmt: skip
    assert said == ["quorum_lost"] and clock.now >= 10.0


def test_a_run_at_its_quorum_goes_on_without_a_word() -> None:
    said: list[str] = []
    await_quorum(Quorum(2, 1.0), [0, 1], {0, 1}, lambda: set(), 0, lambda *e: said.append(e))
    assert not said


def test_a_run_request_whose_quorum_exceeds_its_clients_is_refused() -> None:
    spec = parse_method_spec("dpfl", load_config(None, ["federation.quorum=3"]))
    request = run_request(spec, RunOptions(expected_clients=2))
    with pytest.raises(ConfigError, match=r"federation\.quorum is 3 but the run asks for 2"):
        read_run_request("dpfl", request)
    assert read_run_request("dpfl", run_request(spec, RunOptions(expected_clients=3)))


def test_below_a_quorum_no_member_misses_the_pause_says_how_many_must_join() -> None:
    clock, said = Clock(), []
    with pytest.raises(QuorumLost, match="missing: no member; 1 more must join"):
        await_quorum(
            Quorum(3, 1.0), [0, 1], {0, 1}, lambda: {0, 1}, 0,
            lambda kind, message: said.append(message), clock, clock.sleep,
        )  # fmt: skip
