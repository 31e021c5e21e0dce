//! Human-readable tables of rigd's answers.

use std::fmt::Write;

use rig_proto::messages::{ClientInfo, DeviceInfo, DeviceReport, GpuInfo, PathKind};

/// A table: a header row and rows, columns padded to their widest cell.
pub fn render(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.len()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(c.chars().count());
            }
        }
    }
    let mut out = String::new();
    let line = |out: &mut String, cells: &mut dyn Iterator<Item = &str>| {
        let mut first = true;
        let mut s = String::new();
        for (i, c) in cells.enumerate() {
            if !first {
                s.push_str("  ");
            }
            first = false;
            let _ = write!(s, "{c:<w$}", w = widths[i]);
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut out, &mut header.iter().copied());
    for r in rows {
        line(&mut out, &mut r.iter().map(String::as_str));
    }
    out
}

/// Bytes with a binary unit.
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

fn path(p: PathKind) -> &'static str {
    match p {
        PathKind::Sim => "sim",
        PathKind::Kfd => "kfd",
        PathKind::Vfio => "vfio",
    }
}

/// `rigctl gpus`.
pub fn gpus(g: &[GpuInfo]) -> String {
    if g.is_empty() {
        return "rigd serves no GPUs\n".into();
    }
    let rows: Vec<Vec<String>> = g
        .iter()
        .map(|g| {
            vec![
                g.index.to_string(),
                g.name.clone(),
                g.arch.clone(),
                path(g.path).into(),
                g.bus.clone().unwrap_or_else(|| "-".into()),
                if g.budget == 0 {
                    "-".into()
                } else {
                    bytes(g.budget)
                },
                if g.simulated {
                    "simulated".into()
                } else if let Some(why) = &g.unavailable {
                    format!("not drivable: {why}")
                } else {
                    "hardware".into()
                },
            ]
        })
        .collect();
    render(
        &["INDEX", "NAME", "ARCH", "PATH", "BUS", "MEMORY", "KIND"],
        &rows,
    )
}

/// `rigctl clients`.
pub fn clients(c: &[ClientInfo]) -> String {
    let rows: Vec<Vec<String>> = c
        .iter()
        .map(|c| {
            let devices: Vec<String> = c.devices.iter().map(|d| d.0.to_string()).collect();
            vec![
                c.pid.to_string(),
                c.uid.to_string(),
                c.gid.to_string(),
                c.program.clone(),
                if devices.is_empty() {
                    "-".into()
                } else {
                    devices.join(",")
                },
                bytes(c.bytes),
            ]
        })
        .collect();
    render(
        &["PID", "UID", "GID", "PROGRAM", "DEVICES", "MEMORY"],
        &rows,
    )
}

/// `rigctl devices`.
pub fn devices(d: &[DeviceInfo]) -> String {
    if d.is_empty() {
        return "no open devices\n".into();
    }
    let rows: Vec<Vec<String>> = d
        .iter()
        .map(|d| {
            vec![
                d.device.0.to_string(),
                d.gpu.to_string(),
                d.owner_pid.to_string(),
                bytes(d.memory.device),
                bytes(d.memory.pinned),
                bytes(d.memory.mapped),
                bytes(d.memory.host),
                d.lost
                    .clone()
                    .map_or_else(|| "live".into(), |w| format!("lost: {w}")),
            ]
        })
        .collect();
    render(
        &[
            "DEVICE",
            "GPU",
            "OWNER",
            "DEVICE-MEM",
            "PINNED",
            "MAPPED",
            "HOST-MAPPED",
            "STATE",
        ],
        &rows,
    )
}

/// `rigctl show DEVICE`.
pub fn device(r: &DeviceReport) -> String {
    let f = &r.facts;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "device {} on gpu {} (owner pid {})",
        r.info.device.0, r.info.gpu, r.info.owner_pid
    );
    let _ = writeln!(
        out,
        "state      {}",
        r.info
            .lost
            .as_ref()
            .map_or_else(|| "live".to_string(), |w| format!("lost: {w}"))
    );
    let _ = writeln!(
        out,
        "timeline   submitted {}  reached {}",
        r.submitted, r.reached
    );
    let _ = writeln!(
        out,
        "memory     device {}  pinned {}  mapped {}  host-mapped {}  ({} regions, {} images)",
        bytes(r.info.memory.device),
        bytes(r.info.memory.pinned),
        bytes(r.info.memory.mapped),
        bytes(r.info.memory.host),
        r.regions,
        r.images
    );
    let _ = writeln!(out, "\nfacts");
    let gc = f.gc;
    let sdma = f.sdma;
    let facts: Vec<(&str, String)> = vec![
        ("arch", f.arch.clone()),
        (
            "gc / sdma",
            format!(
                "{}.{}.{} / {}.{}.{}",
                gc.major, gc.minor, gc.stepping, sdma.major, sdma.minor, sdma.stepping
            ),
        ),
        ("budget", bytes(f.budget)),
        ("queues", f.queues.join(", ")),
        ("compute packets", format!("{:?}", f.compute)),
        (
            "copy engine",
            f.copy_engine.map_or("-".into(), |q| q.to_string()),
        ),
        ("completion", format!("{:?}", f.completion)),
        (
            "waits",
            format!("stores {} hosts {}", f.waits.stores, f.waits.hosts),
        ),
        ("may block", f.may_block.to_string()),
        ("hang ms", f.hang_ms.map_or("-".into(), |h| h.to_string())),
        ("maps host", f.maps_host.to_string()),
        ("host addresses", f.host_addresses.to_string()),
        ("alignment", f.alignment.to_string()),
        ("cache", f.cache_bytes.map_or("-".into(), bytes)),
        ("word", format!("{:#x}", f.word)),
        ("bus", f.bus.clone().unwrap_or_else(|| "-".into())),
        (
            "dies / wave / lds",
            format!(
                "{} / {} / {}",
                f.dies,
                f.wave_size,
                bytes(u64::from(f.lds_bytes))
            ),
        ),
        ("clock", format!("{} Hz", f.clock_hz)),
        (
            "largest rings",
            format!(
                "compute {}  copy {}",
                bytes(f.most_ring.compute),
                bytes(f.most_ring.copy)
            ),
        ),
    ];
    for (k, v) in facts {
        let _ = writeln!(out, "  {k:<18} {v}");
    }
    let _ = writeln!(out, "\nrings");
    let rows: Vec<Vec<String>> = r
        .rings
        .iter()
        .map(|q| {
            vec![
                q.queue.clone(),
                format!("{:?}", q.kind),
                q.generation.to_string(),
                bytes(q.bytes),
                q.read.to_string(),
                q.write.to_string(),
            ]
        })
        .collect();
    out.push_str(&render(
        &["QUEUE", "KIND", "GEN", "BYTES", "READ", "WRITE"],
        &rows,
    ));
    let _ = writeln!(out, "\nfaults");
    if r.faults.is_empty() {
        let _ = writeln!(out, "  none");
    }
    for f in &r.faults {
        let _ = writeln!(out, "  {f}");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_pad_columns() {
        let t = render(&["A", "LONG"], &[vec!["xyz".into(), "1".into()]]);
        assert_eq!(t, "A    LONG\nxyz  1\n");
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(4096), "4.0 KiB");
        assert_eq!(bytes(3 << 30), "3.0 GiB");
    }
}
