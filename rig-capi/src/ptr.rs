//! The one place the C ABI turns raw pointers into references, slices and strings, and
//! hands handles over as boxes. Each function states what its caller must promise; the
//! functions of `api` pass on the promises their own `# Safety` sections ask of C.

use std::ffi::{CStr, c_char};

use crate::status::Fail;

/// A reference to the handle at `p`, or `Fail::Null`.
///
/// # Safety
/// `p` is NULL or a pointer this library handed out as a `T` and that was not freed.
pub(crate) unsafe fn handle<'a, T>(p: *const T, what: &str) -> Result<&'a T, Fail> {
    // SAFETY: the caller promises p is NULL or a live T of this library's.
    unsafe { p.as_ref() }.ok_or_else(|| Fail::null(what))
}

/// A mutable reference to the handle at `p`, or `Fail::Null`.
///
/// # Safety
/// As [`handle`], and no other reference to it is in use (C calls do not share one
/// builder across threads at once).
pub(crate) unsafe fn handle_mut<'a, T>(p: *mut T, what: &str) -> Result<&'a mut T, Fail> {
    // SAFETY: the caller promises p is NULL or a live, unshared T of this library's.
    unsafe { p.as_mut() }.ok_or_else(|| Fail::null(what))
}

/// Hands `v` to C as a pointer it frees with [`free`].
pub(crate) fn give<T>(v: T) -> *mut T {
    Box::into_raw(Box::new(v))
}

/// Frees a handle [`give`] made; NULL does nothing.
///
/// # Safety
/// `p` is NULL or a pointer [`give`] made for a `T`, not freed before and not used after.
pub(crate) unsafe fn free<T>(p: *mut T) {
    if !p.is_null() {
        // SAFETY: the caller promises p came from Box::into_raw and is freed once.
        drop(unsafe { Box::from_raw(p) });
    }
}

/// Takes the handle at `p` back, for a call that consumes it.
///
/// # Safety
/// As [`free`].
pub(crate) unsafe fn take<T>(p: *mut T, what: &str) -> Result<T, Fail> {
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: the caller promises p came from Box::into_raw and is not used after.
    Ok(*unsafe { Box::from_raw(p) })
}

/// Stores `v` at `out`.
///
/// # Safety
/// `out` is NULL or points to writable memory for a `T`.
pub(crate) unsafe fn put<T>(out: *mut T, v: T, what: &str) -> Result<(), Fail> {
    if out.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: the caller promises out is writable for a T; write does not drop the old.
    unsafe { out.write(v) };
    Ok(())
}

/// The UTF-8 string at `p`.
///
/// # Safety
/// `p` is NULL or a NUL-terminated string that stays unchanged during the call.
pub(crate) unsafe fn string<'a>(p: *const c_char, what: &str) -> Result<&'a str, Fail> {
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: the caller promises a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }
        .to_str()
        .map_err(|_| Fail(crate::RigStatus::Null, format!("{what} is not UTF-8")))
}

/// The `len` bytes at `p` (none when `len` is 0, whatever `p`).
///
/// # Safety
/// `p` points to `len` readable bytes that stay unchanged during the call.
pub(crate) unsafe fn bytes<'a>(p: *const u8, len: usize, what: &str) -> Result<&'a [u8], Fail> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: the caller promises len readable bytes at p.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// The `len` writable bytes at `p`.
///
/// # Safety
/// `p` points to `len` writable bytes that nothing else uses during the call.
pub(crate) unsafe fn bytes_mut<'a>(
    p: *mut u8,
    len: usize,
    what: &str,
) -> Result<&'a mut [u8], Fail> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: the caller promises len writable, unshared bytes at p.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// The `n` items at `p`.
///
/// # Safety
/// `p` points to `n` initialized items that stay unchanged during the call.
pub(crate) unsafe fn items<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], Fail> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Fail::null(what));
    }
    // SAFETY: the caller promises n items at p.
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Hands `s` to C as a string it frees with [`free_string`].
pub(crate) fn give_string(s: String) -> *mut c_char {
    std::ffi::CString::new(s.replace('\0', " "))
        .unwrap_or_default()
        .into_raw()
}

/// Frees a string [`give_string`] made; NULL does nothing.
///
/// # Safety
/// `p` is NULL or a string [`give_string`] made, not freed before and not used after.
pub(crate) unsafe fn free_string(p: *mut c_char) {
    if !p.is_null() {
        // SAFETY: the caller promises p came from CString::into_raw and is freed once.
        drop(unsafe { std::ffi::CString::from_raw(p) });
    }
}
