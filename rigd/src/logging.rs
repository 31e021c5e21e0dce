//! rigd's logging: where lines go and which pass.
//!
//! Under systemd, when `$JOURNAL_STREAM` names the very file stderr is (journald's contract,
//! systemd.exec(5)), events go to journald through its native protocol ([`Journal`]): each
//! gets a priority from its level, a MESSAGE that reads as the plain line does (the text
//! and then every field, `device lost device=3 reason=...`), and its fields (client, pid,
//! uid, device, gpu...) as journal fields besides; journald adds the one timestamp.
//! Otherwise they are plain lines on stderr. The filter is `RUST_LOG` when set, else
//! `daemon.log`, and SIGHUP may replace the latter ([`Logging::reload`]). This module owns
//! the subscriber; it decides nothing about what is logged, except that a field repeating
//! what a client sent (a program name, a reason, a kernel name, a message built from them)
//! goes through [`client_text`], so no line repeats client data unbounded.

use std::fmt::{self, Write as _};
use std::io::{IoSlice, Write as _};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixDatagram;

use tracing::field::{Field, Visit};
use tracing::{Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// The levels a filter may name, least verbose last.
pub const LEVELS: &str = "trace, debug, info, warn, error, off";

/// Errors of setting up logging.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `RUST_LOG` or `daemon.log` is not a filter.
    #[error(
        "{key} {value:?} is not a log filter ({reason}); write a level ({LEVELS}) or comma-separated TARGET=LEVEL directives such as `info,rigd=debug`{}",
        if *key == ENV { "; fix or unset it" } else { "" }
    )]
    Filter {
        /// Where the filter came from: `RUST_LOG` or `daemon.log`.
        key: &'static str,
        /// The filter.
        value: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The filter could not be swapped in.
    #[error("cannot replace the log filter")]
    Reload(#[source] reload::Error),
}

/// The environment variable whose filter wins over `daemon.log`.
const ENV: &str = "RUST_LOG";

/// Parses the filter `value` that `key` (`RUST_LOG`, `daemon.log`) holds. Stricter than
/// tracing's own syntax in one way: a directive without `=` must be a level, since a bare
/// word is taken as a target (`verbose`, `warning` would pass and silence every line).
fn parse(key: &'static str, value: &str) -> Result<EnvFilter, LogError> {
    let refuse = |reason: String| LogError::Filter {
        key,
        value: value.into(),
        reason,
    };
    for directive in value.split(',').map(str::trim) {
        let bare = !directive.is_empty() && !directive.contains(['=', '[']);
        if bare
            && directive
                .parse::<tracing::level_filters::LevelFilter>()
                .is_err()
        {
            return Err(refuse(format!(
                "{directive:?} is not a level; a target alone would show only its own lines"
            )));
        }
    }
    // The parser's text already carries its source's, so only the text is kept.
    EnvFilter::builder()
        .parse(value)
        .map_err(|e| refuse(e.to_string()))
}

/// Parses a `daemon.log` filter, naming the key when it is not one.
pub fn parse_filter(value: &str) -> Result<EnvFilter, LogError> {
    parse("daemon.log", value)
}

/// `RUST_LOG`'s filter when it is set (and not empty); `rigd --check` checks it as a start
/// does.
pub fn env_filter() -> Result<Option<(String, EnvFilter)>, LogError> {
    match std::env::var(ENV).ok().filter(|v| !v.is_empty()) {
        Some(v) => parse(ENV, &v).map(|f| Some((v, f))),
        None => Ok(None),
    }
}

/// Where log lines go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sink {
    /// journald's native protocol.
    Journal,
    /// Plain lines on stderr.
    Stderr,
}

/// The installed subscriber: its sink, and the handle that replaces its filter.
#[derive(Debug)]
pub struct Logging {
    handle: reload::Handle<EnvFilter, Registry>,
    env: Option<String>,
    filter: String,
    sink: Sink,
}

