"""Reading back the Flower run a launch kept (``flower_runs.flower_run_record``), in its own
form and in the reply of ``flwr run --format json`` that releases before the in-process
launch kept (sample captured from flwr 1.41): a daemon upgraded mid-run still stops the
Flower run its predecessor started."""

import pytest

from collabfl.coordinator.superlink.flower_runs import flower_run_record, recorded_flower_run

KEPT_BY_FLWR_RUN = """{
  "success": true,
  "run-id": "9719863562065456825",
  "federation-id": "@none/default",
  "fab-id": "collabfl/collabfl-federation",
  "fab-name": "collabfl-federation",
  "fab-version": "1.0.0",
  "fab-hash": "21b983f7",
  "fab-filename": "collabfl.collabfl-federation.1-0-0.21b983f7.fab"
}
"""


def test_a_record_reads_back_its_run():
    assert recorded_flower_run(flower_run_record(9719863562065456825)) == 9719863562065456825


def test_an_older_releases_flwr_reply_still_names_its_run():
    assert recorded_flower_run(KEPT_BY_FLWR_RUN) == 9719863562065456825


@pytest.mark.parametrize(
    "record",
    ["", "Successfully started run 12\n", '["run-id", "12"]', '{"success": true}',
     '{"run-id": "twelve"}', '{"run-id": 12}'],
)  # fmt: skip
def test_anything_else_is_refused_with_what_it_was(record: str):
    with pytest.raises(ValueError, match="no Flower run id in"):
        recorded_flower_run(record)
