//! Status codes, the thread's last error message, and the guard every call runs in.

use std::cell::RefCell;
use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

use rig_client::Error;

/// What a call did: `RIG_STATUS_OK`, or why it failed ([`rig_last_error`] says more).
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RigStatus {
    /// It succeeded.
    Ok = 0,
    /// rigd could not be reached.
    Connect = 1,
    /// The connection to rigd failed after it was made.
    Protocol = 2,
    /// rigd refused the request.
    Refused = 3,
    /// The device was lost (a fault, a hang, a reset); the message is rigd's reason.
    Lost = 4,
    /// The device never runs a part of the submission.
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
    /// Another error of rig-client's.
    Other = 14,
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
        let code = match &e {
            Error::Connect { .. } => RigStatus::Connect,
            Error::Protocol(_) => RigStatus::Protocol,
            Error::Refused { .. } => RigStatus::Refused,
            Error::Lost { .. } => RigStatus::Lost,
            Error::Never(_) => RigStatus::Never,
            Error::OutOfMemory { .. } => RigStatus::OutOfMemory,
            Error::NoKernel(_) => RigStatus::NoKernel,
            Error::Invalid(_) => RigStatus::Invalid,
            Error::Io { .. } => RigStatus::Io,
            Error::Arg(_) => RigStatus::Arg,
            #[allow(unreachable_patterns)]
            _ => RigStatus::Other,
        };
        Fail(code, e.to_string())
    }
}

impl From<rig_client::ArgError> for Fail {
    fn from(e: rig_client::ArgError) -> Fail {
        Fail(RigStatus::Arg, e.to_string())
    }
}

impl From<rig_kernels::Error> for Fail {
    fn from(e: rig_kernels::Error) -> Fail {
        Fail(RigStatus::Compile, e.to_string())
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
