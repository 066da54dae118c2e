"""Regenerate the committed protobuf/gRPC modules from proto/*.proto.

Run ``python proto/generate.py`` after editing a .proto file; ``--check`` exits non-zero when
the committed modules differ from what the .proto files generate (the test suite runs it).
The sources are compiled as ``collabfl/proto/NAME.proto`` so that generated modules import
each other as ``collabfl.proto.NAME_pb2``, the installed name.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from pathlib import Path

from grpc_tools import protoc

HERE = Path(__file__).resolve().parent
SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py", "_pb2_grpc.pyi")


def plugin(name: str) -> Path:
    """A protoc plugin installed beside this Python (mypy-protobuf's, from the dev extra)."""
    path = Path(sys.executable).parent / name
    if not path.exists():
        raise SystemExit(f"{name} not found beside {sys.executable}: pip install mypy-protobuf")
    return path


def generate(into: Path) -> list[Path]:
    """Compile every .proto in this folder; return the generated files (in ``into``)."""
    package = into / "collabfl" / "proto"
    package.mkdir(parents=True)
    sources = sorted(HERE.glob("*.proto"))
    for source in sources:
        shutil.copy(source, package / source.name)
    include = Path(protoc.__file__).parent / "_proto"
    args = [
        "protoc",
        f"-I{into}",
        f"-I{include}",
        f"--python_out={into}",
        f"--grpc_python_out={into}",
        # Typed stubs of the messages and of the service classes, by mypy-protobuf.
        f"--plugin=protoc-gen-mypy={plugin('protoc-gen-mypy')}",
        f"--plugin=protoc-gen-mypy_grpc={plugin('protoc-gen-mypy_grpc')}",
        f"--mypy_out=quiet:{into}",  # no "Writing mypy to" line per file
        f"--mypy_grpc_out=quiet:{into}",
        *(f"collabfl/proto/{source.name}" for source in sources),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    return sorted(p for p in package.iterdir() if p.name.endswith(SUFFIXES))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        generated = generate(Path(tmp))
        stale = [
            p.name
            for p in generated
            if not (HERE / p.name).exists() or (HERE / p.name).read_bytes() != p.read_bytes()
        ]
        expected = {p.name for p in generated}
        extra = [
            p.name for p in HERE.iterdir() if p.name.endswith(SUFFIXES) and p.name not in expected
        ]
        if args.check:
            for name in stale + extra:
                print(f"stale: proto/{name}", file=sys.stderr)
            return 1 if stale or extra else 0
        for p in generated:
            shutil.copy(p, HERE / p.name)
        for name in extra:
            (HERE / name).unlink()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
