//! Arbitrary bytes to the PCI path's table parsers: as a firmware file of every kind and as
//! an IP discovery binary, an error or a parse, never a panic. What parses hands out only
//! bytes inside the input, and a parsed discovery table builds back to a binary that parses
//! to the same table.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rig_amd::discovery::{Blocks, Discovery};
use rig_amd::ucode::{Firmware, Kind};

const KINDS: [Kind; 9] = [
    Kind::Cp,
    Kind::Rlc,
    Kind::Mes,
    Kind::Imu,
    Kind::Sdma,
    Kind::Sos,
    Kind::Toc,
    Kind::Ta,
    Kind::Smc,
];

fuzz_target!(|data: &[u8]| {
    for kind in KINDS {
        if let Ok(fw) = Firmware::parse(kind, data) {
            assert_eq!(fw.image().len() as u32, fw.common.image.size);
            for p in fw.sos_parts(true) {
                let _ = fw.slice(p.region);
            }
        }
    }
    if let Ok(d) = Discovery::parse(data) {
        let _ = Blocks::of(&d);
        if let Ok(bytes) = d.to_bytes() {
            assert_eq!(Discovery::parse(&bytes).as_ref(), Ok(&d));
        }
    }
});
