//! Status codes, the thread's last error message, and the guard every call runs in.

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use rig_client::{Error, ErrorKind};

/// What a call did: `RIG_STATUS_OK`, or why it failed ([`rig_last_error`] says more, and
/// [`rig_status_string`] names the status). Every error of rig-client has a status of its
/// own. Numbers are never reused or renumbered: new statuses are appended.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigStatus {
    /// It succeeded.
    Ok = 0,
    /// rigd could not be reached: no rigd listens on the socket, the socket is not
    /// permitted, or rigd refused the connection.
    Connect = 1,
    /// rigd answered something this client cannot use (out of step with it).
    Protocol = 2,
    /// rigd refused the request.
    Refused = 3,
    /// The device was lost (a fault, a hang, a reset); the message is rigd's reason.
    Lost = 4,
    /// The device never runs a part of the submission (the client's check).
    Never = 5,
    /// Out of device, host or quota memory.
    OutOfMemory = 6,
    /// The image has no kernel of that name.
    NoKernel = 7,
    /// An argument is outside what the call accepts.
    Invalid = 8,
    /// A host system call failed.
    Io = 9,
    /// A kernel argument does not fit its parameter (kind, size, name, position, unset).
    Arg = 10,
    /// A kernel source could not be built (clang missing or too old, or its diagnostics).
    Compile = 11,
    /// A pointer argument was NULL, or a string not UTF-8.
    Null = 12,
    /// The library panicked: a bug of rig's, reported with its message.
    Panic = 13,
    /// No call answers it any more: every error has a status of its own. Kept so that no
    /// number moves.
    Other = 14,
    /// The connection to rigd failed after it was made: rigd went away (or closed it).
    Connection = 15,
    /// rigd shared memory whose layout this client cannot use (rigd and the library are
    /// out of step).
    Layout = 16,
    /// Memory rigd shared could not be mapped or used.
    Shared = 17,
    /// rigd answered that the device never does what was asked (Mapped memory or host
    /// pages on a path that maps none, a growth past what the path makes).
    Unsupported = 18,
    /// A wait's timeout passed before its point was reached ([`crate::rig_point_wait_timeout`]);
    /// the work goes on.
    Timeout = 19,
}

impl RigStatus {
    /// Every status, in the order of their numbers.
    pub const ALL: [RigStatus; 20] = [
        RigStatus::Ok,
        RigStatus::Connect,
        RigStatus::Protocol,
        RigStatus::Refused,
        RigStatus::Lost,
        RigStatus::Never,
        RigStatus::OutOfMemory,
        RigStatus::NoKernel,
        RigStatus::Invalid,
        RigStatus::Io,
        RigStatus::Arg,
        RigStatus::Compile,
        RigStatus::Null,
        RigStatus::Panic,
        RigStatus::Other,
        RigStatus::Connection,
        RigStatus::Layout,
        RigStatus::Shared,
        RigStatus::Unsupported,
        RigStatus::Timeout,
    ];

    /// What the status means, in a few words, NUL-terminated for C.
    fn said(self) -> &'static CStr {
        match self {
            RigStatus::Ok => c"ok",
            RigStatus::Connect => c"rigd could not be reached",
            RigStatus::Protocol => c"rigd answered out of step",
            RigStatus::Refused => c"rigd refused the request",
            RigStatus::Lost => c"the device was lost",
            RigStatus::Never => c"the device never runs this",
            RigStatus::OutOfMemory => c"out of memory",
            RigStatus::NoKernel => c"no kernel of that name",
            RigStatus::Invalid => c"an argument is outside what the call accepts",
            RigStatus::Io => c"a host system call failed",
            RigStatus::Arg => c"a kernel argument does not fit its parameter",
            RigStatus::Compile => c"the kernel source did not build",
            RigStatus::Null => c"a NULL pointer or a string not UTF-8",
            RigStatus::Panic => c"rig panicked (a bug)",
            RigStatus::Other => c"another error",
            RigStatus::Connection => c"the connection to rigd failed (rigd went away)",
            RigStatus::Layout => c"rigd's shared memory is laid out out of step",
            RigStatus::Shared => c"memory rigd shared could not be mapped",
            RigStatus::Unsupported => c"the device never does this",
            RigStatus::Timeout => c"the wait's timeout passed first",
        }
    }
}

