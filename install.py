"""``pip install ARGS`` with the torch build this machine can run (the README's commands).

PyPI's torch wheel for Linux is a CUDA build that brings several GB of CUDA libraries, of no
use on a machine without an NVIDIA GPU. So on Linux without an NVIDIA driver, torch at the
version the requirements files in ARGS pin is installed first from PyTorch's CPU index; pip
then finds it satisfied and brings its dependencies. Where a driver is, and on macOS and
Windows (whose PyPI wheels are the right builds), this is plain pip. When the CPU index
cannot be reached, pip's own configuration decides (a local wheel, a mirror, or PyPI's CUDA
build), and a line says so.

    .venv/bin/python install.py -q -r requirements.txt
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from importlib import metadata
from pathlib import Path

CPU_INDEX = "https://download.pytorch.org/whl/cpu"
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")
FROM_CPU_INDEX = ["--no-deps", "--index-url", CPU_INDEX, "--retries", "0", "--timeout", "10"]
"""Only the torch wheel (its dependencies come with ARGS from pip's own index), asked once
and briefly: an index that does not answer leaves the choice to pip's own."""
TORCH_PIN = re.compile(r"torch\s*==\s*([\w.]+)")


def main(args: list[str]) -> int:
    version = torch_pin(requirement_files(args))
    if version is not None and wants_cpu_build() and not installed(version):
        pin = f"torch=={version}"
        if pip(["install", "-q", pin, *FROM_CPU_INDEX]) != 0:
            print(f"install.py: no {pin} from {CPU_INDEX}; pip's own index decides", flush=True)
    return pip(["install", *args])


def requirement_files(args: list[str]) -> list[Path]:
    """The files named by ``-r FILE``, ``-rFILE`` or ``--requirement[=]FILE`` in pip's args."""
    files = []
    for i, arg in enumerate(args):
        if arg in ("-r", "--requirement") and i + 1 < len(args):
            files.append(Path(args[i + 1]))
        elif arg.startswith("--requirement="):
            files.append(Path(arg.partition("=")[2]))
        elif arg.startswith("-r") and len(arg) > 2:
            files.append(Path(arg[2:]))
    return files


def torch_pin(files: list[Path]) -> str | None:
    """The version of a ``torch==X`` line in ``files`` (None: torch is not pinned there)."""
    for file in files:
        for line in file.read_text().splitlines():
            match = TORCH_PIN.fullmatch(line.split("#", 1)[0].strip())
            if match:
                return match[1]
    return None


def wants_cpu_build() -> bool:
    """Linux without an NVIDIA driver: the only case where PyPI's wheel is the wrong build."""
    has_driver = NVIDIA_DRIVER.exists() or shutil.which("nvidia-smi") is not None
    return sys.platform == "linux" and not has_driver


def installed(version: str) -> bool:
    """Whether this environment already holds torch ``version`` (of any build)."""
    try:
        return metadata.version("torch").split("+")[0] == version
    except metadata.PackageNotFoundError:
        return False


def pip(args: list[str]) -> int:
    return subprocess.run([sys.executable, "-m", "pip", *args], check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
