"""The installed package is what pip should have installed: a wheel tagged for the platform
its librig.so was built for, not pure Python."""

import importlib.metadata
import platform
import sysconfig


def test_the_wheel_is_tagged_for_its_platform():
    wheel = importlib.metadata.distribution("rig").read_text("WHEEL")
    assert wheel is not None, "rig was not installed from a wheel"
    assert "Root-Is-Purelib: false" in wheel, wheel
    tags = [line.split(":", 1)[1].strip() for line in wheel.splitlines() if line.startswith("Tag:")]
    want = "py3-none-" + sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert tags == [want], (tags, want, platform.machine())
