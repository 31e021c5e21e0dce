//! The functions of the C ABI, in the order of a program's use: connect and open, buffers,
//! images and kernels, arguments, submissions, points, profiles, kernels from source.
//!
//! Each takes its handles and pointers through `crate::ptr`, runs inside
//! `crate::status::guard`, and answers a status. Their `# Safety` sections are what C
//! must promise; each `unsafe` block passes that promise on.

use std::ffi::{CString, c_char};
use std::os::fd::{AsFd, AsRawFd};

use rig_client::{
    Access, Args, Buffer, CopyBox, Device, HostMemory, Image, Kernel, Launch, Memory, ParamKind,
    Point, Profile, Rig, Submission, WaitPolicy,
};
use rig_kernels::{Compiler, Options, Source};

use crate::ptr::{
    bytes, bytes_mut, free, free_string, give, give_string, handle, handle_mut, items, put, string,
    take,
};
use crate::status::{Fail, RigStatus, guard};

/// A connection to rigd.
#[derive(Debug)]
pub struct RigConnection(Rig);

/// An open device.
#[derive(Debug)]
pub struct RigDevice {
    device: Device,
    name: CString,
    arch: CString,
}

/// Memory of a device: a buffer, and for host memory ([`rig_host_buffer`]) the mapping
/// the host reaches it through.
#[derive(Debug)]
pub struct RigBuffer {
    buffer: Buffer,
    _host: Option<HostMemory>,
}

/// A code object loaded on a device.
#[derive(Debug)]
pub struct RigImage(Image);

/// A kernel of an image, with its parameters' names as C strings.
#[derive(Debug)]
pub struct RigKernel {
    kernel: Kernel,
    names: Vec<Option<CString>>,
}

/// The arguments of one launch of a kernel.
#[derive(Debug)]
pub struct RigArgs(Args);

/// Work to submit: launches, copies, fills, waits, in parts.
#[derive(Debug)]
pub struct RigSubmission(Submission);

/// A value of a device's timeline: the point its work reached.
#[derive(Debug)]
pub struct RigPoint(Point);

/// What a profile recorded.
#[derive(Debug)]
pub struct RigProfile(Profile);

/// A code object built from source ([`rig_compile`]).
#[derive(Debug)]
pub struct RigCode(Vec<u8>);

/// The kinds of memory of [`rig_buffer_create`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigMemory {
    /// GPU memory the host reaches through copies.
    Device = 0,
    /// Host memory the GPU addresses.
    Pinned = 1,
    /// GPU memory the host addresses through the memory BAR.
    Mapped = 2,
}

/// Source languages of [`rig_compile`].
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigLanguage {
    /// OpenCL C.
    Opencl = 0,
    /// HIP.
    Hip = 1,
}

/// What a kernel parameter takes.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigParamKind {
    /// A global pointer: a buffer ([`rig_args_buffer`]).
    Buffer = 0,
    /// Bytes by value ([`rig_args_value`]).
    Value = 1,
    /// A local pointer: dynamic LDS ([`rig_args_local`]).
    Local = 2,
    /// Another kind, set as raw bytes ([`rig_args_value`]).
    Other = 3,
}

/// One parameter of a kernel ([`rig_kernel_param`]).
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RigParam {
    /// Its name, or NULL where the metadata has none (HIP); valid while the kernel lives.
    pub name: *const c_char,
    /// What it takes.
    pub kind: RigParamKind,
    /// Byte offset among the parameters.
    pub offset: u32,
    /// Bytes.
    pub size: u32,
}

/// A buffer named among a raw launch's parameters ([`rig_submission_launch_raw`]): its
/// address is added to the 8 bytes at parameter byte `at`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RigRef {
    /// The buffer.
    pub buffer: *const RigBuffer,
    /// The parameter byte where its address goes.
    pub at: usize,
    /// Whether the launch may write it (else it only reads it).
    pub write: bool,
}

/// One value's work in a profile, in `CLOCK_MONOTONIC` nanoseconds.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RigWork {
    /// The value.
    pub value: u64,
    /// When its work started.
    pub start_ns: u64,
    /// When it ended.
    pub end_ns: u64,
}

// The host's page: what rigd maps host memory in.
use rig_amd::PAGE_BYTES as PAGE;

