"""rig for Python: AMD GPU work through rigd, over rig's C ABI (librig) with cffi.

    import numpy as np, rig

    dev = rig.connect().open("0")
    vadd = dev.load(rig.compile(SOURCE, dev.arch)).kernel("vadd")
    x = dev.array(np.arange(1024, dtype=np.float32))     # host memory the GPU reads, no copy
    y = dev.buffer_like(np.ones(1024, np.float32))        # a Pinned buffer, written once
    dev.submit(rig.Submission().launch(vadd, [4, 1, 1], [256, 1, 1], x=x, y=y, a=np.float32(2))).wait()
    print(y.numpy(np.float32)[:4])

Errors are rig.Error with rig's message and its status code, each status a subclass of its
own: rig.ConnectError (no rigd on the socket), rig.ConnectionLost (rigd went away), rig.Lost
(a lost device), rig.ArgError (an argument that does not fit its parameter), rig.Timeout (a
wait's timeout passed first; also a TimeoutError), and so on.
"""

from __future__ import annotations

import json
from typing import Iterable, Optional, Sequence

import numpy as np

from ._ffi import ffi, lib

__all__ = [
    "Error", "ConnectError", "ConnectionLost", "ProtocolError", "LayoutError",
    "SharedMemoryError", "Refused", "Lost", "Never", "Unsupported", "OutOfMemory", "NoKernel",
    "InvalidArgument", "HostError", "ArgError", "CompileError", "Panic", "Timeout", "status_string",
    "connect", "compile", "Connection", "Device",
    "Buffer", "HostArray", "Image", "Kernel", "Local", "Param", "Submission", "Point", "Profile",
]


class Error(Exception):
    """A failed call: `status` is the C ABI's RigStatus, the message rig's (the whole
    chain of causes). Each status raises a subclass of its own."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status


class ConnectError(Error):
    """rigd could not be reached: no rigd listens on the socket, the socket is not
    permitted, or rigd refused the connection (RIG_STATUS_CONNECT)."""


class ConnectionLost(Error):
    """The connection to rigd failed after it was made: rigd went away
    (RIG_STATUS_CONNECTION)."""


class ProtocolError(Error):
    """rigd answered something this library cannot use: they are out of step
    (RIG_STATUS_PROTOCOL)."""


class LayoutError(Error):
    """rigd shared memory laid out in a way this library cannot use (RIG_STATUS_LAYOUT)."""


class SharedMemoryError(Error):
    """Memory rigd shared could not be mapped or used (RIG_STATUS_SHARED)."""


class Refused(Error):
    """rigd refused the request (RIG_STATUS_REFUSED)."""


class Lost(Error):
    """The device was lost (a fault, a hang, a reset); the message is rigd's reason."""


class Never(Error):
    """The device never runs a part of the submission (RIG_STATUS_NEVER)."""


class Unsupported(Error):
    """rigd answered that the device never does what was asked, such as Mapped memory or
    host pages on a path that maps none (RIG_STATUS_UNSUPPORTED)."""


class OutOfMemory(Error):
    """Out of device, host or quota memory (RIG_STATUS_OUT_OF_MEMORY)."""


class NoKernel(Error):
    """The image has no kernel of that name (RIG_STATUS_NO_KERNEL)."""


class InvalidArgument(Error):
    """An argument is outside what the call accepts (RIG_STATUS_INVALID, RIG_STATUS_NULL)."""


class HostError(Error):
    """A host system call failed (RIG_STATUS_IO)."""


class ArgError(Error):
    """A kernel argument does not fit its parameter (kind, size, name, position, unset)."""


class CompileError(Error):
    """A kernel source did not build: clang's diagnostics, or what to install."""


class Panic(Error):
    """rig panicked: a bug of rig's, with its message (RIG_STATUS_PANIC)."""


class Timeout(Error, TimeoutError):
    """A wait's timeout passed before its point was reached; the work goes on
    (RIG_STATUS_TIMEOUT)."""


