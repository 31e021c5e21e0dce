//! The bounds of every string a client sends, stated once.
//!
//! A frame may be 16 MiB ([`crate::MAX_FRAME`]), room for a code object; nothing else a
//! client sends needs a fraction of that, and rigd keeps some of it for as long as the
//! client lives (its program name) or its device does (a stop's reason). So each string a
//! request carries has a small bound of its own, checked by rigd as soon as the message is
//! decoded, before anything is kept: a hello past its bounds is refused, a request past
//! them is answered [`ErrorCode::BadRequest`] with the bound named ([`TooLong`]). Clients
//! cut their own strings ([`cut`]) where a longer one would be no fault of the program
//! (a long `argv[0]`, a chain of lost producers).
//!
//! A code object ([`Request::LoadImage`]) is bytes, not a string: `images.max_bytes` and
//! the frame bound it.

use crate::messages::{ErrorCode, ErrorReply, Hello, Request};

/// The most bytes of the program name a [`Hello`] gives: what `rigctl clients` shows, kept
/// for the life of the connection.
pub const MOST_PROGRAM: usize = 256;

/// The most bytes of a hello's payload. Well past a hello whose name is at
/// [`MOST_PROGRAM`] (under 300 bytes), so a client of another version still reads that
/// versions differ; a header announcing more is refused before its payload is read.
pub const MOST_HELLO: usize = 4096;

/// The most bytes of a kernel's name in [`Request::ResolveEntry`] and [`Request::Prepare`]:
/// room for C++ mangled names of templated kernels.
pub const MOST_ENTRY_NAME: usize = 4096;

/// The most bytes of the reason a [`Request::StopDevice`] gives: the bound of a fault's
/// detail ([`crate::MOST_FAULT_DETAIL`]), since rigd keeps the reason as one for as long as
/// the device.
pub const MOST_STOP_REASON: usize = crate::messages::MOST_FAULT_DETAIL;

/// The most bytes of a grant's id ([`crate::GrantSpec::id`]), a directory name.
pub const MOST_GRANT_ID: usize = 64;

/// The most bytes of each string of a grant's [`crate::Holder`]: a Kubernetes name
/// (a DNS subdomain is at most 253).
pub const MOST_HOLDER_NAME: usize = 253;

/// The most device ids a grant's [`crate::Holder`] lists: the plugin's most units of a GPU.
pub const MOST_GRANT_DEVICES: usize = 4096;

/// The most GPUs a grant names.
pub const MOST_GRANT_GPUS: usize = 64;

/// What a cut string is marked with: [`cut_marked`] leaves room for it within the bound.
pub const CUT_MARK: &str = " (cut)";

/// A string a client sent is longer than its bound.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "{what} is {len} {unit}, more than the {most} {unit} rig_proto::{limit} allows; send at most {most} {unit} (rig-client cuts its own strings)"
)]
pub struct TooLong {
    /// The string, such as "the program name of a hello".
    pub what: &'static str,
    /// Its bytes.
    pub len: usize,
    /// The bound.
    pub most: usize,
    /// The bound's name in this crate, such as `MOST_PROGRAM`.
    pub limit: &'static str,
    /// What `len` and `most` count: `bytes` for a string, `items` for a list.
    pub unit: &'static str,
}

impl From<TooLong> for ErrorReply {
    fn from(e: TooLong) -> Self {
        ErrorReply::new(ErrorCode::BadRequest, e.to_string())
    }
}

fn within(what: &'static str, s: &str, most: usize, limit: &'static str) -> Result<(), TooLong> {
    if s.len() > most {
        return Err(TooLong {
            what,
            len: s.len(),
            most,
            limit,
            unit: "bytes",
        });
    }
    Ok(())
}

impl Hello {
    /// Checks the program name against [`MOST_PROGRAM`].
    pub fn check_bounds(&self) -> Result<(), TooLong> {
        within(
            "the program name of a hello",
            &self.program,
            MOST_PROGRAM,
            "MOST_PROGRAM",
        )
    }
}

impl Request {
    /// Checks every string the request carries against its bound.
    pub fn check_bounds(&self) -> Result<(), TooLong> {
        match self {
            Request::ResolveEntry { name, .. } | Request::Prepare { name, .. } => within(
                "the kernel name of an entry",
                name,
                MOST_ENTRY_NAME,
                "MOST_ENTRY_NAME",
            ),
            Request::StopDevice {
                fault: Some(why), ..
            } => within(
                "the reason of a stop",
                why,
                MOST_STOP_REASON,
                "MOST_STOP_REASON",
            ),
            Request::Grant(spec) => spec.check_bounds(),
            Request::Revoke { id } => within("a grant's id", id, MOST_GRANT_ID, "MOST_GRANT_ID"),
            _ => Ok(()),
        }
    }
}

impl crate::GrantSpec {
    /// Checks the id, the holder's strings and the lists against their bounds.
    pub fn check_bounds(&self) -> Result<(), TooLong> {
        within("a grant's id", &self.id, MOST_GRANT_ID, "MOST_GRANT_ID")?;
        let h = &self.holder;
        let name = |what, s: &str| within(what, s, MOST_HOLDER_NAME, "MOST_HOLDER_NAME");
        name("a grant's resource", &h.resource)?;
        for (what, s) in [
            ("a grant's namespace", &h.namespace),
            ("a grant's pod", &h.pod),
            ("a grant's container", &h.container),
        ] {
            if let Some(s) = s {
                name(what, s)?;
            }
        }
        for d in &h.devices {
            name("a grant's device id", d)?;
        }
        count(
            "a grant's device ids",
            h.devices.len(),
            MOST_GRANT_DEVICES,
            "MOST_GRANT_DEVICES",
        )?;
        count(
            "a grant's gpus",
            self.gpus.len(),
            MOST_GRANT_GPUS,
            "MOST_GRANT_GPUS",
        )
    }
}