/// The memory a C caller's `RigMemory` value names; C may pass any integer.
fn memory(m: u32) -> Result<Memory, Fail> {
    match m {
        m if m == RigMemory::Device as u32 => Ok(Memory::Device),
        m if m == RigMemory::Pinned as u32 => Ok(Memory::Pinned),
        m if m == RigMemory::Mapped as u32 => Ok(Memory::Mapped),
        _ => Err(Fail(RigStatus::Invalid, format!("{m} is not a RigMemory"))),
    }
}

// ---- connect and open ----

/// Connects to rigd at `socket`, or where `RIG_SOCKET` (else `/run/rig/rigd.sock`) says if
/// `socket` is NULL.
///
/// # Safety
/// `socket` is NULL or a NUL-terminated string; `out` is writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_connect(
    socket: *const c_char,
    out: *mut *mut RigConnection,
) -> RigStatus {
    guard(|| {
        let rig = if socket.is_null() {
            Rig::connect()?
        } else {
            // SAFETY: the caller promises a NUL-terminated string.
            Rig::connect_to(unsafe { string(socket, "socket") }?)?
        };
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigConnection(rig)), "out") }
    })
}

/// Frees a connection (its open devices keep it alive while they live).
///
/// # Safety
/// `rig` is NULL or a connection of [`rig_connect`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_connection_free(rig: *mut RigConnection) {
    // SAFETY: the caller's promise.
    unsafe { free(rig) }
}

/// Opens the GPU `name` (such as `"AMD:0"`, or `"0"`).
///
/// # Safety
/// `rig` is a live connection; `name` a NUL-terminated string; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_open(
    rig: *const RigConnection,
    name: *const c_char,
    out: *mut *mut RigDevice,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller promises a live connection and a NUL-terminated name.
        let (rig, name) = unsafe { (handle(rig, "rig")?, string(name, "name")?) };
        let device = rig.0.open_device(name)?;
        let d = RigDevice {
            name: CString::new(device.name()).unwrap_or_default(),
            arch: CString::new(device.arch()).unwrap_or_default(),
            device,
        };
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(d), "out") }
    })
}

/// Waits for the device's submitted work, then closes it, and frees the handle (also when
/// the close fails).
///
/// # Safety
/// `device` is a device of [`rig_open`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_close(device: *mut RigDevice) -> RigStatus {
    guard(|| {
        // SAFETY: the caller gives the handle up.
        let d = unsafe { take(device, "device") }?;
        Ok(d.device.close()?)
    })
}

/// Stops the device's work at once and closes it, and frees the handle.
///
/// # Safety
/// `device` is a device of [`rig_open`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_abort(device: *mut RigDevice) -> RigStatus {
    guard(|| {
        // SAFETY: the caller gives the handle up.
        let d = unsafe { take(device, "device") }?;
        Ok(d.device.abort()?)
    })
}

/// Frees the handle; the device closes at once, without waiting, once its buffers, images,
/// kernels and points are freed too.
///
/// # Safety
/// `device` is NULL or a device of [`rig_open`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_free(device: *mut RigDevice) {
    // SAFETY: the caller's promise.
    unsafe { free(device) }
}

/// rigd's id of the device (the one `rigctl devices` lists); 0 for NULL.
///
/// # Safety
/// `device` is NULL or a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_id(device: *const RigDevice) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { handle(device, "device") }.map_or(0, |d| d.device.id())
}

/// The GPU's processor, such as `"gfx1100"`: valid while the device lives.
///
/// # Safety
/// `device` is a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_arch(device: *const RigDevice) -> *const c_char {
    // SAFETY: the caller's promise.
    unsafe { handle(device, "device") }.map_or(std::ptr::null(), |d| d.arch.as_ptr())
}

/// The GPU's name, such as `"AMD:0"`: valid while the device lives.
///
/// # Safety
/// `device` is a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_name(device: *const RigDevice) -> *const c_char {
    // SAFETY: the caller's promise.
    unsafe { handle(device, "device") }.map_or(std::ptr::null(), |d| d.name.as_ptr())
}