_BY_STATUS = {
    lib.RIG_STATUS_CONNECT: ConnectError,
    lib.RIG_STATUS_CONNECTION: ConnectionLost,
    lib.RIG_STATUS_PROTOCOL: ProtocolError,
    lib.RIG_STATUS_LAYOUT: LayoutError,
    lib.RIG_STATUS_SHARED: SharedMemoryError,
    lib.RIG_STATUS_REFUSED: Refused,
    lib.RIG_STATUS_LOST: Lost,
    lib.RIG_STATUS_NEVER: Never,
    lib.RIG_STATUS_UNSUPPORTED: Unsupported,
    lib.RIG_STATUS_OUT_OF_MEMORY: OutOfMemory,
    lib.RIG_STATUS_NO_KERNEL: NoKernel,
    lib.RIG_STATUS_INVALID: InvalidArgument,
    lib.RIG_STATUS_NULL: InvalidArgument,
    lib.RIG_STATUS_IO: HostError,
    lib.RIG_STATUS_ARG: ArgError,
    lib.RIG_STATUS_COMPILE: CompileError,
    lib.RIG_STATUS_PANIC: Panic,
    lib.RIG_STATUS_TIMEOUT: Timeout,
}


def status_string(status: int) -> str:
    """What a RigStatus means, in a few words (the C ABI's rig_status_string)."""
    return ffi.string(lib.rig_status_string(status)).decode()


def _check(status: int) -> None:
    if status != lib.RIG_STATUS_OK:
        message = ffi.string(lib.rig_last_error()).decode("utf-8", "replace")
        raise _BY_STATUS.get(status, Error)(status, message)


def _out(ctype: str):
    return ffi.new(ctype + " *")


_MEMORY = {"device": lib.RIG_MEMORY_DEVICE, "pinned": lib.RIG_MEMORY_PINNED, "mapped": lib.RIG_MEMORY_MAPPED}
_LANGUAGE = {"opencl": lib.RIG_LANGUAGE_OPENCL, "hip": lib.RIG_LANGUAGE_HIP}


def compile(source: str, processor: str, language: str = "opencl") -> bytes:
    """Builds an OpenCL C (or, with language="hip", HIP) source for `processor` (such as
    Device.arch) with clang and lld, rig's prelude included: a code object for Device.load."""
    out = _out("RigCode *")
    _check(lib.rig_compile(_LANGUAGE[language], source.encode(), processor.encode(), out))
    code = ffi.gc(out[0], lib.rig_code_free)
    return bytes(ffi.buffer(lib.rig_code_data(code), lib.rig_code_len(code)))


def connect(socket: Optional[str] = None) -> "Connection":
    """Connects to rigd at `socket` (default: RIG_SOCKET, else /run/rig/rigd.sock)."""
    out = _out("RigConnection *")
    _check(lib.rig_connect(socket.encode() if socket else ffi.NULL, out))
    return Connection(ffi.gc(out[0], lib.rig_connection_free))


class Connection:
    """A connection to rigd."""

    def __init__(self, handle):
        self._h = handle

    def open(self, name: str = "0") -> "Device":
        """Opens the GPU `name` (such as "AMD:0" or "0")."""
        out = _out("RigDevice *")
        _check(lib.rig_open(self._h, name.encode(), out))
        return Device(ffi.gc(out[0], lib.rig_device_free), self)