impl Logging {
    /// Installs the global subscriber with `config_filter` (`daemon.log`) unless `RUST_LOG`
    /// is set. Call once, before anything logs.
    pub fn init(config_filter: &str) -> Result<Self, LogError> {
        let (env, filter) = match env_filter()? {
            Some((v, f)) => (Some(v), f),
            None => (None, parse_filter(config_filter)?),
        };
        let (filter_layer, handle) = reload::Layer::new(filter);
        let journal = if journal_is_stderr() {
            match Journal::new() {
                Ok(j) => Some(j),
                Err(e) => {
                    eprintln!(
                        "rigd: cannot reach journald at {JOURNAL_SOCKET} ({e}); logging plain lines to stderr"
                    );
                    None
                }
            }
        } else {
            None
        };
        let sink = if journal.is_some() {
            Sink::Journal
        } else {
            Sink::Stderr
        };
        let plain = journal.is_none().then(|| {
            tracing_subscriber::fmt::layer()
                .with_writer(std::io::stderr)
                .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        });
        tracing_subscriber::registry()
            .with(filter_layer)
            .with(journal)
            .with(plain)
            .init();
        Ok(Self {
            handle,
            env,
            filter: config_filter.into(),
            sink,
        })
    }

    /// Where lines go.
    pub fn sink(&self) -> Sink {
        self.sink
    }

    /// Replaces the filter with `config_filter` (a reloaded `daemon.log`). Returns what
    /// changed for the reload's log line: `None` when nothing did, or `RUST_LOG` is set
    /// (it wins over the configuration until rigd restarts without it).
    pub fn reload(&mut self, config_filter: &str) -> Result<Option<String>, LogError> {
        if self.env.is_some() || config_filter == self.filter {
            return Ok(None);
        }
        let filter = parse_filter(config_filter)?;
        self.handle.reload(filter).map_err(LogError::Reload)?;
        let changed = format!("daemon.log {:?} -> {:?}", self.filter, config_filter);
        self.filter = config_filter.into();
        Ok(Some(changed))
    }
}

/// journald's socket for its native protocol (systemd-journald.service(8)).
const JOURNAL_SOCKET: &str = "/run/systemd/journal/socket";

/// The journald layer: one native-protocol entry per event.
#[derive(Debug)]
pub struct Journal {
    socket: UnixDatagram,
}

impl Journal {
    fn new() -> std::io::Result<Self> {
        let socket = UnixDatagram::unbound()?;
        socket.connect(JOURNAL_SOCKET)?;
        Ok(Self { socket })
    }

    /// Sends `entry`: as one datagram, or, past the socket's datagram size, as a sealed
    /// memfd journald reads it from (the protocol's route for large entries).
    fn send(&self, entry: &[u8]) -> std::io::Result<()> {
        match self.socket.send(entry) {
            Err(e) if e.raw_os_error() == Some(libc::EMSGSIZE) => {}
            other => return other.map(drop),
        }
        use nix::fcntl::{FcntlArg, SealFlag, fcntl};
        use nix::sys::memfd::{MemFdCreateFlag, memfd_create};
        use nix::sys::socket::{ControlMessage, MsgFlags, UnixAddr, sendmsg};
        let fd = memfd_create(
            c"rigd-journal",
            MemFdCreateFlag::MFD_CLOEXEC | MemFdCreateFlag::MFD_ALLOW_SEALING,
        )?;
        let mut file = std::fs::File::from(fd);
        file.write_all(entry)?;
        let seals = SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_WRITE
            | SealFlag::F_SEAL_SEAL;
        fcntl(file.as_raw_fd(), FcntlArg::F_ADD_SEALS(seals))?;
        let fds = [file.as_raw_fd()];
        sendmsg::<UnixAddr>(
            self.socket.as_raw_fd(),
            &[] as &[IoSlice<'_>],
            &[ControlMessage::ScmRights(&fds)],
            MsgFlags::empty(),
            None,
        )?;
        Ok(())
    }
}

impl<S: Subscriber> tracing_subscriber::Layer<S> for Journal {
    fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
        // Nowhere is left to say a log line was lost.
        let _ = self.send(&journal_entry(event));
    }
}