/// The value the device's word holds: every value up to it is reached.
///
/// # Safety
/// `device` is a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_signaled(device: *const RigDevice) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { handle(device, "device") }.map_or(0, |d| d.device.signaled())
}

/// The device's interrupt eventfd for an event loop (readable when its word may have
/// advanced; owned by the device: do not close it); -1 for NULL.
///
/// # Safety
/// `device` is NULL or a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_eventfd(device: *const RigDevice) -> i32 {
    // SAFETY: the caller's promise.
    unsafe { handle(device, "device") }.map_or(-1, |d| d.device.as_fd().as_raw_fd())
}

/// `RIG_STATUS_LOST` with rigd's reason (in [`crate::rig_last_error`]) if the device was
/// lost, else `RIG_STATUS_OK`.
///
/// # Safety
/// `device` is a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_device_lost(device: *const RigDevice) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let d = unsafe { handle(device, "device") }?;
        match d.device.lost() {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    })
}

// ---- buffers ----

/// A new buffer of `bytes` bytes of `kind` memory (a [`RigMemory`]).
///
/// # Safety
/// `device` is a live device; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_buffer_create(
    device: *const RigDevice,
    bytes: u64,
    kind: u32,
    out: *mut *mut RigBuffer,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let d = unsafe { handle(device, "device") }?;
        let buffer = d.device.buffer(bytes, memory(kind)?)?;
        // SAFETY: the caller promises out is writable.
        unsafe {
            put(
                out,
                give(RigBuffer {
                    buffer,
                    _host: None,
                }),
                "out",
            )
        }
    })
}

/// A buffer of `bytes` bytes of host memory that the program reads and writes in place
/// at `*host` (page aligned, zeroed, rounded up to whole pages; valid while the buffer
/// lives) and the GPU addresses, with no copy. The program orders its own accesses: it waits for the point of work that
/// writes the memory before it reads it.
///
/// # Safety
/// `device` is a live device; `out` and `host` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_host_buffer(
    device: *const RigDevice,
    bytes: u64,
    out: *mut *mut RigBuffer,
    host: *mut *mut u8,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let d = unsafe { handle(device, "device") }?;
        // rigd maps whole pages of the memory: the mapping is a page multiple.
        let len = bytes.checked_next_multiple_of(PAGE).ok_or_else(|| {
            Fail(
                RigStatus::Invalid,
                format!("{bytes} bytes do not fit the host"),
            )
        })?;
        let region = HostMemory::new("rig-host-buffer", len)?;
        let buffer = d.device.map_host(&region, 0, bytes)?;
        let ptr = region.as_ptr();
        // SAFETY: the caller promises host and out are writable.
        unsafe {
            put(host, ptr, "host")?;
            put(
                out,
                give(RigBuffer {
                    buffer,
                    _host: Some(region),
                }),
                "out",
            )
        }
    })
}

/// Frees a buffer; its memory is given back once no submitted work uses it.
///
/// # Safety
/// `buffer` is NULL or a buffer of this library, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_buffer_free(buffer: *mut RigBuffer) {
    // SAFETY: the caller's promise.
    unsafe { free(buffer) }
}

/// Its bytes; 0 for NULL.
///
/// # Safety
/// `buffer` is NULL or a live buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_buffer_len(buffer: *const RigBuffer) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { handle(buffer, "buffer") }.map_or(0, |b| b.buffer.len())
}

/// The GPU address of its first byte; 0 for NULL.
///
/// # Safety
/// `buffer` is NULL or a live buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_buffer_address(buffer: *const RigBuffer) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { handle(buffer, "buffer") }.map_or(0, |b| b.buffer.address())
}

/// Writes `len` bytes from `data` at `offset`, after every submitted use of the buffer.
///
/// # Safety
/// `buffer` is a live buffer; `data` has `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_buffer_write(
    buffer: *const RigBuffer,
    offset: u64,
    data: *const u8,
    len: usize,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (b, data) = unsafe { (handle(buffer, "buffer")?, bytes(data, len, "data")?) };
        Ok(b.buffer.write_at(offset, data)?)
    })
}

