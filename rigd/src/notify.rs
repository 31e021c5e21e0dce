//! systemd readiness (`Type=notify`): one datagram to `$NOTIFY_SOCKET`.
//!
//! Written directly over a unix datagram socket (the protocol is a text line), so rigd needs no
//! libsystemd. Outside systemd `$NOTIFY_SOCKET` is unset and this does nothing.

use std::io;
use std::os::unix::net::{SocketAddr, UnixDatagram};

/// Sends `state` (such as `READY=1` or `STOPPING=1`) to the service manager, if any.
pub fn notify(state: &str) -> io::Result<()> {
    let Some(target) = std::env::var_os("NOTIFY_SOCKET") else {
        return Ok(());
    };
    send_to(&target.to_string_lossy(), state)
}

/// Sends `state` to the notify socket `target` (a path, or `@name` for an abstract socket).
pub fn send_to(target: &str, state: &str) -> io::Result<()> {
    let sock = UnixDatagram::unbound()?;
    if let Some(abstract_name) = target.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = SocketAddr::from_abstract_name(abstract_name.as_bytes())?;
        sock.send_to_addr(state.as_bytes(), &addr)?;
    } else {
        sock.send_to(state.as_bytes(), target)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn sends_ready_to_the_socket() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("notify");
        let rx = std::os::unix::net::UnixDatagram::bind(&p).unwrap();
        super::send_to(&p.to_string_lossy(), "READY=1").unwrap();
        let mut buf = [0u8; 64];
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(&buf[..n], b"READY=1");
    }
}