/// An event's message and its other fields, as the plain line shows them.
#[derive(Default)]
struct Fields {
    message: String,
    fields: Vec<(&'static str, String)>,
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.record_debug(field, &format_args!("{value}"));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        if field.name() == "message" {
            self.message = format!("{value:?}");
        } else {
            self.fields.push((field.name(), format!("{value:?}")));
        }
    }
}

/// `event` as a journal entry (journald's native protocol): MESSAGE, the text and every
/// field as the plain line shows them; PRIORITY from the level; SYSLOG_IDENTIFIER `rigd`;
/// TARGET, CODE_FILE and CODE_LINE; and each field as `RIG_<NAME>`.
fn journal_entry(event: &Event<'_>) -> Vec<u8> {
    let mut f = Fields::default();
    event.record(&mut f);
    let meta = event.metadata();
    let mut message = f.message;
    for (name, value) in &f.fields {
        // PANIC-free: writing to a String does not fail.
        let _ = write!(message, " {name}={value}");
    }
    let priority = match *meta.level() {
        Level::ERROR => "3",
        Level::WARN => "4",
        Level::INFO => "6",
        Level::DEBUG | Level::TRACE => "7",
    };
    let mut entry = Vec::with_capacity(256 + message.len());
    put_field(&mut entry, "MESSAGE", message.trim_start());
    put_field(&mut entry, "PRIORITY", priority);
    put_field(&mut entry, "SYSLOG_IDENTIFIER", "rigd");
    put_field(&mut entry, "TARGET", meta.target());
    if let Some(file) = meta.file() {
        put_field(&mut entry, "CODE_FILE", file);
    }
    if let Some(line) = meta.line() {
        put_field(&mut entry, "CODE_LINE", &line.to_string());
    }
    for (name, value) in &f.fields {
        let name: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_uppercase()
                } else {
                    '_'
                }
            })
            .collect();
        put_field(&mut entry, &format!("RIG_{name}"), value);
    }
    entry
}

/// One field of a native-protocol entry: `NAME=value`, or, when the value holds a newline,
/// the name, a newline, its length (64-bit little-endian) and the bytes.
fn put_field(entry: &mut Vec<u8>, name: &str, value: &str) {
    entry.extend_from_slice(name.as_bytes());
    if value.contains('\n') {
        entry.push(b'\n');
        entry.extend_from_slice(&(value.len() as u64).to_le_bytes());
    } else {
        entry.push(b'=');
    }
    entry.extend_from_slice(value.as_bytes());
    entry.push(b'\n');
}

/// Whether stderr is the stream `$JOURNAL_STREAM` names (`DEVICE:INODE`), as systemd sets it
/// for a service whose stderr goes to the journal; a redirected stderr is not.
fn journal_is_stderr() -> bool {
    let Some(v) = std::env::var_os("JOURNAL_STREAM") else {
        return false;
    };
    let Some((dev, ino)) = v.to_str().and_then(|s| s.split_once(':')) else {
        return false;
    };
    let (Ok(dev), Ok(ino)) = (dev.parse::<u64>(), ino.parse::<u64>()) else {
        return false;
    };
    use std::os::unix::fs::MetadataExt;
    let stderr = std::io::stderr();
    let Ok(f) = std::os::fd::AsFd::as_fd(&stderr).try_clone_to_owned() else {
        return false;
    };
    std::fs::File::from(f)
        .metadata()
        .is_ok_and(|m| m.dev() == dev && m.ino() == ino)
}

/// The most bytes of client data one log field repeats. The protocol bounds every string a
/// client sends ([`rig_proto::MOST_PROGRAM`] and its siblings); this bounds what a line
/// repeats of them whatever those are, messages built from them included.
pub const MOST_LOGGED: usize = 512;