/// Reads `len` bytes at `offset` into `out`, after the last submitted write of the buffer.
///
/// # Safety
/// `buffer` is a live buffer; `out` has `len` writable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_buffer_read(
    buffer: *const RigBuffer,
    offset: u64,
    out: *mut u8,
    len: usize,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (b, out) = unsafe { (handle(buffer, "buffer")?, bytes_mut(out, len, "out")?) };
        Ok(b.buffer.read_at(offset, out)?)
    })
}

// ---- images and kernels ----

/// Loads the code object of `len` bytes at `code` (an AMDGPU ELF for the device).
///
/// # Safety
/// `device` is a live device; `code` has `len` readable bytes; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_image_load(
    device: *const RigDevice,
    code: *const u8,
    len: usize,
    out: *mut *mut RigImage,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (d, code) = unsafe { (handle(device, "device")?, bytes(code, len, "code")?) };
        let image = d.device.load_image(code)?;
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigImage(image)), "out") }
    })
}

/// Frees an image; it is unloaded once its kernels are freed and no work runs it.
///
/// # Safety
/// `image` is NULL or an image of [`rig_image_load`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_image_free(image: *mut RigImage) {
    // SAFETY: the caller's promise.
    unsafe { free(image) }
}

/// Starts making the `n` kernels named in `names` without waiting for them.
///
/// # Safety
/// `image` is a live image; `names` has `n` NUL-terminated strings.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_image_prepare(
    image: *const RigImage,
    names: *const *const c_char,
    n: usize,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (image, names) = unsafe { (handle(image, "image")?, items(names, n, "names")?) };
        let names = names
            .iter()
            // SAFETY: the caller promises each is a NUL-terminated string.
            .map(|&p| unsafe { string(p, "a name") })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(image.0.prepare(&names)?)
    })
}

/// The kernel `name` of the image, ready to launch.
///
/// # Safety
/// `image` is a live image; `name` a NUL-terminated string; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_kernel_resolve(
    image: *const RigImage,
    name: *const c_char,
    out: *mut *mut RigKernel,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (image, name) = unsafe { (handle(image, "image")?, string(name, "name")?) };
        let kernel = image.0.resolve(name)?;
        let names = kernel
            .arguments()
            .iter()
            .map(|p| p.name.as_deref().and_then(|n| CString::new(n).ok()))
            .collect();
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigKernel { kernel, names }), "out") }
    })
}

/// Frees a kernel.
///
/// # Safety
/// `kernel` is NULL or a kernel of [`rig_kernel_resolve`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_kernel_free(kernel: *mut RigKernel) {
    // SAFETY: the caller's promise.
    unsafe { free(kernel) }
}

/// Its explicit parameters; 0 for NULL.
///
/// # Safety
/// `kernel` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_kernel_param_count(kernel: *const RigKernel) -> usize {
    // SAFETY: the caller's promise.
    unsafe { handle(kernel, "kernel") }.map_or(0, |k| k.kernel.arguments().len())
}

/// Parameter `index` of the kernel.
///
/// # Safety
/// `kernel` is a live kernel; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_kernel_param(
    kernel: *const RigKernel,
    index: usize,
    out: *mut RigParam,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let k = unsafe { handle(kernel, "kernel") }?;
        let params = k.kernel.arguments();
        let p = params.get(index).ok_or_else(|| {
            Fail(
                RigStatus::Invalid,
                format!(
                    "kernel {} has {} parameters; there is no parameter {index}",
                    k.kernel.name(),
                    params.len()
                ),
            )
        })?;
        let param = RigParam {
            name: k.names[index]
                .as_ref()
                .map_or(std::ptr::null(), |n| n.as_ptr()),
            kind: match p.kind {
                ParamKind::Buffer => RigParamKind::Buffer,
                ParamKind::Value => RigParamKind::Value,
                ParamKind::Local => RigParamKind::Local,
                _ => RigParamKind::Other,
            },
            offset: p.offset,
            size: p.size,
        };
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, param, "out") }
    })
}

/// Bytes of static LDS a group of it takes; 0 for NULL.
///
/// # Safety
/// `kernel` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_kernel_static_lds(kernel: *const RigKernel) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { handle(kernel, "kernel") }.map_or(0, |k| k.kernel.static_lds())
}