/// What status `status` (a `RigStatus`; C may pass any integer) means, such as "the
/// connection to rigd failed (rigd went away)"; "not a RigStatus" for other numbers. The
/// string is static: the caller does not free it.
#[unsafe(no_mangle)]
pub extern "C" fn rig_status_string(status: i32) -> *const c_char {
    RigStatus::ALL
        .iter()
        .find(|s| **s as i32 == status)
        .map_or(c"not a RigStatus", |s| s.said())
        .as_ptr()
}

thread_local! {
    static LAST: RefCell<CString> = RefCell::new(CString::default());
}

/// The message of the last call on this thread that failed ("" if none did). Valid until
/// the thread's next failing call; the caller does not free it.
#[unsafe(no_mangle)]
pub extern "C" fn rig_last_error() -> *const c_char {
    LAST.with(|l| l.borrow().as_ptr())
}

/// A failure: its code and message.
#[derive(Debug)]
pub(crate) struct Fail(pub RigStatus, pub String);

impl Fail {
    pub fn null(what: &str) -> Fail {
        Fail(RigStatus::Null, format!("{what} is NULL"))
    }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Fail {
        // Exhaustive, with no wildcard: a kind rig-client adds fails to compile here until
        // it has a status of its own.
        let code = match e.kind() {
            ErrorKind::Connect => RigStatus::Connect,
            ErrorKind::Connection => RigStatus::Connection,
            ErrorKind::Protocol => RigStatus::Protocol,
            ErrorKind::Layout => RigStatus::Layout,
            ErrorKind::Refused => RigStatus::Refused,
            ErrorKind::Lost => RigStatus::Lost,
            ErrorKind::Never => RigStatus::Never,
            ErrorKind::Unsupported => RigStatus::Unsupported,
            ErrorKind::OutOfMemory => RigStatus::OutOfMemory,
            ErrorKind::Arg => RigStatus::Arg,
            ErrorKind::NoKernel => RigStatus::NoKernel,
            ErrorKind::Invalid => RigStatus::Invalid,
            ErrorKind::Shared => RigStatus::Shared,
            ErrorKind::Io => RigStatus::Io,
        };
        // The message is the whole chain: C and Python see no sources of their own.
        Fail(code, e.report().to_string())
    }
}

impl From<rig_client::ArgError> for Fail {
    fn from(e: rig_client::ArgError) -> Fail {
        Fail(RigStatus::Arg, e.to_string())
    }
}

impl From<rig_kernels::Error> for Fail {
    fn from(e: rig_kernels::Error) -> Fail {
        Fail(RigStatus::Compile, rig_client::Report::of(&e).to_string())
    }
}

fn keep(message: String) {
    let c = CString::new(message.replace('\0', " ")).unwrap_or_default();
    LAST.with(|l| *l.borrow_mut() = c);
}

/// Runs `f`, catching a panic, and answers its status, keeping its message.
pub(crate) fn guard(f: impl FnOnce() -> Result<(), Fail>) -> RigStatus {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => RigStatus::Ok,
        Ok(Err(Fail(code, message))) => {
            keep(message);
            code
        }
        Err(panic) => {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a panic".into());
            keep(format!("rig panicked (a bug; please report it): {why}"));
            RigStatus::Panic
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_status_has_its_own_number_and_string() {
        for (n, s) in RigStatus::ALL.iter().enumerate() {
            assert_eq!(*s as usize, n, "{s:?}");
        }
        let mut said: Vec<&CStr> = RigStatus::ALL.iter().map(|s| s.said()).collect();
        said.sort();
        said.dedup();
        assert_eq!(said.len(), RigStatus::ALL.len());
        // SAFETY: rig_status_string answers a static NUL-terminated string.
        let of = |n: i32| unsafe { CStr::from_ptr(rig_status_string(n)) };
        assert_eq!(
            of(RigStatus::Connection as i32),
            c"the connection to rigd failed (rigd went away)"
        );
        assert_eq!(of(-1), c"not a RigStatus");
        assert_eq!(of(RigStatus::ALL.len() as i32), c"not a RigStatus");
    }
}
