"""Each C status is its own exception class: no rigd on the socket is rig.ConnectError,
rigd going away under a connection is rig.ConnectionLost, and neither is the other."""

import pytest

import rig
from rig._ffi import lib

from conftest import start_rigd


def test_every_status_raises_a_class_of_its_own():
    statuses = [getattr(lib, n) for n in dir(lib) if n.startswith("RIG_STATUS_")]
    assert len(set(statuses)) == len(statuses)
    classes = {s: rig._BY_STATUS[s] for s in statuses if s in rig._BY_STATUS}
    # OK has no class, OTHER no error answers any more; NULL is an invalid argument too.
    assert set(statuses) - set(classes) == {lib.RIG_STATUS_OK, lib.RIG_STATUS_OTHER}
    distinct = {c for s, c in classes.items() if s != lib.RIG_STATUS_NULL}
    assert len(distinct) == len(classes) - 1
    assert all(issubclass(c, rig.Error) and c is not rig.Error for c in distinct)
    assert len({rig.status_string(s) for s in statuses}) == len(statuses)
    assert rig.status_string(-1) == "not a RigStatus"


def test_no_rigd_on_the_socket_is_a_connect_error(tmp_path):
    socket = tmp_path / "rigd.sock"
    with pytest.raises(rig.ConnectError) as e:
        rig.connect(str(socket))
    assert e.value.status == lib.RIG_STATUS_CONNECT
    assert not isinstance(e.value, rig.ConnectionLost)
    # The message names the socket and the OS's reason, once.
    said = str(e.value)
    assert said.startswith(f"cannot reach rigd at {socket}: "), said
    assert said.count("No such file or directory") == 1, said


def test_rigd_going_away_is_connection_lost(tmp_path):
    socket = tmp_path / "rigd.sock"
    proc = start_rigd(socket)
    try:
        conn = rig.connect(str(socket))
        dev = conn.open("0")
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    with pytest.raises(rig.ConnectionLost) as e:
        conn.open("0")
    assert e.value.status == lib.RIG_STATUS_CONNECTION
    assert rig.status_string(e.value.status) == "the connection to rigd failed (rigd went away)"
    assert str(e.value).startswith("the connection to rigd failed: "), str(e.value)
    del dev
