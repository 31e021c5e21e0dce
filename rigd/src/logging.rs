//! rigd's logging: where lines go and which pass.
//!
//! Under systemd, when `$JOURNAL_STREAM` names the very file stderr is (journald's contract,
//! systemd.exec(5)), events go to journald through its native protocol (`tracing-journald`):
//! each gets a priority from its level and keeps its fields (client, pid, uid, device,
//! gpu...) as journal fields, and journald adds the one timestamp. Otherwise they are plain
//! lines on stderr. The filter is `RUST_LOG` when set, else `daemon.log`, and SIGHUP may
//! replace the latter ([`Logging::reload`]). This module owns the subscriber; it decides
//! nothing about what is logged, except that a field repeating what a client sent (a
//! program name, a reason, a kernel name, a message built from them) goes through
//! [`client_text`], so no line repeats client data unbounded.

use std::fmt::{self, Write as _};

use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;
use tracing_subscriber::{EnvFilter, Registry, reload};

/// Errors of setting up logging.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// `RUST_LOG` is not a filter.
    #[error(
        "RUST_LOG {value:?} is not a log filter (tracing's EnvFilter syntax, such as `info` or `rigd=debug`); fix or unset it"
    )]
    Env {
        /// The variable's value.
        value: String,
        /// The parser's reason.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// A filter (`daemon.log`) is not valid.
    #[error(
        "daemon.log {value:?} is not a log filter (tracing's EnvFilter syntax, such as `info` or `rigd=debug`)"
    )]
    Filter {
        /// The configured filter.
        value: String,
        /// The parser's reason.
        #[source]
        source: tracing_subscriber::filter::ParseError,
    },
    /// The filter could not be swapped in.
    #[error("cannot replace the log filter")]
    Reload(#[source] reload::Error),
}

/// Parses a `daemon.log` filter, naming the key when it is not one.
pub fn parse_filter(value: &str) -> Result<EnvFilter, LogError> {
    EnvFilter::builder()
        .parse(value)
        .map_err(|source| LogError::Filter {
            value: value.into(),
            source,
        })
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
        let env = std::env::var("RUST_LOG").ok().filter(|v| !v.is_empty());
        let filter = match &env {
            Some(v) => EnvFilter::builder()
                .parse(v)
                .map_err(|source| LogError::Env {
                    value: v.clone(),
                    source,
                })?,
            None => parse_filter(config_filter)?,
        };
        let (filter_layer, handle) = reload::Layer::new(filter);
        let journal = if journal_is_stderr() {
            match tracing_journald::layer() {
                Ok(l) => Some(
                    l.with_syslog_identifier("rigd".into())
                        .with_field_prefix(Some("RIG".into())),
                ),
                Err(e) => {
                    eprintln!("rigd: cannot reach journald ({e}); logging plain lines to stderr");
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
