//! Human-readable tables of rigd's answers.

use std::fmt::Write;

use rig_proto::messages::{
    ClientCost, DaemonStatus, DeviceInfo, DeviceReport, GpuInfo, GpuStatus, PathKind, ProcessInfo,
};

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

/// Rows under a header: printed as a table ([`render_grid`]) or CSV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grid {
    /// Column names.
    pub header: Vec<&'static str>,
    /// One row per thing, as many cells as the header.
    pub rows: Vec<Vec<String>>,
    /// Printed instead of an empty table.
    pub empty: &'static str,
}

/// A grid as a padded table, or its `empty` line when it has no rows.
pub fn render_grid(g: &Grid) -> String {
    if g.rows.is_empty() && !g.empty.is_empty() {
        return format!("{}\n", g.empty);
    }
    render(&g.header, &g.rows)
}

/// A GPU as `rigctl gpus` shows it: what `ListGpus` says, and its figures when this user
/// may read them.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Gpu {
    /// The list's entry.
    #[serde(flatten)]
    pub info: GpuInfo,
    /// Its figures (`None` for users who may not inspect).
    pub status: Option<GpuStatus>,
}

fn dash(v: Option<String>) -> String {
    v.unwrap_or_else(|| "-".into())
}

/// What a client costs on a KFD GPU and the bound: `44.0 MiB/queue, 8 at once, 93 queues fit`.
pub fn client_cost(c: &ClientCost) -> String {
    format!(
        "{}/queue, {} at once, {} queues fit",
        bytes(c.queue_bytes),
        c.at_once,
        c.queues_fit
    )
}

/// `rigctl gpus` (and the top half of `rigctl top`).
pub fn gpus(g: &[Gpu]) -> Grid {
    let rows = g
        .iter()
        .map(|g| {
            let s = g.status.as_ref();
            let i = &g.info;
            vec![
                i.index.to_string(),
                i.name.clone(),
                dash(s.and_then(|s| s.product.clone())),
                i.arch.clone(),
                path(i.path).into(),
                dash(i.bus.clone()),
                dash(s.and_then(|s| s.firmware.clone())),
                if i.budget == 0 {
                    "-".into()
                } else {
                    bytes(i.budget)
                },
                dash(s.map(|s| bytes(s.used_bytes))),
                dash(s.map(|s| bytes(s.total_bytes.saturating_sub(s.used_bytes)))),
                dash(s.map(|s| format!("{:.1}%", f64::from(s.busy_permille) / 10.0))),
                dash(s.map(|s| s.devices.to_string())),
                if i.simulated {
                    "simulated".into()
                } else if let Some(why) = &i.unavailable {
                    format!("not served: {why}")
                } else {
                    "hardware".into()
                },
                dash(s.and_then(|s| s.client_cost).map(|c| client_cost(&c))),
            ]
        })
        .collect();
    Grid {
        header: vec![
            "INDEX", "NAME", "PRODUCT", "ARCH", "PATH", "BUS", "FIRMWARE", "MEMORY", "USED",
            "FREE", "BUSY", "DEVICES", "KIND", "CLIENT",
        ],
        rows,
        empty: "rigd serves no GPUs",
    }
}

/// `rigctl clients` (and the bottom half of `rigctl top`): one row per process.
pub fn processes(p: &[ProcessInfo]) -> Grid {
    let rows = p
        .iter()
        .map(|p| {
            let devices: Vec<String> = p.devices.iter().map(|d| d.0.to_string()).collect();
            // What it says it is, when that is not what /proc says.
            let says: Vec<&str> = p
                .hello
                .iter()
                .map(String::as_str)
                .filter(|h| *h != p.program)
                .collect();
            vec![
                p.pid.to_string(),
                p.uid.to_string(),
                p.program.clone(),
                if says.is_empty() {
                    "-".into()
                } else {
                    says.join(",")
                },
                p.connections.to_string(),
                if devices.is_empty() {
                    "-".into()
                } else {
                    devices.join(",")
                },
                bytes(p.bytes),
                p.grant.clone().unwrap_or_else(|| "-".into()),
                pod(p.pod.as_ref()),
            ]
        })
        .collect();
    Grid {
        header: vec![
            "PID",
            "UID",
            "PROGRAM",
            "SAYS",
            "CONNECTIONS",
            "DEVICES",
            "MEMORY",
            "GRANT",
            "POD",
        ],
        rows,
        empty: "no clients",
    }
}