class Device:
    """An open device. Closed by close(), or once it and its buffers, images and points are
    garbage (at once, without waiting)."""

    def __init__(self, handle, rig: Connection):
        self._h = handle
        self._rig = rig

    @property
    def id(self) -> int:
        """rigd's id of the device, as `rigctl devices` lists it."""
        return lib.rig_device_id(self._h)

    @property
    def name(self) -> str:
        return ffi.string(lib.rig_device_name(self._h)).decode()

    @property
    def arch(self) -> str:
        """The GPU's processor, such as "gfx1100"."""
        return ffi.string(lib.rig_device_arch(self._h)).decode()

    def fileno(self) -> int:
        """The interrupt eventfd, for selectors and event loops (readable when work may have
        completed; owned by the device)."""
        return lib.rig_device_eventfd(self._h)

    @property
    def lost(self) -> Optional[Lost]:
        """The loss (a Lost with rigd's reason), or None while the device works."""
        try:
            _check(lib.rig_device_lost(self._h))
        except Lost as e:
            return e
        return None

    def buffer(self, nbytes: int, memory: str = "pinned") -> "Buffer":
        """A buffer of `nbytes` bytes of "device", "pinned" or "mapped" memory."""
        out = _out("RigBuffer *")
        _check(lib.rig_buffer_create(self._h, nbytes, _MEMORY[memory], out))
        return Buffer(ffi.gc(out[0], lib.rig_buffer_free), self)

    def buffer_like(self, a: np.ndarray, memory: str = "pinned") -> "Buffer":
        """A buffer holding a copy of array `a`'s bytes."""
        b = self.buffer(max(a.nbytes, 1), memory)
        b.write(a)
        return b

    def host_array(self, shape, dtype=np.float32) -> "HostArray":
        """A zeroed numpy array in host memory that the GPU addresses: kernels read and write
        the array's own bytes, with no copy. Wait for the point of work that writes it
        before reading it."""
        dtype = np.dtype(dtype)
        nbytes = max(int(np.prod(shape)) * dtype.itemsize, 1)
        out, host = _out("RigBuffer *"), _out("uint8_t *")
        _check(lib.rig_host_buffer(self._h, nbytes, out, host))
        buf = Buffer(ffi.gc(out[0], lib.rig_buffer_free), self)
        view = np.frombuffer(ffi.buffer(host[0], nbytes), dtype=dtype, count=int(np.prod(shape)))
        return HostArray(buf, view.reshape(shape))

    def array(self, a: np.ndarray) -> "HostArray":
        """A host array (host_array) holding a copy of `a`."""
        h = self.host_array(a.shape, a.dtype)
        h.array[...] = a
        return h

    def load(self, code: bytes) -> "Image":
        """Loads a code object (from rig.compile, or a file's bytes)."""
        out = _out("RigImage *")
        _check(lib.rig_image_load(self._h, code, len(code), out))
        return Image(ffi.gc(out[0], lib.rig_image_free), self)

    def submit(self, s: "Submission") -> "Point":
        """Submits `s` as the device's next value."""
        out = _out("RigPoint *")
        _check(lib.rig_submit(self._h, s._h, out))
        return Point(ffi.gc(out[0], lib.rig_point_free), self)

    def begin_profile(self) -> None:
        _check(lib.rig_profile_begin(self._h))

    def end_profile(self) -> "Profile":
        out = _out("RigProfile *")
        _check(lib.rig_profile_end(self._h, out))
        return Profile(ffi.gc(out[0], lib.rig_profile_free))

    def close(self) -> None:
        """Waits for the submitted work, then closes the device."""
        raw = ffi.cast("RigDevice *", self._h)
        ffi.gc(self._h, None)  # the close frees the handle
        self._h = None
        _check(lib.rig_device_close(raw))


class Buffer:
    """Memory of a device."""

    def __init__(self, handle, device: Device):
        self._h = handle
        self._device = device

    def __len__(self) -> int:
        return lib.rig_buffer_len(self._h)

    @property
    def address(self) -> int:
        return lib.rig_buffer_address(self._h)

    def write(self, a, offset: int = 0) -> None:
        """Writes array (or bytes) `a` at `offset`, after every submitted use of the buffer."""
        data = np.ascontiguousarray(a)
        _check(lib.rig_buffer_write(self._h, offset, ffi.from_buffer("uint8_t[]", data), data.nbytes))

    def read_into(self, out: np.ndarray, offset: int = 0) -> np.ndarray:
        """Reads into contiguous array `out`, after the last submitted write of the buffer."""
        if not out.flags.c_contiguous:
            raise ValueError("read_into needs a contiguous array")
        _check(lib.rig_buffer_read(self._h, offset, ffi.from_buffer("uint8_t[]", out, require_writable=True), out.nbytes))
        return out

    def numpy(self, dtype=np.uint8, count: int = -1, offset: int = 0) -> np.ndarray:
        """The buffer's bytes from `offset` as a new array of `dtype`."""
        dtype = np.dtype(dtype)
        if count < 0:
            count = (len(self) - offset) // dtype.itemsize
        return self.read_into(np.empty(count, dtype), offset)


