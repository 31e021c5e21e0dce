"""rig's Python package against a real rigd: kernels from source, numpy arrays in and out
(host memory without copies), typed arguments, copies and fills, waits, profiles."""

import json
import re
from pathlib import Path

import numpy as np
import pytest

import rig

VADD = """
kernel void vadd(global const float *x, global float *y, float a) {
    size_t i = get_global_id(0);
    y[i] += a * x[i];
}
"""

REDUCE = """
kernel void sums(global const float *x, global float *out, local float *part) {
    uint l = get_local_id(0);
    part[l] = x[get_global_id(0)];
    barrier(CLK_LOCAL_MEM_FENCE);
    if (l == 0) {
        float s = 0;
        for (uint i = 0; i < get_local_size(0); i++) s += part[i];
        out[get_group_id(0)] = s;
    }
}
"""


def test_a_kernel_from_source_adds_numpy_arrays(device):
    k = device.load(rig.compile(VADD, device.arch)).kernel("vadd")
    assert [(p.name, p.kind, p.offset, p.size) for p in k.params] == [
        ("x", "buffer", 0, 8), ("y", "buffer", 8, 8), ("a", "value", 16, 4)]
    x = device.array(np.arange(1024, dtype=np.float32))
    y = device.buffer_like(np.ones(1024, np.float32))
    s = rig.Submission().launch(k, [4], [256], x=("read", x), y=y, a=np.float32(2))
    device.submit(s).wait()
    np.testing.assert_array_equal(y.numpy(np.float32), 1 + 2 * np.arange(1024, dtype=np.float32))


def test_host_arrays_are_the_gpus_memory_without_copies(device):
    k = device.load(rig.compile(VADD, device.arch)).kernel("vadd")
    x = device.host_array(256, np.float32)
    y = device.host_array(256, np.float32)
    x.array[:] = np.arange(256)
    y.array[:] = 10
    before = y.array.__array_interface__["data"][0]
    device.submit(rig.Submission().launch(k, [1], [256], x, y, np.float32(3))).wait()
    # The kernel wrote the array's own bytes.
    assert y.array.__array_interface__["data"][0] == before
    np.testing.assert_array_equal(y.array, 10 + 3 * np.arange(256, dtype=np.float32))


def test_dynamic_lds_and_hip(device):
    k = device.load(rig.compile(REDUCE, device.arch)).kernel("sums")
    x = device.buffer_like(np.arange(512, dtype=np.float32))
    out = device.buffer(8, "device")
    device.submit(rig.Submission().launch(k, [2], [256], x=x, out=out, part=rig.Local(1024))).wait()
    np.testing.assert_array_equal(out.numpy(np.float32), [sum(range(256)), sum(range(256, 512))])

    hip = 'extern "C" __global__ void twice(int *y) { y[threadIdx.x] *= 2; }'
    t = device.load(rig.compile(hip, device.arch, language="hip")).kernel("twice")
    assert [p.name for p in t.params] == [None]
    y = device.buffer_like(np.arange(64, dtype=np.int32))
    device.submit(rig.Submission().launch(t, [1], [64], y)).wait()
    np.testing.assert_array_equal(y.numpy(np.int32), 2 * np.arange(64))


def test_copies_fills_waits_and_a_chrome_trace(device):
    a = device.buffer_like(np.arange(64, dtype=np.uint8))
    b = device.buffer(64)
    device.begin_profile()
    p = device.submit(rig.Submission().fill(b, 0xAB, 64))
    q = device.submit(rig.Submission().wait(p).copy(a, b, 16, dst_offset=8))
    q.wait()
    assert p.signaled() and q.value == p.value + 1
    want = np.full(64, 0xAB, np.uint8)
    want[8:24] = np.arange(16)
    np.testing.assert_array_equal(b.numpy(), want)
    prof = device.end_profile()
    values = [w[0] for w in prof.work]
    assert values == [p.value, q.value]
    assert all(end >= start for _, start, end in prof.work)
    trace = json.loads(prof.chrome_trace())
    assert trace["traceEvents"]


