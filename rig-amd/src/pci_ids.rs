//! AMD GPUs by PCI id: their marketing names and processors, for people (`rigctl gpus`)
//! and for naming a GPU rigd found but cannot drive.
//!
//! The table is data (`rig-amd/data/pci_ids.tsv`), compiled in and parsed once; this
//! module owns reading it. It states no generation facts: [`crate::gpu`] does, by
//! processor name.

use std::sync::OnceLock;

/// AMD's PCI vendor id.
pub const AMD_VENDOR: u16 = 0x1002;

const TABLE: &str = include_str!("../data/pci_ids.tsv");

/// What the table says of one PCI id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Product {
    /// The marketing name, such as `AMD Radeon RX 7900 XTX`.
    pub name: &'static str,
    /// The processor, as LLVM names it (`gfx1100`).
    pub processor: &'static str,
}

#[derive(Debug)]
struct Row {
    device: u16,
    /// `None`: any revision not listed.
    revision: Option<u8>,
    product: Product,
}

fn rows() -> &'static [Row] {
    static ROWS: OnceLock<Vec<Row>> = OnceLock::new();
    ROWS.get_or_init(|| {
        TABLE
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .filter_map(|l| {
                let mut f = l.split('\t');
                let device = u16::from_str_radix(f.next()?, 16).ok()?;
                let revision = match f.next()? {
                    "*" => None,
                    r => Some(u8::from_str_radix(r, 16).ok()?),
                };
                let processor = f.next()?;
                let name = f.next()?;
                Some(Row {
                    device,
                    revision,
                    product: Product { name, processor },
                })
            })
            .collect()
    })
}

/// The product with AMD device id `device` and `revision`: the row of that revision, else
/// the device's row for any revision.
pub fn product(device: u16, revision: u8) -> Option<Product> {
    let rows = rows();
    rows.iter()
        .find(|r| r.device == device && r.revision == Some(revision))
        .or_else(|| {
            rows.iter()
                .find(|r| r.device == device && r.revision.is_none())
        })
        .map(|r| r.product)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_row_parses_and_names_a_processor() {
        let data_rows = TABLE
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .count();
        assert_eq!(rows().len(), data_rows, "a malformed row in pci_ids.tsv");
        for r in rows() {
            assert!(
                crate::gpu::parse_processor(r.product.processor).is_some(),
                "{:04x}: {}",
                r.device,
                r.product.processor
            );
        }
    }

    #[test]
    fn exact_revisions_win_over_any() {
        let xtx = product(0x744c, 0xc8).unwrap();
        assert_eq!(
            (xtx.name, xtx.processor),
            ("AMD Radeon RX 7900 XTX", "gfx1100")
        );
        assert_eq!(product(0x744c, 0xcc).unwrap().name, "AMD Radeon RX 7900 XT");
        assert_eq!(product(0x744c, 0x01).unwrap().name, "AMD Radeon (Navi 31)");
        assert_eq!(product(0x7550, 0xc0).unwrap().processor, "gfx1201");
        assert_eq!(product(0x0001, 0), None);
    }
}