/// `text` (which a client sent, or which names what it sent) as a log field: cut to
/// [`MOST_LOGGED`] bytes at a character boundary and marked with an ellipsis when cut, and
/// its control characters escaped, so a client can neither flood the log nor forge a line.
pub fn client_text(text: &str) -> ClientText<'_> {
    ClientText(text)
}

/// What [`client_text`] gives: formats as the bounded, escaped text.
#[derive(Debug, Clone, Copy)]
pub struct ClientText<'a>(&'a str);

impl fmt::Display for ClientText<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kept = rig_proto::cut(self.0, MOST_LOGGED);
        for c in kept.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                f.write_char(c)?;
            }
        }
        if kept.len() < self.0.len() {
            f.write_char('…')?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The fields of a native-protocol entry made only of `NAME=value` lines.
    fn fields_of(entry: &[u8]) -> Vec<(String, String)> {
        String::from_utf8(entry.to_vec())
            .unwrap()
            .lines()
            .map(|l| {
                let (k, v) = l.split_once('=').unwrap();
                (k.to_owned(), v.to_owned())
            })
            .collect()
    }

    #[test]
    fn a_journal_message_reads_as_the_plain_line_and_keeps_its_fields() {
        use std::sync::{Arc, Mutex};
        struct Capture(Arc<Mutex<Vec<Vec<u8>>>>);
        impl<S: Subscriber> tracing_subscriber::Layer<S> for Capture {
            fn on_event(&self, event: &Event<'_>, _: Context<'_, S>) {
                self.0.lock().unwrap().push(journal_entry(event));
            }
        }
        let entries = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(Capture(entries.clone()));
        tracing::subscriber::with_default(subscriber, || {
            tracing::warn!(device = 3, reason = %"hang past 2000 ms", "device lost");
            tracing::error!("two\nlines");
        });
        let entries = entries.lock().unwrap();
        let lost = fields_of(&entries[0]);
        let get = |k: &str| lost.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(
            get("MESSAGE"),
            Some("device lost device=3 reason=hang past 2000 ms")
        );
        assert_eq!(get("PRIORITY"), Some("4"));
        assert_eq!(get("SYSLOG_IDENTIFIER"), Some("rigd"));
        assert_eq!(get("RIG_DEVICE"), Some("3"));
        assert_eq!(get("RIG_REASON"), Some("hang past 2000 ms"));
        // A value with a newline is length-encoded.
        let two = &entries[1];
        let mut want = b"MESSAGE\n".to_vec();
        want.extend_from_slice(&9u64.to_le_bytes());
        want.extend_from_slice(b"two\nlines\n");
        assert!(two.starts_with(&want), "{two:?}");
    }

    #[test]
    fn a_level_typo_is_refused_with_the_levels() {
        for typo in ["verbose", "err", "warning", "info,rigd=loud", "rigd"] {
            let e = parse_filter(typo).unwrap_err().to_string();
            assert!(e.contains("daemon.log") && e.contains(LEVELS), "{e}");
        }
        // The parser's reason once, not its source's text again.
        let e = parse("RUST_LOG", "rigd=loud").unwrap_err().to_string();
        assert!(e.contains("RUST_LOG") && e.contains("unset it"), "{e}");
        assert_eq!(e.matches("expected one of").count(), 1, "{e}");
        for good in [
            "info",
            "WARN",
            "off",
            "info,rigd=debug",
            "rigd::server=trace",
            "",
        ] {
            parse_filter(good).unwrap();
        }
    }

    #[test]
    fn client_text_is_bounded_escaped_and_marked_when_cut() {
        assert_eq!(client_text("rig-demo").to_string(), "rig-demo");
        assert_eq!(client_text("a\nb").to_string(), "a\\nb");
        let long = "é".repeat(MOST_LOGGED);
        let shown = client_text(&long).to_string();
        assert!(shown.ends_with('…'), "{shown}");
        assert_eq!(shown.len(), MOST_LOGGED + '…'.len_utf8());
        let exact = "x".repeat(MOST_LOGGED);
        assert_eq!(client_text(&exact).to_string(), exact);
    }
}