/// Bytes of its explicit parameters (what a raw launch passes at least); 0 for NULL.
///
/// # Safety
/// `kernel` is NULL or a live kernel.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_kernel_params_size(kernel: *const RigKernel) -> u32 {
    // SAFETY: the caller's promise.
    unsafe { handle(kernel, "kernel") }.map_or(0, |k| k.kernel.params())
}

// ---- arguments ----

/// New arguments for a launch of `kernel`.
///
/// # Safety
/// `kernel` is a live kernel; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_args_new(
    kernel: *const RigKernel,
    out: *mut *mut RigArgs,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let k = unsafe { handle(kernel, "kernel") }?;
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigArgs(k.kernel.args())), "out") }
    })
}

/// Frees arguments.
///
/// # Safety
/// `args` is NULL or arguments of [`rig_args_new`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_args_free(args: *mut RigArgs) {
    // SAFETY: the caller's promise.
    unsafe { free(args) }
}

/// The parameter `name`, or the one at `index` when `name` is NULL.
///
/// # Safety
/// `name` is NULL or a NUL-terminated string.
unsafe fn at<'a>(name: *const c_char, index: usize) -> Result<rig_client::At<'a>, Fail> {
    if name.is_null() {
        Ok(rig_client::At::Index(index))
    } else {
        // SAFETY: the caller's promise.
        Ok(rig_client::At::Name(unsafe { string(name, "name") }?))
    }
}

/// Sets the global pointer `name` (or the parameter at `index` if `name` is NULL) to byte
/// `offset` of `buffer`, which the launch may write unless `read_only`.
///
/// # Safety
/// `args` is live and used by no other thread; `name` NULL or a NUL-terminated string;
/// `buffer` a live buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_args_buffer(
    args: *mut RigArgs,
    name: *const c_char,
    index: usize,
    buffer: *const RigBuffer,
    offset: u64,
    read_only: bool,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (a, at, b) = unsafe {
            (
                handle_mut(args, "args")?,
                at(name, index)?,
                handle(buffer, "buffer")?,
            )
        };
        let access = if read_only {
            Access::Read
        } else {
            Access::Write
        };
        a.0.buffer_at(at, &b.buffer, offset, access)?;
        Ok(())
    })
}

/// Sets the by-value parameter `name` (or at `index`) to the `len` bytes at `value`
/// (little-endian, laid out as the kernel's), which must be its size.
///
/// # Safety
/// As [`rig_args_buffer`]; `value` has `len` readable bytes.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_args_value(
    args: *mut RigArgs,
    name: *const c_char,
    index: usize,
    value: *const u8,
    len: usize,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (a, at, v) = unsafe {
            (
                handle_mut(args, "args")?,
                at(name, index)?,
                bytes(value, len, "value")?,
            )
        };
        a.0.bytes(at, v)?;
        Ok(())
    })
}

/// Gives the local pointer `name` (or at `index`) `bytes` bytes of dynamic LDS.
///
/// # Safety
/// As [`rig_args_buffer`].
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_args_local(
    args: *mut RigArgs,
    name: *const c_char,
    index: usize,
    bytes: u32,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (a, at) = unsafe { (handle_mut(args, "args")?, at(name, index)?) };
        a.0.local(at, bytes)?;
        Ok(())
    })
}

// ---- submissions ----

/// A new, empty submission.
#[unsafe(no_mangle)]
pub extern "C" fn rig_submission_new() -> *mut RigSubmission {
    give(RigSubmission(Submission::new()))
}

/// Frees a submission.
///
/// # Safety
/// `s` is NULL or a submission of [`rig_submission_new`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submission_free(s: *mut RigSubmission) {
    // SAFETY: the caller's promise.
    unsafe { free(s) }
}

/// Applies a builder step to the submission at `s`.
///
/// # Safety
/// `s` is a live submission used by no other thread.
unsafe fn step(
    s: *mut RigSubmission,
    f: impl FnOnce(Submission) -> Result<Submission, Fail>,
) -> Result<(), Fail> {
    // SAFETY: the caller's promise.
    let s = unsafe { handle_mut(s, "submission") }?;
    let taken = std::mem::take(&mut s.0);
    // A refused step leaves the submission as it was.
    let kept = taken.clone();
    match f(taken) {
        Ok(next) => {
            s.0 = next;
            Ok(())
        }
        Err(e) => {
            s.0 = kept;
            Err(e)
        }
    }
}