/// A pod as `clients` shows it: its UID, and its container's id cut to 12 characters, as
/// container tools show ids.
fn pod(p: Option<&rig_proto::PodOf>) -> String {
    match p {
        None => "-".into(),
        Some(p) => match &p.container {
            Some(c) => format!("{}/{}", p.uid, rig_proto::cut(c, 12)),
            None => p.uid.clone(),
        },
    }
}

/// The grants (`rigctl grants`): id, socket, the share and what its connections hold, and
/// its holder as the device plugin knows it.
pub fn grants(g: &[rig_proto::GrantInfo]) -> Grid {
    let rows = g
        .iter()
        .map(|g| {
            let share: Vec<String> = g
                .spec
                .gpus
                .iter()
                .zip(g.gpu_bytes.iter().chain(std::iter::repeat(&0)))
                .map(|(s, held)| format!("{}:{}/{}", s.gpu, bytes(*held), bytes(s.bytes)))
                .collect();
            let h = &g.spec.holder;
            let holder = match (&h.namespace, &h.pod) {
                (Some(ns), Some(pod)) => match &h.container {
                    Some(c) => format!("{ns}/{pod}/{c}"),
                    None => format!("{ns}/{pod}"),
                },
                _ => "-".into(),
            };
            vec![
                g.spec.id.clone(),
                share.join(","),
                format!("{}/{}", g.devices, g.spec.devices),
                g.connections.to_string(),
                holder,
                g.socket.clone(),
            ]
        })
        .collect();
    Grid {
        header: vec![
            "GRANT",
            "GPU:HELD/SHARE",
            "DEVICES",
            "CONNECTIONS",
            "POD",
            "SOCKET",
        ],
        rows,
        empty: "no grants",
    }
}

/// Milliseconds as days, hours, minutes and seconds.
pub fn uptime(ms: u64) -> String {
    let s = ms / 1000;
    let (d, h, m, s) = (s / 86400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d {h:02}:{m:02}:{s:02}")
    } else {
        format!("{h:02}:{m:02}:{s:02}")
    }
}

/// `rigctl status`.
pub fn status(s: &DaemonStatus) -> Grid {
    let rows = [
        ("version", s.version.clone()),
        ("pid", s.pid.to_string()),
        ("uptime", uptime(s.uptime_ms)),
        (
            "config",
            s.config
                .clone()
                .unwrap_or_else(|| "the embedded default".into()),
        ),
        ("socket", dash(s.socket.clone())),
        ("gpus", s.gpus.to_string()),
        ("connections", s.connections.to_string()),
        ("devices", s.devices.to_string()),
    ]
    .into_iter()
    .map(|(k, v)| vec![k.to_owned(), v])
    .collect();
    Grid {
        header: vec!["KEY", "VALUE"],
        rows,
        empty: "",
    }
}

/// `rigctl devices`.
pub fn devices(d: &[DeviceInfo]) -> Grid {
    let rows = d
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
    Grid {
        header: vec![
            "DEVICE",
            "GPU",
            "OWNER",
            "DEVICE-MEM",
            "PINNED",
            "MAPPED",
            "HOST-MAPPED",
            "STATE",
        ],
        rows,
        empty: "no open devices",
    }
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
        (
            "clock",
            format!(
                "{} Hz, {}",
                f.clock_hz,
                match f.clock {
                    rig_proto::ClockSource::Source { apart: false } => "read by rigd",
                    rig_proto::ClockSource::Source { apart: true } =>
                        "read by rigd, a constant apart from the stamps",
                    rig_proto::ClockSource::RoundTrip => "measured at open",
                }
            ),
        ),
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