class HostArray:
    """A numpy array (`.array`) in host memory, and the buffer (`.buffer`) the GPU reaches it
    through. Pass either to a launch."""

    def __init__(self, buffer: Buffer, array: np.ndarray):
        self.buffer = buffer
        self.array = array

    def __array__(self, dtype=None, copy=None):
        return self.array if dtype is None else self.array.astype(dtype)


class Param:
    """A kernel parameter: name (None for HIP), kind ("buffer", "value", "local", "other"),
    offset and size in bytes."""

    KINDS = {lib.RIG_PARAM_KIND_BUFFER: "buffer", lib.RIG_PARAM_KIND_VALUE: "value",
             lib.RIG_PARAM_KIND_LOCAL: "local", lib.RIG_PARAM_KIND_OTHER: "other"}

    def __init__(self, p):
        self.name = ffi.string(p.name).decode() if p.name != ffi.NULL else None
        self.kind = self.KINDS[p.kind]
        self.offset = p.offset
        self.size = p.size

    def __repr__(self):
        return f"Param({self.name!r}, {self.kind}, offset={self.offset}, size={self.size})"


class Image:
    """A code object loaded on a device."""

    def __init__(self, handle, device: Device):
        self._h = handle
        self._device = device

    def prepare(self, names: Iterable[str]) -> None:
        """Starts making these kernels without waiting."""
        keep = [ffi.new("char[]", n.encode()) for n in names]
        _check(lib.rig_image_prepare(self._h, ffi.new("char *[]", keep), len(keep)))

    def kernel(self, name: str) -> "Kernel":
        out = _out("RigKernel *")
        _check(lib.rig_kernel_resolve(self._h, name.encode(), out))
        return Kernel(ffi.gc(out[0], lib.rig_kernel_free), name, self)


class Kernel:
    """A kernel, ready to launch; `params` from its code object's metadata."""

    def __init__(self, handle, name: str, image: Image):
        self._h = handle
        self.name = name
        self._image = image
        self.params = []
        for i in range(lib.rig_kernel_param_count(handle)):
            p = _out("RigParam")
            _check(lib.rig_kernel_param(handle, i, p))
            self.params.append(Param(p[0]))

    @property
    def static_lds(self) -> int:
        return lib.rig_kernel_static_lds(self._h)

    def args(self, *positional, **named) -> "_Args":
        """Arguments by position then by name: a Buffer or HostArray for a buffer (a
        ("read", buffer) pair for one the kernel only reads), a numpy scalar or array of the
        parameter's size for a value, rig.Local(bytes) for a local pointer."""
        a = _Args(self)
        for i, v in enumerate(positional):
            a.set(ffi.NULL, i, v)
        for n, v in named.items():
            a.set(n.encode(), 0, v)
        return a


class Local:
    """Dynamic LDS for a `local` pointer parameter: `bytes` bytes."""

    def __init__(self, nbytes: int):
        self.nbytes = nbytes


class _Args:
    def __init__(self, kernel: Kernel):
        out = _out("RigArgs *")
        _check(lib.rig_args_new(kernel._h, out))
        self._h = ffi.gc(out[0], lib.rig_args_free)
        self._keep = []

    def set(self, name, index: int, v) -> None:
        read_only = False
        if isinstance(v, tuple) and len(v) == 2 and v[0] == "read":
            read_only, v = True, v[1]
        if isinstance(v, HostArray):
            v = v.buffer
        if isinstance(v, Buffer):
            self._keep.append(v)
            _check(lib.rig_args_buffer(self._h, name, index, v._h, 0, read_only))
        elif isinstance(v, Local):
            _check(lib.rig_args_local(self._h, name, index, v.nbytes))
        else:
            data = np.ascontiguousarray(v)
            _check(lib.rig_args_value(self._h, name, index, ffi.from_buffer("uint8_t[]", data), data.nbytes))