/// Adds a launch of `args`' kernel with them (every parameter set): `groups` groups of
/// `threads` work-items along x, y, z.
///
/// # Safety
/// `s` is a live submission and `args` live arguments; `groups` and `threads` have 3
/// items each.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submission_launch(
    s: *mut RigSubmission,
    args: *const RigArgs,
    groups: *const u32,
    threads: *const u32,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (a, g, t) = unsafe {
            (
                handle(args, "args")?,
                items(groups, 3, "groups")?,
                items(threads, 3, "threads")?,
            )
        };
        let (g, t) = ([g[0], g[1], g[2]], [t[0], t[1], t[2]]);
        // A parameter not set is this call's error, not the submission's refusal at submit.
        a.0.check()?;
        // SAFETY: the caller's promise.
        unsafe { step(s, |s| Ok(s.launch(a.0.launch(g, t)))) }
    })
}

/// Adds a launch with raw parameter bytes: `len` bytes at `params`, and `n_refs` buffers
/// whose addresses are added at their bytes; `shared` bytes of dynamic LDS.
///
/// # Safety
/// `s` a live submission; `kernel` a live kernel; `params` has `len` readable bytes;
/// `refs` has `n_refs` items naming live buffers; `groups` and `threads` 3 items each.
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rig_submission_launch_raw(
    s: *mut RigSubmission,
    kernel: *const RigKernel,
    params: *const u8,
    len: usize,
    refs: *const RigRef,
    n_refs: usize,
    groups: *const u32,
    threads: *const u32,
    shared: u32,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (k, p, r, g, t) = unsafe {
            (
                handle(kernel, "kernel")?,
                bytes(params, len, "params")?,
                items(refs, n_refs, "refs")?,
                items(groups, 3, "groups")?,
                items(threads, 3, "threads")?,
            )
        };
        let refs = r
            .iter()
            .map(|r| {
                // SAFETY: the caller promises each ref names a live buffer.
                let b = unsafe { handle(r.buffer, "a ref's buffer") }?;
                Ok(if r.write {
                    rig_client::Ref::write(&b.buffer, r.at)
                } else {
                    rig_client::Ref::read(&b.buffer, r.at)
                })
            })
            .collect::<Result<Vec<_>, Fail>>()?;
        let (g, t) = ([g[0], g[1], g[2]], [t[0], t[1], t[2]]);
        // SAFETY: the caller's promise.
        let launch = Launch::new(&k.kernel, g, t)
            .params(p)
            .refs(&refs)
            .shared(shared);
        // SAFETY: the caller's promise.
        unsafe { step(s, |s| Ok(s.launch(launch))) }
    })
}

/// Adds a copy of `bytes` bytes from `src` at `src_offset` to `dst` at `dst_offset`.
///
/// # Safety
/// `s` a live submission; `src` and `dst` live buffers.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submission_copy(
    s: *mut RigSubmission,
    src: *const RigBuffer,
    src_offset: u64,
    dst: *const RigBuffer,
    dst_offset: u64,
    bytes: u64,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (a, b) = unsafe { (handle(src, "src")?, handle(dst, "dst")?) };
        // SAFETY: the caller's promise.
        unsafe {
            step(s, |s| {
                Ok(s.copy(&a.buffer, src_offset, &b.buffer, dst_offset, bytes))
            })
        }
    })
}

/// Adds a copy of a box: `rows` rows of `width` bytes, each side stepping its own pitch.
///
/// # Safety
/// As [`rig_submission_copy`].
#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub unsafe extern "C" fn rig_submission_copy_box(
    s: *mut RigSubmission,
    src: *const RigBuffer,
    src_offset: u64,
    src_pitch: u64,
    dst: *const RigBuffer,
    dst_offset: u64,
    dst_pitch: u64,
    width: u64,
    rows: u64,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (a, b) = unsafe { (handle(src, "src")?, handle(dst, "dst")?) };
        let shape = CopyBox {
            width,
            rows,
            src_pitch,
            dst_pitch,
        };
        // SAFETY: the caller's promise.
        unsafe {
            step(s, |s| {
                Ok(s.copy_box(&a.buffer, src_offset, &b.buffer, dst_offset, shape))
            })
        }
    })
}

