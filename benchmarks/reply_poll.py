"""What Flower's SuperNode reply poll costs a DPFL round, and what is left for a reply relay.

A Flower 1.41/1.42 SuperNode serves one message at a time and looks for its executor's reply
every 0.5 s, with no option to change it; the client daemon's SuperNode looks every 0.02 s
(collabfl/flower/quick_reply_supernode.py). This benchmark runs federation_round.py's
4-client DPFL setting (real processes, IID data, Bc = 2 peer models fetched per client and
round) with a hook in each SuperNode (benchmarks/reply_poll_hook/) that logs how long each
reply waited for the poll and looks every ``--short`` seconds in every other round, every
0.5 s as Flower alone does in the rest. Both kinds of round run in one federation under one load;
a second federation swaps which rounds poll quickly. Per round it records the wall time, the
slowest message's trip to the client and back, the SuperNode's reply wait, and the
ServerApp's time outside the messages (the round's wall time minus its slowest round trip):
the part of a round that a reply relayed around Flower could overlap with the poll, since
the SuperNode takes its next message only after it has pushed its reply.

    python benchmarks/reply_poll.py [--rounds 31] [--short 0.02]
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
from pathlib import Path
from typing import Any

from _common import exit_on_sigterm, format_table, median, write_results
from federation_round import dpfl_config, fetched, round_split, run_federation

HOOK = Path(__file__).resolve().parent / "reply_poll_hook"
SHORT_POLL = "COLLABFL_BENCH_SHORT_POLL"
WAIT_LINE = re.compile(rb"REPLY-WAIT (-?\d+) ([0-9.]+)")
FIGURES = ("wall_s", "to_client_s", "back_s", "reply_wait_max_s", "outside_messages_s")
CLIENTS = 4
FLOWER_POLL_S = 0.5


def quartiles(values: list[float]) -> list[float]:
    """The lower and upper quartile."""
    q = statistics.quantiles(values, n=4)
    return [q[0], q[2]]


def reply_waits(work: Path) -> dict[int, list[float]]:
    """Each round's reply waits, from the SuperNode logs under the federation's folder."""
    waits: dict[int, list[float]] = {}
    for log in work.rglob("*.log"):
        for round_index, seconds in WAIT_LINE.findall(log.read_bytes()):
            waits.setdefault(int(round_index), []).append(float(seconds))
    return waits


def federation(rounds: int, short_s: float, parity: int) -> dict[str, Any]:
    """One federation whose rounds with number % 2 == ``parity`` poll every ``short_s``."""
    config, overrides = dpfl_config(CLIENTS, rounds)
    load_before = os.getloadavg()
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(HOOK), os.getenv("PYTHONPATH")]))
    os.environ[SHORT_POLL] = f"{short_s}:{parity}"
    try:
        run = run_federation(config, CLIENTS, "warm", inspect=reply_waits)
    finally:
        del os.environ[SHORT_POLL]
    waits = run["inspected"]
    if not waits:
        raise SystemExit(
            "reply_poll: no SuperNode logged a reply wait; the hook's Flower internals changed "
            "(see tests/test_supernode_reply_poll.py)"
        )
    per_round = []
    for t in range(1, rounds):  # round 0 is set-up
        split = round_split(run["rows"], t)
        messages = [m for m in run["messages"] if m["round"] == t]
        per_round.append(
            {
                "round": t,
                "poll_s": short_s if t % 2 == parity else FLOWER_POLL_S,
                "wall_s": split["wall_s"],
                "overhead_s": split["overhead_s"],
                "to_client_s": max(m["to_client_s"] for m in messages),
                "back_s": max(m["to_coordinator_s"] for m in messages),
                "outside_messages_s": split["wall_s"] - max(m["round_trip_s"] for m in messages),
                "reply_wait_max_s": max(waits.get(t, [float("nan")])),
                "reply_wait_median_s": median(waits.get(t, [float("nan")])),
                "fetched_mb": fetched(run["rows"], t)["fetched_mb"],
            }
        )
    return {
        "overrides": overrides,
        "short_parity": parity,
        "load_average_before": list(load_before),
        "load_average_after": list(os.getloadavg()),
        "rounds": per_round,
    }


def paired_saving(runs: list[dict[str, Any]]) -> list[float]:
    """Per short-poll round: the mean wall time of its two neighbours (Flower's poll, same
    federation) minus its own; pairs neighbours in time, so a load that drifts over minutes
    on a shared machine cancels."""
    saved = []
    for run in runs:
        rows = run["rounds"]
        for before, this, after in zip(rows, rows[1:], rows[2:], strict=False):
            if this["poll_s"] != FLOWER_POLL_S:
                saved.append((before["wall_s"] + after["wall_s"]) / 2 - this["wall_s"])
    return saved


def main() -> None:
    exit_on_sigterm()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=31, help="rounds per federation (>= 5)")
    parser.add_argument("--short", type=float, default=0.02, help="the short poll (s)")
    args = parser.parse_args()
    if args.rounds < 5:
        parser.error("--rounds must be >= 5: round 0 is set-up, then both kinds, alternating")
    if not 0 < args.short < 0.5:
        parser.error(f"--short {args.short}: give seconds between 0 and Flower's 0.5")
    runs = [federation(args.rounds, args.short, parity) for parity in (1, 0)]
    rows = [r for run in runs for r in run["rounds"]]
    if any(r["fetched_mb"] == 0 for r in rows):
        raise SystemExit("reply_poll: a steady round fetched no peer model; not a DPFL round")
    medians = {
        label: {k: median([r[k] for r in rows if r["poll_s"] == poll]) for k in FIGURES}
        for label, poll in (("flower_poll", FLOWER_POLL_S), ("short_poll", args.short))
    }
    ratio = medians["short_poll"]["wall_s"] / medians["flower_poll"]["wall_s"]
    saved = medians["flower_poll"]["wall_s"] - medians["short_poll"]["wall_s"]
    paired = paired_saving(runs)
    table = [[label, *(f"{m[k]:.3f}" for k in FIGURES)] for label, m in medians.items()]
    print(format_table(["rounds", *FIGURES], table))
    print(f"round wall time, short / Flower's poll: {ratio:.2f} ({saved:+.3f} s saved)")
    print(
        f"saved against its neighbour rounds: median {median(paired):+.3f} s "
        f"(quartiles {quartiles(paired)[0]:+.3f}, {quartiles(paired)[1]:+.3f}; n={len(paired)})"
    )
    for run in runs:
        print("load average before, after:", run["load_average_before"], run["load_average_after"])
    figures = {
        "medians": medians,
        "wall_ratio": ratio,
        "wall_saved_s": saved,
        "paired_saved_s": {
            "median": median(paired),
            "quartiles": quartiles(paired),
            "n": len(paired),
        },
        "runs": runs,
    }
    print(f"wrote {write_results('reply_poll', figures, vars(args))}")


if __name__ == "__main__":
    main()
