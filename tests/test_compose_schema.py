"""deploy/docker-compose.yml and its override own-loader.yml are valid Compose files:
checked against the Compose Specification's own JSON schema (vendored in tests/data, see its
README), since no docker engine runs here to read them."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
SCHEMA = ROOT / "tests" / "data" / "compose-spec.json"


@pytest.mark.parametrize("name", ["docker-compose.yml", "own-loader.yml"])
def test_the_compose_files_follow_the_compose_specification(name):
    schema = json.loads(SCHEMA.read_text())
    compose = yaml.safe_load((ROOT / "deploy" / name).read_text())
    validator = jsonschema.Draft7Validator(schema, format_checker=jsonschema.FormatChecker())
    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message}"
        for error in validator.iter_errors(compose)
    ]
    assert errors == []


def test_the_schema_catches_a_misspelt_key():
    """The check has teeth: the schema forbids keys it does not define."""
    schema = json.loads(SCHEMA.read_text())
    broken = {"services": {"coordinator": {"image": "collabfl:latest", "restrat": "always"}}}
    assert not jsonschema.Draft7Validator(schema).is_valid(broken)


def test_the_schema_checks_the_long_volume_syntax_the_clients_use():
    """Each client mounts only its own token folder (a volume's ``subpath``): the schema
    knows that key, so a misspelt one is caught rather than silently mounting the whole
    volume."""
    schema = json.loads(SCHEMA.read_text())

    def service(volume_options: dict) -> dict:
        mount = {"type": "volume", "source": "tokens", "target": "/token", "read_only": True}
        return {"services": {"c": {"image": "x", "volumes": [{**mount, "volume": volume_options}]}}}

    validator = jsonschema.Draft7Validator(schema)
    assert validator.is_valid(service({"subpath": "client-0"}))
    assert not validator.is_valid(service({"subpth": "client-0"}))