/// Adds a fill of `bytes` bytes of `dst` at `offset` with `byte`.
///
/// # Safety
/// `s` a live submission; `dst` a live buffer.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submission_fill(
    s: *mut RigSubmission,
    dst: *const RigBuffer,
    offset: u64,
    bytes: u64,
    byte: u8,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let b = unsafe { handle(dst, "dst") }?;
        // SAFETY: the caller's promise.
        unsafe { step(s, |s| Ok(s.fill(&b.buffer, offset, bytes, byte))) }
    })
}

/// Makes the submission's work wait for `point` (of this device or another).
///
/// # Safety
/// `s` a live submission; `point` a live point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submission_wait(
    s: *mut RigSubmission,
    point: *const RigPoint,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { handle(point, "point") }?;
        // SAFETY: the caller's promise.
        unsafe { step(s, |s| Ok(s.wait(&p.0))) }
    })
}

/// Makes the last part run after the `n` parts of the other queue at `parts`.
///
/// # Safety
/// `s` a live submission; `parts` has `n` items.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submission_after(
    s: *mut RigSubmission,
    parts: *const usize,
    n: usize,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let parts = unsafe { items(parts, n, "parts") }?;
        // SAFETY: the caller's promise.
        unsafe { step(s, |s| Ok(s.after(parts))) }
    })
}

/// Submits the submission as the device's next value; `*out` is its point.
///
/// # Safety
/// `device` a live device; `s` a live submission; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_submit(
    device: *const RigDevice,
    s: *const RigSubmission,
    out: *mut *mut RigPoint,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (d, s) = unsafe { (handle(device, "device")?, handle(s, "submission")?) };
        let point = d.device.submit(&s.0)?;
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigPoint(point)), "out") }
    })
}

// ---- points ----

/// Waits until the point is reached; `RIG_STATUS_LOST` if the device is lost first.
///
/// # Safety
/// `point` is a live point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_point_wait(point: *const RigPoint) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        Ok(unsafe { handle(point, "point") }?.0.wait()?)
    })
}

/// Waits as [`rig_point_wait`] does for at most `timeout_ns` nanoseconds:
/// `RIG_STATUS_OK` once the point is reached, `RIG_STATUS_TIMEOUT` if the timeout passed
/// first (the work goes on; wait again or abort the device), `RIG_STATUS_LOST` if the device
/// is lost first. A timeout of 0 checks once, as [`rig_point_signaled`] does.
///
/// # Safety
/// `point` is a live point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_point_wait_timeout(
    point: *const RigPoint,
    timeout_ns: u64,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { handle(point, "point") }?;
        let timeout = std::time::Duration::from_nanos(timeout_ns);
        if p.0.wait_with(WaitPolicy::default().with_timeout(timeout))? {
            Ok(())
        } else {
            Err(Fail(
                RigStatus::Timeout,
                format!(
                    "value {} was not reached within {timeout:?}; its work goes on",
                    p.0.value()
                ),
            ))
        }
    })
}

/// Whether the device reached the point before any loss (no system call).
///
/// # Safety
/// `point` is NULL or a live point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_point_signaled(point: *const RigPoint) -> bool {
    // SAFETY: the caller's promise.
    unsafe { handle(point, "point") }.is_ok_and(|p| p.0.signaled())
}

/// Its value; 0 for NULL.
///
/// # Safety
/// `point` is NULL or a live point.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_point_value(point: *const RigPoint) -> u64 {
    // SAFETY: the caller's promise.
    unsafe { handle(point, "point") }.map_or(0, |p| p.0.value())
}

/// Frees a point.
///
/// # Safety
/// `point` is NULL or a point of this library, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_point_free(point: *mut RigPoint) {
    // SAFETY: the caller's promise.
    unsafe { free(point) }
}

// ---- profiles ----

/// Starts a profile of the device's work.
///
/// # Safety
/// `device` is a live device.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_profile_begin(device: *const RigDevice) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        Ok(unsafe { handle(device, "device") }?
            .device
            .begin_profile()?)
    })
}