/// A list of `len` items against its bound (said in items, not bytes).
fn count(what: &'static str, len: usize, most: usize, limit: &'static str) -> Result<(), TooLong> {
    if len > most {
        return Err(TooLong {
            what,
            len,
            most,
            limit,
            unit: "items",
        });
    }
    Ok(())
}

/// The longest prefix of `s` of at most `most` bytes that ends at a character boundary.
pub fn cut(s: &str, most: usize) -> &str {
    if s.len() <= most {
        return s;
    }
    let mut end = most;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// `s` itself if it fits in `most` bytes, else cut at a character boundary and marked with
/// [`CUT_MARK`], at most `most` bytes in all.
pub fn cut_marked(mut s: String, most: usize) -> String {
    if s.len() > most {
        let keep = cut(&s, most.saturating_sub(CUT_MARK.len())).len();
        s.truncate(keep);
        s.push_str(cut(CUT_MARK, most - keep));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::messages::{DeviceId, ImageId};
    use proptest::prelude::*;

    #[test]
    fn each_string_is_checked_against_its_own_bound() {
        let entry = |n: usize| Request::ResolveEntry {
            device: DeviceId(1),
            image: ImageId(1),
            name: "k".repeat(n),
        };
        assert!(entry(MOST_ENTRY_NAME).check_bounds().is_ok());
        let e = entry(MOST_ENTRY_NAME + 1).check_bounds().unwrap_err();
        assert_eq!((e.len, e.most, e.limit), (4097, 4096, "MOST_ENTRY_NAME"));
        let stop = |n: usize| Request::StopDevice {
            device: DeviceId(1),
            last: 0,
            fault: Some("r".repeat(n)),
        };
        assert!(stop(MOST_STOP_REASON).check_bounds().is_ok());
        let reply = ErrorReply::from(stop(MOST_STOP_REASON + 1).check_bounds().unwrap_err());
        assert_eq!(reply.code, ErrorCode::BadRequest);
        assert!(
            reply.message.contains("MOST_STOP_REASON") && reply.message.contains("1024"),
            "{}",
            reply.message
        );
        let hello = |n: usize| Hello {
            magic: crate::MAGIC,
            version: crate::VERSION,
            program: "p".repeat(n),
        };
        assert!(hello(MOST_PROGRAM).check_bounds().is_ok());
        assert_eq!(hello(257).check_bounds().unwrap_err().limit, "MOST_PROGRAM");
        // A hello at the bound is well inside its frame's bound.
        assert!(crate::frame::encode(&hello(MOST_PROGRAM)).unwrap().len() < MOST_HELLO / 8);
    }

    #[test]
    fn a_reader_bounded_for_a_hello_refuses_from_the_header() {
        let mut r = crate::frame::Reader::new();
        r.set_most(Some(MOST_HELLO));
        let header = crate::frame::Header {
            len: crate::MAX_FRAME,
            fds: 0,
        }
        .encode()
        .unwrap();
        r.spare()[..8].copy_from_slice(&header);
        match r.advance(8, Vec::new()) {
            Err(crate::FrameError::TooLarge { len, max }) => {
                assert_eq!((len, max), (crate::MAX_FRAME, MOST_HELLO));
            }
            other => panic!("{other:?}"),
        }
        // Unbounded again, the same header is a frame to wait for.
        r.set_most(None);
        r.spare()[..8].copy_from_slice(&header);
        assert!(matches!(r.advance(8, Vec::new()), Ok(None)));
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..Default::default() })]

        /// A cut is a prefix within the bound, at a character boundary, and as long as it
        /// can be; a marked cut fits the bound too.
        #[test]
        fn cuts_are_the_longest_prefix_within_the_bound(s in "\\PC{0,80}", most in 0usize..200) {
            let c = cut(&s, most);
            prop_assert!(c.len() <= most && s.starts_with(c));
            if c.len() < s.len() {
                let next = s[c.len()..].chars().next().unwrap();
                prop_assert!(c.len() + next.len_utf8() > most);
            }
            let m = cut_marked(s.clone(), most);
            if s.len() <= most {
                prop_assert_eq!(&m, &s);
            } else {
                prop_assert!(m.len() <= most);
            }
        }

        /// Whatever the lengths, a request passes exactly when each string is within its
        /// bound.
        #[test]
        fn check_bounds_agrees_with_the_lengths(n in 0usize..9000, k in 0u8..3) {
            let s = "a".repeat(n);
            let (r, most) = match k {
                0 => (Request::Prepare { device: DeviceId(0), image: ImageId(0), name: s }, MOST_ENTRY_NAME),
                1 => (Request::StopDevice { device: DeviceId(0), last: 1, fault: Some(s) }, MOST_STOP_REASON),
                _ => (Request::ResolveEntry { device: DeviceId(0), image: ImageId(0), name: s }, MOST_ENTRY_NAME),
            };
            prop_assert_eq!(r.check_bounds().is_ok(), n <= most);
        }
    }
}