def test_boxes_and_parts_after_the_other_queues(device):
    twice = device.load(rig.compile(
        "kernel void twice(global uchar *y) { y[get_global_id(0)] *= 2; }", device.arch)).kernel("twice")
    src = device.buffer_like(np.arange(64, dtype=np.uint8).reshape(8, 8))
    dst = device.buffer(64, "device")
    # Part 0 (COPY:0) fills, part 1 copies a 4x4 box, part 2 (COMPUTE:0) doubles after both.
    s = (rig.Submission().fill(dst, 1, 64)
         .copy_box(src, dst, width=4, rows=4, src_pitch=8, dst_pitch=8, src_offset=2, dst_offset=9)
         .launch(twice, [1], [64], dst).after([1]))
    device.submit(s).wait()
    want = np.ones((8, 8), np.uint8)
    want[1:5, 1:5] = np.arange(64, dtype=np.uint8).reshape(8, 8)[:4, 2:6]  # byte 9: row 1, column 1
    np.testing.assert_array_equal(dst.numpy().reshape(8, 8), 2 * want)


def test_errors_carry_rigs_message(device, rigd):
    k = device.load(rig.compile(VADD, device.arch)).kernel("vadd")
    x = device.buffer(64)
    with pytest.raises(rig.ArgError, match=r"takes 4 bytes; 8 were given"):
        k.args(a=np.float64(1))
    with pytest.raises(rig.ArgError, match=r"takes a global pointer \(a buffer\), not raw bytes"):
        k.args(np.int64(0))
    with pytest.raises(rig.ArgError, match=r"no parameter named \"z\""):
        k.args(z=x)
    with pytest.raises(rig.ArgError, match=r"is not set"):
        rig.Submission().launch(k, [1], [64], x=x)
    with pytest.raises(rig.CompileError, match="undeclared identifier"):
        rig.compile("kernel void k(global int *y) { y[0] = nope; }", device.arch)
    with pytest.raises(rig.NoKernel, match="no kernel named"):
        device.load(rig.compile(VADD, device.arch)).kernel("nope")
    with pytest.raises(rig.ConnectError) as e:
        rig.connect("/nonexistent/rigd.sock")
    assert "/nonexistent/rigd.sock" in str(e.value)
    assert device.lost is None
    assert device.id > 0 and device.fileno() >= 0


SPIN = """
kernel void spin(global volatile uint *flag) { while (*flag == 0) {} }
"""


def test_a_wait_with_a_timeout_raises_timeout_and_the_work_goes_on(device):
    k = device.load(rig.compile(SPIN, device.arch)).kernel("spin")
    flag = device.host_array(1024, np.uint32)
    p = device.submit(rig.Submission().launch(k, [1], [1], flag))
    with pytest.raises(rig.Timeout, match="not reached within") as e:
        p.wait(timeout=0.05)
    assert isinstance(e.value, TimeoutError)
    assert rig.status_string(e.value.status) == "the wait's timeout passed first"
    assert not p.signaled()
    assert device.lost is None
    # The work went on: once the flag is set it ends, and a wait sees it reached.
    flag.array[0] = 1
    p.wait(timeout=30)
    assert p.signaled()
    with pytest.raises(ValueError):
        p.wait(timeout=-1)


def test_the_docs_example_runs(rigd, tmp_path, monkeypatch):
    page = (Path(__file__).resolve().parents[2] / "docs" / "kernels.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", page, re.S)
    assert len(blocks) == 1
    monkeypatch.setenv("RIG_SOCKET", rigd)
    monkeypatch.chdir(tmp_path)
    exec(compile(blocks[0], "docs/kernels.md", "exec"), {})
    trace = json.loads((tmp_path / "vadd.json").read_text())
    assert trace["traceEvents"]