/// Ends the profile, once every profiled value is reached; `*out` is what it recorded.
///
/// # Safety
/// `device` is a live device; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_profile_end(
    device: *const RigDevice,
    out: *mut *mut RigProfile,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { handle(device, "device") }?.device.end_profile()?;
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigProfile(p)), "out") }
    })
}

/// The values it recorded; 0 for NULL.
///
/// # Safety
/// `profile` is NULL or a live profile.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_profile_len(profile: *const RigProfile) -> usize {
    // SAFETY: the caller's promise.
    unsafe { handle(profile, "profile") }.map_or(0, |p| p.0.work.len())
}

/// The work of its `index`th value.
///
/// # Safety
/// `profile` is a live profile; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_profile_work(
    profile: *const RigProfile,
    index: usize,
    out: *mut RigWork,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { handle(profile, "profile") }?;
        let w = p.0.work.get(index).ok_or_else(|| {
            Fail(
                RigStatus::Invalid,
                format!(
                    "the profile has {} values; there is no {index}",
                    p.0.work.len()
                ),
            )
        })?;
        let w = RigWork {
            value: w.value,
            start_ns: w.start_ns,
            end_ns: w.end_ns,
        };
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, w, "out") }
    })
}

/// The profile as a Chrome trace (JSON for chrome://tracing or Perfetto), which the caller
/// frees with [`rig_string_free`].
///
/// # Safety
/// `profile` is a live profile; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_profile_chrome_trace(
    profile: *const RigProfile,
    out: *mut *mut c_char,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let p = unsafe { handle(profile, "profile") }?;
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give_string(p.0.chrome_trace()), "out") }
    })
}

/// Frees a profile.
///
/// # Safety
/// `profile` is NULL or a profile of [`rig_profile_end`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_profile_free(profile: *mut RigProfile) {
    // SAFETY: the caller's promise.
    unsafe { free(profile) }
}

/// Frees a string this library made.
///
/// # Safety
/// `s` is NULL or a string of this library's, not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_string_free(s: *mut c_char) {
    // SAFETY: the caller's promise.
    unsafe { free_string(s) }
}

// ---- kernels from source ----

/// Builds `source` in `language` (a [`RigLanguage`]: OpenCL C or HIP) for `processor` (such as the device's
/// [`rig_device_arch`]) with clang and lld, rig's prelude included; `*out` is the code
/// object. `RIG_STATUS_COMPILE` with clang's diagnostics, or what to install, on failure.
///
/// # Safety
/// `source` and `processor` are NUL-terminated strings; `out` writable.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_compile(
    language: u32,
    source: *const c_char,
    processor: *const c_char,
    out: *mut *mut RigCode,
) -> RigStatus {
    guard(|| {
        // SAFETY: the caller's promise.
        let (text, processor) =
            unsafe { (string(source, "source")?, string(processor, "processor")?) };
        let source = match language {
            l if l == RigLanguage::Opencl as u32 => Source::opencl("source.cl", text),
            l if l == RigLanguage::Hip as u32 => Source::hip("source.hip", text),
            l => {
                return Err(Fail(
                    RigStatus::Invalid,
                    format!("{l} is not a RigLanguage"),
                ));
            }
        };
        let code = Compiler::find()?.compile(&source, processor, &Options::default())?;
        // SAFETY: the caller promises out is writable.
        unsafe { put(out, give(RigCode(code)), "out") }
    })
}

/// The code object's bytes (valid while it lives); NULL for NULL.
///
/// # Safety
/// `code` is NULL or a live code object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_code_data(code: *const RigCode) -> *const u8 {
    // SAFETY: the caller's promise.
    unsafe { handle(code, "code") }.map_or(std::ptr::null(), |c| c.0.as_ptr())
}

/// Its length in bytes; 0 for NULL.
///
/// # Safety
/// `code` is NULL or a live code object.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_code_len(code: *const RigCode) -> usize {
    // SAFETY: the caller's promise.
    unsafe { handle(code, "code") }.map_or(0, |c| c.0.len())
}

/// Frees a code object.
///
/// # Safety
/// `code` is NULL or a code object of [`rig_compile`], not used after.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn rig_code_free(code: *mut RigCode) {
    // SAFETY: the caller's promise.
    unsafe { free(code) }
}