class Submission:
    """Work to submit, built by chaining: launch, copy, fill, wait."""

    def __init__(self):
        self._h = ffi.gc(lib.rig_submission_new(), lib.rig_submission_free)
        self._keep = []

    def launch(self, kernel: Kernel, groups: Sequence[int], threads: Sequence[int], *args, **kwargs) -> "Submission":
        """A launch of `kernel`: `groups` groups of `threads` work-items along x, y, z
        (shorter lists are padded with 1), with arguments as Kernel.args takes them."""
        a = args[0] if len(args) == 1 and isinstance(args[0], _Args) and not kwargs else kernel.args(*args, **kwargs)
        g = ffi.new("uint32_t[3]", (list(groups) + [1, 1, 1])[:3])
        t = ffi.new("uint32_t[3]", (list(threads) + [1, 1, 1])[:3])
        _check(lib.rig_submission_launch(self._h, a._h, g, t))
        self._keep += [kernel, a]
        return self

    def copy(self, src: Buffer, dst: Buffer, nbytes: int, src_offset: int = 0, dst_offset: int = 0) -> "Submission":
        src, dst = _buffer(src), _buffer(dst)
        _check(lib.rig_submission_copy(self._h, src._h, src_offset, dst._h, dst_offset, nbytes))
        self._keep += [src, dst]
        return self

    def copy_box(self, src: Buffer, dst: Buffer, width: int, rows: int, src_pitch: int, dst_pitch: int,
                 src_offset: int = 0, dst_offset: int = 0) -> "Submission":
        """A copy of `rows` rows of `width` bytes, each side stepping its own pitch."""
        src, dst = _buffer(src), _buffer(dst)
        _check(lib.rig_submission_copy_box(self._h, src._h, src_offset, src_pitch, dst._h, dst_offset,
                                           dst_pitch, width, rows))
        self._keep += [src, dst]
        return self

    def fill(self, dst: Buffer, byte: int, nbytes: int, offset: int = 0) -> "Submission":
        dst = _buffer(dst)
        _check(lib.rig_submission_fill(self._h, dst._h, offset, nbytes, byte))
        self._keep.append(dst)
        return self

    def wait(self, point: "Point") -> "Submission":
        """The submission's work waits for `point` (of any device)."""
        _check(lib.rig_submission_wait(self._h, point._h))
        self._keep.append(point)
        return self

    def after(self, parts: Sequence[int]) -> "Submission":
        """The last part runs after these parts of the other queue."""
        _check(lib.rig_submission_after(self._h, ffi.new("size_t[]", list(parts)), len(parts)))
        return self


def _buffer(b) -> Buffer:
    return b.buffer if isinstance(b, HostArray) else b


class Point:
    """A value of a device's timeline."""

    def __init__(self, handle, device: Device):
        self._h = handle
        self._device = device

    @property
    def value(self) -> int:
        return lib.rig_point_value(self._h)

    def signaled(self) -> bool:
        return bool(lib.rig_point_signaled(self._h))

    def wait(self, timeout: Optional[float] = None) -> "Point":
        """Waits until reached; raises Lost if the device is lost first. With a `timeout`
        in seconds, raises Timeout (a TimeoutError) if it passes first: the work goes on,
        and a later wait may still see it reached."""
        if timeout is None:
            _check(lib.rig_point_wait(self._h))
        else:
            if timeout < 0:
                raise ValueError(f"a timeout of {timeout} s is negative")
            _check(lib.rig_point_wait_timeout(self._h, int(timeout * 1e9)))
        return self


class Profile:
    """What a profile recorded: (value, start_ns, end_ns) per value, and a Chrome trace."""

    def __init__(self, handle):
        self._h = handle

    @property
    def work(self):
        out = []
        for i in range(lib.rig_profile_len(self._h)):
            w = _out("RigWork")
            _check(lib.rig_profile_work(self._h, i, w))
            out.append((w.value, w.start_ns, w.end_ns))
        return out

    def chrome_trace(self) -> str:
        """JSON for chrome://tracing or Perfetto."""
        out = _out("char *")
        _check(lib.rig_profile_chrome_trace(self._h, out))
        try:
            return ffi.string(out[0]).decode()
        finally:
            lib.rig_string_free(out[0])

    def write_chrome_trace(self, path: str) -> None:
        with open(path, "w") as f:
            f.write(self.chrome_trace())

    def events(self):
        return json.loads(self.chrome_trace())
