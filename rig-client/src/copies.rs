//! Copies and fills on `COPY:0` as SDMA packets.
//!
//! This module turns a copy part into packets through [`rig_amd::copy_plan`] (linear
//! copies of each row in chunks of the engine's most bytes per packet; boxes as
//! sub-window copies where they fit), and a fill into CONST_FILLs of its whole dwords; the
//! fill's unaligned ends are copied from the argument segment by [`crate::place`], which
//! knows the segment's address only at submit. Packet formats are [`rig_amd::sdma`]'s.

use rig_amd::{copy_plan, sdma};

use crate::error::{Error, Result};
use crate::place::{Target, encode};
use crate::types::CopyBox;

/// Appends the packets of a copy of box `b` from `src` to `dst`, as
/// [`rig_amd::copy_plan`] plans it.
pub(crate) fn copy(t: &Target, src: u64, dst: u64, b: CopyBox, out: &mut Vec<u32>) -> Result<()> {
    let limits = copy_plan::Limits {
        linear_bytes: t.linear,
        ..copy_plan::Limits::of_layout(t.sdma)
    };
    let planned = copy_plan::CopyBox {
        src,
        dst,
        width: b.width,
        rows: b.rows,
        src_pitch: b.src_pitch,
        dst_pitch: b.dst_pitch,
    };
    let steps = copy_plan::copy(&limits, &planned)
        .map_err(|e| Error::Invalid(format!("the copy cannot be planned: {e}")))?;
    for step in steps {
        let at = out.len();
        out.resize(at + step.words(), 0);
        let n = step.encode(t.sdma, &mut out[at..]).map_err(encode)?;
        out.truncate(at + n);
    }
    Ok(())
}

/// How a fill of `bytes` at `dst` splits: unaligned bytes before the first whole dword,
/// whole dwords, and bytes after the last.
pub(crate) fn fill_split(dst: u64, bytes: u64) -> (u64, u64, u64) {
    let head = ((4 - dst % 4) % 4).min(bytes);
    let body = (bytes - head) / 4 * 4;
    (head, body, bytes - head - body)
}

/// Appends CONST_FILLs of `bytes` (a multiple of 4) at the dword-aligned `dst`.
pub(crate) fn fill_dwords(
    t: &Target,
    mut dst: u64,
    mut bytes: u64,
    value: u32,
    out: &mut Vec<u32>,
) -> Result<()> {
    let most = t.linear / 4 * 4;
    while bytes > 0 {
        let n = bytes.min(most);
        let at = out.len();
        out.resize(at + sdma::ConstFill::WORDS, 0);
        sdma::ConstFill::dwords(dst, value, n)
            .encode(t.sdma, &mut out[at..])
            .map_err(encode)?;
        dst += n;
        bytes -= n;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rig_amd::gpu::IpVersion;

    fn target(linear: u64) -> Target {
        let gpu = rig_amd::gpu::Gpu::by_name("gfx1100").unwrap();
        Target {
            gpu,
            hal: gpu.hal(),
            sdma: sdma::Layout::of(IpVersion::new(6, 0, 0)),
            compute: rig_proto::QueueKind::Pm4,
            linear,
        }
    }

    fn decode(words: &[u32]) -> Vec<sdma::Packet> {
        sdma::packets(sdma::Layout::of(IpVersion::new(6, 0, 0)), words)
            .map(|p| p.unwrap().1)
            .collect()
    }

    #[test]
    fn boxes_take_sub_windows_where_the_seed_allows() {
        let t = target(1 << 30);
        let mut w = Vec::new();
        let b = CopyBox {
            width: 48,
            rows: 20_000,
            src_pitch: 64,
            dst_pitch: 96,
        };
        copy(&t, 0x1000, 0x9_0000, b, &mut w).unwrap();
        let p = decode(&w);
        // 16-byte elements; rows split at 16384 a packet.
        assert_eq!(p.len(), 2);
        let sdma::Packet::SubWindow(first) = p[0] else {
            panic!("{:?}", p[0])
        };
        assert_eq!(first.log2_element, 4);
        assert_eq!((first.width, first.height), (3, 16384));
        assert_eq!((first.src.pitch, first.dst.pitch), (4, 6));
        let sdma::Packet::SubWindow(second) = p[1] else {
            panic!("{:?}", p[1])
        };
        assert_eq!(second.height, 20_000 - 16384);
        assert_eq!(second.src.address, 0x1000 + 16384 * 64);
        assert_eq!(second.dst.address, 0x9_0000 + 16384 * 96);
        // An unaligned side within a dword: 1-byte elements from x = 3.
        let mut w = Vec::new();
        let b = CopyBox {
            width: 5,
            rows: 4,
            src_pitch: 8,
            dst_pitch: 12,
        };
        copy(&t, 0x1003, 0x2000, b, &mut w).unwrap();
        let sdma::Packet::SubWindow(s) = decode(&w)[0] else {
            panic!()
        };
        assert_eq!((s.log2_element, s.src.address, s.src.x), (0, 0x1000, 3));
        // A pitch that is not a multiple of 4: linear rows.
        let mut w = Vec::new();
        let b = CopyBox {
            width: 5,
            rows: 4,
            src_pitch: 9,
            dst_pitch: 12,
        };
        copy(&t, 0x1000, 0x2000, b, &mut w).unwrap();
        let p = decode(&w);
        assert_eq!(p.len(), 4);
        assert!(
            matches!(p[3], sdma::Packet::CopyLinear(l) if l.src == 0x1000 + 27 && l.dst == 0x2000 + 36 && l.bytes == 5)
        );
    }

    #[test]
    fn long_copies_and_fills_split_at_the_engines_most_bytes() {
        let t = target(4 << 20);
        let mut w = Vec::new();
        copy(
            &t,
            0,
            1 << 32,
            CopyBox {
                width: (9 << 20) + 1,
                rows: 1,
                src_pitch: 0,
                dst_pitch: 0,
            },
            &mut w,
        )
        .unwrap();
        let sizes: Vec<u64> = decode(&w)
            .iter()
            .map(|p| match p {
                sdma::Packet::CopyLinear(l) => l.bytes,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(sizes, vec![4 << 20, 4 << 20, (1 << 20) + 1]);
        let mut w = Vec::new();
        fill_dwords(&t, 0x1000, 5 << 20, 0xabab_abab, &mut w).unwrap();
        let p = decode(&w);
        assert_eq!(p.len(), 2);
        assert!(
            matches!(p[1], sdma::Packet::ConstFill(f) if f.dst == 0x1000 + (4 << 20) && f.bytes == 1 << 20 && f.value == 0xabab_abab)
        );
    }

    #[test]
    fn fills_split_at_dwords() {
        assert_eq!(fill_split(0x1000, 16), (0, 16, 0));
        assert_eq!(fill_split(0x1001, 16), (3, 12, 1));
        assert_eq!(fill_split(0x1003, 2), (1, 0, 1));
        assert_eq!(fill_split(0x1001, 2), (2, 0, 0));
        assert_eq!(fill_split(0x1002, 7), (2, 4, 1));
    }
}
