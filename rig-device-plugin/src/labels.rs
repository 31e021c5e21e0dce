//! Node labels of the GPUs' processor and memory, as a Node Feature Discovery feature file:
//! NFD's worker reads `/etc/kubernetes/node-feature-discovery/features.d/` (its local
//! source) and labels the node with each `name=value` line, under
//! `feature.node.kubernetes.io/` for a name with no namespace of its own. The plugin writes
//! the file (`--features-file`) whenever the GPUs rigd lists change, so that pods can ask
//! for a processor or for GPUs of enough memory with a `nodeSelector` or node affinity.
//!
//! The labels ([`features`]): `rig-gpu.count`, `rig-gpu.processor` (the processor of every
//! GPU, or `mixed`), `rig-gpu.<processor>.count` for each processor, and
//! `rig-gpu.memory-gib` (the largest GPU's memory, whole GiB).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use tokio::sync::watch;

use crate::resources::Snapshot;

/// The feature file's text for the GPUs of `snapshot`; empty when there is none.
pub fn features(snapshot: &Snapshot) -> String {
    if snapshot.is_empty() {
        return String::new();
    }
    let mut by_arch: BTreeMap<&str, usize> = BTreeMap::new();
    for g in snapshot.values() {
        *by_arch.entry(label_value(&g.arch)).or_default() += 1;
    }
    let processor = match by_arch.keys().collect::<Vec<_>>().as_slice() {
        [one] => **one,
        _ => "mixed",
    };
    let largest = snapshot.values().map(|g| g.budget).max().unwrap_or(0);
    let mut out = format!(
        "# Written by rig-device-plugin from the GPUs rigd lists.\nrig-gpu.count={}\nrig-gpu.processor={processor}\n",
        snapshot.len()
    );
    for (arch, n) in by_arch {
        out.push_str(&format!("rig-gpu.{arch}.count={n}\n"));
    }
    out.push_str(&format!("rig-gpu.memory-gib={}\n", largest >> 30));
    out
}

/// `s` if it is a label value (letters, digits, `-`, `_`, `.`, at most 63), else `unknown`.
fn label_value(s: &str) -> &str {
    let fits = !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric();
    if fits { s } else { "unknown" }
}

/// Writes `text` to `path` atomically (a file beside it, renamed over it), making its
/// directory.
fn write(path: &Path, text: &str) -> std::io::Result<()> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    let tmp = PathBuf::from(tmp);
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path)
}

/// Keeps the feature file at `path` up to date with `gpus` until the channel closes.
pub async fn keep(path: PathBuf, mut gpus: watch::Receiver<Snapshot>) {
    let mut last = None;
    loop {
        let text = features(&gpus.borrow_and_update());
        if last.as_ref() != Some(&text) && !text.is_empty() {
            match write(&path, &text) {
                Ok(()) => tracing::info!(file = %path.display(), "node feature file written"),
                Err(e) => {
                    tracing::warn!(file = %path.display(), error = %e, "cannot write the node feature file")
                }
            }
            last = Some(text);
        }
        if gpus.changed().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::resources::GpuState;

    fn gpu(arch: &str, gib: u64) -> GpuState {
        GpuState {
            name: "AMD:0".into(),
            arch: arch.into(),
            budget: gib << 30,
            unhealthy: None,
        }
    }

    #[test]
    fn labels_say_processor_count_and_memory() {
        let s: Snapshot = [(0, gpu("gfx1100", 24)), (1, gpu("gfx1100", 24))].into();
        let f = features(&s);
        for line in [
            "rig-gpu.count=2",
            "rig-gpu.processor=gfx1100",
            "rig-gpu.gfx1100.count=2",
            "rig-gpu.memory-gib=24",
        ] {
            assert!(f.lines().any(|l| l == line), "{line} in\n{f}");
        }
        let mixed: Snapshot = [
            (0, gpu("gfx1100", 24)),
            (1, gpu("gfx942", 192)),
            (2, gpu("bad arch", 1)),
        ]
        .into();
        let f = features(&mixed);
        assert!(f.contains("rig-gpu.processor=mixed\n") && f.contains("rig-gpu.gfx942.count=1\n"));
        assert!(f.contains("rig-gpu.unknown.count=1\n") && f.contains("rig-gpu.memory-gib=192\n"));
        assert_eq!(features(&Snapshot::new()), "");
    }
}
