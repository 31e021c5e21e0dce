"""Builds rig's C ABI (the rig-capi crate) with cargo and puts librig.so and its header in
the package: `pip install ./python` from a checkout, with Rust installed.

RIG_CARGO_PROFILE picks cargo's profile (default: release; `dev` builds faster).

The wheel holds a native library built for this machine, so it is tagged for its platform
(`py3-none-linux_x86_64` on x86-64 Linux), not as pure Python.
"""

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

try:  # setuptools 70.1 and later
    from setuptools.command.bdist_wheel import bdist_wheel
except ImportError:
    from wheel.bdist_wheel import bdist_wheel

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


def progress_stream():
    """Where cargo's progress goes: the terminal when there is one, since pip keeps the
    build's own output to itself unless run with -v; else the build's stderr."""
    try:
        return open("/dev/tty", "w")
    except OSError:
        return None


class BuildWithCargo(build_py):
    def run(self):
        profile = os.environ.get("RIG_CARGO_PROFILE", "release")
        command = ["cargo", "build", "-p", "rig-capi", "--profile", profile]
        tty = progress_stream()
        out = tty or sys.stderr
        print(
            f"rig: building librig with {' '.join(command)} (a few minutes the first time)",
            file=out,
            flush=True,
        )
        try:
            subprocess.run(command, cwd=ROOT, check=True, stderr=tty)
        finally:
            if tty:
                tty.close()
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        built = target / ("debug" if profile == "dev" else profile)
        package = HERE / "rig"
        shutil.copy2(built / "librig.so", package / "librig.so")
        shutil.copy2(ROOT / "rig-capi" / "include" / "rig_capi.h", package / "rig_capi.h")
        super().run()


class PlatformWheel(bdist_wheel):
    """A wheel for this platform: any Python 3 (the library is loaded with cffi's ABI mode,
    so no Python ABI is tied), this machine's OS and architecture."""

    def finalize_options(self):
        super().finalize_options()
        self.root_is_pure = False

    def get_tag(self):
        _, _, platform = super().get_tag()
        return "py3", "none", platform


setup(cmdclass={"build_py": BuildWithCargo, "bdist_wheel": PlatformWheel})
