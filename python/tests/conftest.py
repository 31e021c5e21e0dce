"""A real rigd for the tests: the checkout's rigd binary (RIGD, else target/debug/rigd)
serving the simulated GPU on a temporary socket with the repository's configuration."""

import os
import socket as sockets
import subprocess
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def start_rigd(path: Path) -> subprocess.Popen:
    """A rigd serving `path`, up once it accepts connections."""
    binary = os.environ.get("RIGD", str(ROOT / "target" / "debug" / "rigd"))
    if not Path(binary).exists():
        pytest.fail(f"{binary} not found: cargo build -p rigd, or set RIGD")
    proc = subprocess.Popen(
        [binary, "--config", str(ROOT / "config" / "rigd.toml"), "--socket", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            with sockets.socket(sockets.AF_UNIX) as s:
                s.connect(str(path))
            return proc
        except OSError:
            if proc.poll() is not None:
                pytest.fail(f"rigd exited: {proc.stderr.read().decode()}")
            if time.monotonic() > deadline:
                proc.kill()
                pytest.fail("rigd did not come up in 30 s")
            time.sleep(0.02)


@pytest.fixture(scope="session")
def rigd(tmp_path_factory):
    path = tmp_path_factory.mktemp("rigd") / "rigd.sock"
    proc = start_rigd(path)
    yield str(path)
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture
def device(rigd):
    import rig

    dev = rig.connect(rigd).open("0")
    yield dev
    dev.close()
