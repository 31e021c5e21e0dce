"""Builds rig's C ABI (the rig-capi crate) with cargo and puts librig.so and its header in
the package: `pip install ./python` from a checkout, with Rust installed.

RIG_CARGO_PROFILE picks cargo's profile (default: release; `dev` builds faster).
"""

import os
import shutil
import subprocess
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent


class BuildWithCargo(build_py):
    def run(self):
        profile = os.environ.get("RIG_CARGO_PROFILE", "release")
        subprocess.run(
            ["cargo", "build", "-p", "rig-capi", "--profile", profile],
            cwd=ROOT,
            check=True,
        )
        target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
        out = target / ("debug" if profile == "dev" else profile)
        package = HERE / "rig"
        shutil.copy2(out / "librig.so", package / "librig.so")
        shutil.copy2(ROOT / "rig-capi" / "include" / "rig_capi.h", package / "rig_capi.h")
        super().run()


setup(cmdclass={"build_py": BuildWithCargo})
