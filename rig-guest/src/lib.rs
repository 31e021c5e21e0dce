//! A Linux guest for tests that need a real kernel: rig's hardware paths (VFIO, KFD) meet the
//! kernel here instead of an emulation of it.
//!
//! [`Host::find`] looks for what a guest needs on this machine: `qemu-system-x86_64`, a Debian
//! kernel image with its modules (`linux-image-cloud-amd64` by preference, any
//! `/boot/vmlinuz-*` otherwise) and `busybox` (`busybox-static`). A test that gets
//! [`Missing`] prints the reason and passes, so the workspace's tests run on a bare machine;
//! CI installs the packages (`.ci/run`).
//!
//! [`Guest`] then builds an initramfs (a `newc` cpio archive, written here) holding busybox,
//! an `/init` script, the kernel modules the test names with everything they depend on
//! (resolved through the kernel's `modules.dep`), the test binary and the shared libraries it
//! links (as `ldd` names them), boots it under QEMU with the console on the serial port, and
//! returns an [`Outcome`]: the whole console, the test binary's exit status and the wall time.
//! The guest is killed when its time is up, and the outcome says so.
//!
//! The accelerator is TCG unless `RIG_GUEST_ACCEL=kvm` (or `kvm:tcg`, QEMU's fallback list):
//! on the machines this project runs on, `/dev/kvm` opens but a Linux guest hangs after the
//! BIOS, while TCG boots Debian's cloud kernel in seconds.
//!
//! The console protocol: `/init` prints [`START`] before it runs the binary and
//! `RIG-GUEST-EXIT <status>` after it, then the guest's kernel log between
//! [`DMESG_BEGIN`] and [`DMESG_END`] (so a test can assert on what the kernel logged, an
//! IOMMU fault for instance), then powers off.

#![deny(missing_docs)]

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

/// Printed by `/init` just before the test binary runs.
pub const START: &str = "RIG-GUEST-START";
/// Printed by `/init` with the test binary's exit status after it.
pub const EXIT: &str = "RIG-GUEST-EXIT";
/// Opens the guest kernel's log, printed after the test.
pub const DMESG_BEGIN: &str = "RIG-GUEST-DMESG-BEGIN";
/// Closes the guest kernel's log.
pub const DMESG_END: &str = "RIG-GUEST-DMESG-END";

/// What a guest needs that this machine lacks: the test that gets it is skipped, and says so.
#[derive(Debug, thiserror::Error)]
pub enum Missing {
    /// No QEMU for x86-64.
    #[error("qemu-system-x86_64 is not installed (apt-get install qemu-system-x86)")]
    Qemu,
    /// No kernel image under /boot, or no modules for it.
    #[error(
        "no guest kernel: no readable /boot/vmlinuz-* whose /lib/modules/<version> has the \
         modules the test needs (apt-get install linux-image-cloud-amd64 for vfio, \
         linux-image-amd64 for amdgpu; or set RIG_GUEST_KERNEL to a vmlinuz)"
    )]
    Kernel,
    /// No busybox.
    #[error("busybox is not installed (apt-get install busybox-static)")]
    Busybox,
}

/// Why a guest could not be run.
#[derive(Debug, thiserror::Error)]
pub enum GuestError {
    /// A kernel module the test asked for is not among the kernel's modules.
    #[error("kernel {kernel} has no module {module} (not in its modules.dep, nor built in)")]
    NoModule {
        /// The module asked for.
        module: String,
        /// The kernel version.
        kernel: String,
    },
    /// Reading a file that goes into the initramfs, or writing the archive, failed.
    #[error("building the initramfs: {what}")]
    Initramfs {
        /// What was being read or written.
        what: String,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `ldd` could not say which libraries the test binary links.
    #[error("ldd {0} failed: is the binary for this machine?")]
    Ldd(PathBuf),
    /// QEMU did not start.
    #[error("starting {0}")]
    Spawn(PathBuf, #[source] io::Error),
}

/// What this machine has for guests.
#[derive(Debug, Clone)]
pub struct Host {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// The kernel image.
    pub kernel: PathBuf,
    /// The kernel's version (its `/lib/modules` folder name).
    pub kernel_version: String,
    /// `/lib/modules/<version>`.
    pub modules: PathBuf,
    /// A statically linked busybox.
    pub busybox: PathBuf,
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(name))
        .find(|p| p.is_file())
}

impl Host {
    /// Finds QEMU, a kernel with its modules and busybox; `Missing` names the first absent.
    pub fn find() -> Result<Host, Missing> {
        Host::find_for(&[])
    }

    /// As [`Host::find`], with a kernel that has every one of `modules` (as a module or built
    /// in): Debian's cloud kernel has vfio-pci but no amdgpu, its generic kernel
    /// (`linux-image-amd64`) has both.
    pub fn find_for(modules: &[&str]) -> Result<Host, Missing> {
        let qemu = on_path("qemu-system-x86_64").ok_or(Missing::Qemu)?;
        let (kernel, kernel_version) = find_kernel(modules).ok_or(Missing::Kernel)?;
        let busybox = ["/bin/busybox", "/usr/bin/busybox"]
            .iter()
            .map(PathBuf::from)
            .find(|p| p.is_file())
            .or_else(|| on_path("busybox"))
            .ok_or(Missing::Busybox)?;
        Ok(Host {
            qemu,
            modules: Path::new("/lib/modules").join(&kernel_version),
            kernel,
            kernel_version,
            busybox,
        })
    }
}

/// Whether `name` (`vfio-pci` or `vfio_pci`) is in a modules.dep or modules.builtin text.
fn lists_module(text: &str, name: &str) -> bool {
    let want = name.replace('-', "_");
    text.lines().any(|l| {
        let path = l.split(':').next().unwrap_or(l);
        let file = path.rsplit('/').next().unwrap_or(path);
        file.split(".ko").next().unwrap_or(file).replace('-', "_") == want
    })
}

/// A readable `vmlinuz-<version>` whose `modules.dep` (or `modules.builtin`) lists every one
/// of `modules`: `RIG_GUEST_KERNEL` first, then the newest cloud kernel, then the newest of
/// any other.
fn find_kernel(modules: &[&str]) -> Option<(PathBuf, String)> {
    let usable = |image: &Path| -> Option<(PathBuf, String)> {
        let version = image
            .file_name()?
            .to_str()?
            .strip_prefix("vmlinuz-")?
            .to_owned();
        let dir = Path::new("/lib/modules").join(&version);
        let dep = fs::read_to_string(dir.join("modules.dep")).ok()?;
        let builtin = fs::read_to_string(dir.join("modules.builtin")).unwrap_or_default();
        let has_all = modules
            .iter()
            .all(|m| lists_module(&dep, m) || lists_module(&builtin, m));
        (fs::File::open(image).is_ok() && has_all).then(|| (image.to_owned(), version))
    };
    if let Some(image) = std::env::var_os("RIG_GUEST_KERNEL") {
        return usable(Path::new(&image));
    }
    let mut images: Vec<PathBuf> = fs::read_dir("/boot")
        .ok()?
        .filter_map(|e| Some(e.ok()?.path()))
        .filter(|p| {
            p.file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with("vmlinuz-"))
        })
        .collect();
    images.sort();
    let cloud = images
        .iter()
        .rev()
        .filter(|p| p.to_string_lossy().contains("cloud"));
    let other = images.iter().rev();
    cloud.chain(other).find_map(|p| usable(p))
}

/// One guest run: what to put in it and how to boot it.
#[derive(Debug, Clone)]
pub struct Guest {
    host: Host,
    binary: PathBuf,
    args: Vec<String>,
    modules: Vec<String>,
    qemu_args: Vec<String>,
    append: Vec<String>,
    memory_mib: u32,
    timeout: Duration,
}

/// What a guest run gave back.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// Everything the guest wrote on its serial console (kernel messages included).
    pub console: String,
    /// The test binary's exit status, if the guest got as far as reporting it.
    pub status: Option<i32>,
    /// Whether the guest was killed at its time limit.
    pub timed_out: bool,
    /// From QEMU's start to its exit (or kill).
    pub wall: Duration,
}

impl Outcome {
    /// Whether the test binary ran and exited 0.
    pub fn passed(&self) -> bool {
        self.status == Some(0) && !self.timed_out
    }

    /// The console lines that begin with `prefix`, with the prefix removed (the serial
    /// console's carriage returns stripped).
    pub fn lines(&self, prefix: &str) -> Vec<&str> {
        self.console
            .lines()
            .map(|l| l.trim_end_matches('\r'))
            .filter_map(|l| l.strip_prefix(prefix))
            .collect()
    }

    /// The guest kernel's log as `/init` printed it after the test.
    pub fn dmesg(&self) -> &str {
        let Some(start) = self.console.find(DMESG_BEGIN) else {
            return "";
        };
        let rest = &self.console[start + DMESG_BEGIN.len()..];
        rest.find(DMESG_END).map_or(rest, |end| &rest[..end])
    }
}

impl Guest {
    /// A guest that runs `binary` (a program for this machine: its libraries come along).
    pub fn new(host: Host, binary: impl Into<PathBuf>) -> Guest {
        Guest {
            host,
            binary: binary.into(),
            args: Vec::new(),
            modules: Vec::new(),
            qemu_args: Vec::new(),
            append: Vec::new(),
            memory_mib: 512,
            timeout: Duration::from_secs(120),
        }
    }

    /// Arguments for the test binary.
    pub fn args<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Guest {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Kernel modules to load before the binary runs, by name (`vfio-pci` or `vfio_pci`);
    /// their dependencies are loaded first. A module built into the kernel is skipped.
    pub fn modules<I: IntoIterator<Item = S>, S: Into<String>>(mut self, names: I) -> Guest {
        self.modules.extend(names.into_iter().map(Into::into));
        self
    }

    /// QEMU arguments beyond the machine (`-machine q35`, memory, console), e.g. devices.
    pub fn qemu<I: IntoIterator<Item = S>, S: Into<String>>(mut self, args: I) -> Guest {
        self.qemu_args.extend(args.into_iter().map(Into::into));
        self
    }

    /// Kernel command-line words beyond the console's.
    pub fn append<I: IntoIterator<Item = S>, S: Into<String>>(mut self, words: I) -> Guest {
        self.append.extend(words.into_iter().map(Into::into));
        self
    }

    /// The wall-clock limit of the whole run, boot included (120 s unless set).
    pub fn timeout(mut self, limit: Duration) -> Guest {
        self.timeout = limit;
        self
    }

    /// Builds the initramfs in `work` (a folder the caller owns) and boots the guest.
    pub fn run(&self, work: &Path) -> Result<Outcome, GuestError> {
        let initrd = work.join("initramfs.cpio");
        self.initramfs(&initrd)?;
        let accel = std::env::var("RIG_GUEST_ACCEL").unwrap_or_else(|_| "tcg".into());
        let mut cmdline = vec![
            "console=ttyS0".to_owned(),
            "panic=-1".into(),
            // Only emergencies (a panic) on the console while the test prints there: the whole
            // kernel log comes after the test, between DMESG_BEGIN and DMESG_END.
            "loglevel=1".into(),
            "rdinit=/init".into(),
        ];
        cmdline.extend(self.append.iter().cloned());
        let mut qemu = Command::new(&self.host.qemu);
        qemu.args(["-machine", "q35"]);
        // `kvm:tcg` is QEMU's fallback list: one `-accel` per entry, tried in order.
        for a in accel.split(':') {
            qemu.args(["-accel", a]);
        }
        qemu.args(["-m", &self.memory_mib.to_string(), "-smp", "1"])
            .args([
                "-nographic",
                "-no-reboot",
                "-nodefaults",
                "-serial",
                "stdio",
            ])
            .arg("-kernel")
            .arg(&self.host.kernel)
            .arg("-initrd")
            .arg(&initrd)
            .arg("-append")
            .arg(cmdline.join(" "))
            .args(&self.qemu_args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let started = Instant::now();
        let mut child = qemu
            .spawn()
            .map_err(|e| GuestError::Spawn(self.host.qemu.clone(), e))?;
        let (tx, rx) = mpsc::channel::<Vec<u8>>();
        let mut readers = Vec::new();
        for stream in [
            child
                .stdout
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
            child
                .stderr
                .take()
                .map(|s| Box::new(s) as Box<dyn Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let tx = tx.clone();
            readers.push(thread::spawn(move || {
                let mut stream = stream;
                let mut buf = [0u8; 4096];
                while let Ok(n) = stream.read(&mut buf) {
                    if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                        break;
                    }
                }
            }));
        }
        drop(tx);
        let mut timed_out = false;
        loop {
            if child.try_wait().ok().flatten().is_some() {
                break;
            }
            if started.elapsed() > self.timeout {
                timed_out = true;
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            thread::sleep(Duration::from_millis(50));
        }
        let wall = started.elapsed();
        for reader in readers {
            let _ = reader.join();
        }
        let console =
            String::from_utf8_lossy(&rx.try_iter().flatten().collect::<Vec<u8>>()).into_owned();
        let status = console
            .lines()
            .filter_map(|l| l.trim_end_matches('\r').strip_prefix(EXIT))
            .find_map(|s| s.trim().parse().ok());
        Ok(Outcome {
            console,
            status,
            timed_out,
            wall,
        })
    }

    /// The `/init` script: mount, load modules, run the binary, report, print dmesg, power off.
    fn init_script(&self, modules: &[String]) -> String {
        let mut s = String::from(
            "#!/bin/busybox sh\n/bin/busybox --install -s /bin\nexport PATH=/bin\n\
             mount -t proc proc /proc\nmount -t sysfs sysfs /sys\n\
             mount -t devtmpfs devtmpfs /dev\nmkdir -p /dev/shm /tmp\n",
        );
        for m in modules {
            s += &format!("insmod /lib/modules/{m} || echo \"RIG-GUEST-INSMOD-FAILED {m}\"\n");
        }
        let quoted: Vec<String> = self
            .args
            .iter()
            .map(|a| format!("'{}'", a.replace('\'', "'\\''")))
            .collect();
        s += &format!(
            "echo {START}\n/test {}\necho \"{EXIT} $?\"\necho {DMESG_BEGIN}\ndmesg\n\
             echo {DMESG_END}\npoweroff -f\n",
            quoted.join(" ")
        );
        s
    }

    /// The modules to load, dependencies first, as paths under `/lib/modules/<version>`.
    fn module_order(&self) -> Result<Vec<String>, GuestError> {
        let dep_path = self.host.modules.join("modules.dep");
        let deps = fs::read_to_string(&dep_path).map_err(|source| GuestError::Initramfs {
            what: dep_path.display().to_string(),
            source,
        })?;
        let builtin =
            fs::read_to_string(self.host.modules.join("modules.builtin")).unwrap_or_default();
        let table: Vec<(String, Vec<String>)> = deps
            .lines()
            .filter_map(|l| {
                let (module, rest) = l.split_once(':')?;
                Some((
                    module.to_owned(),
                    rest.split_whitespace().map(str::to_owned).collect(),
                ))
            })
            .collect();
        let norm = |s: &str| s.replace('-', "_");
        let stem = |path: &str| -> String {
            let file = path.rsplit('/').next().unwrap_or(path);
            norm(file.split(".ko").next().unwrap_or(file))
        };
        let mut order = Vec::new();
        let mut seen = BTreeSet::new();
        for name in &self.modules {
            let want = norm(name);
            let Some((module, needs)) = table.iter().find(|(m, _)| stem(m) == want) else {
                if builtin.lines().any(|l| stem(l) == want) {
                    continue;
                }
                return Err(GuestError::NoModule {
                    module: name.clone(),
                    kernel: self.host.kernel_version.clone(),
                });
            };
            // modules.dep lists every dependency, deepest last: load them in reverse.
            for m in needs.iter().rev().chain(std::iter::once(module)) {
                if seen.insert(m.clone()) {
                    order.push(m.clone());
                }
            }
        }
        Ok(order)
    }

    fn initramfs(&self, out: &Path) -> Result<(), GuestError> {
        let read = |path: &Path| {
            fs::read(path).map_err(|source| GuestError::Initramfs {
                what: path.display().to_string(),
                source,
            })
        };
        let mut cpio = Cpio::default();
        for dir in [
            "bin",
            "dev",
            "proc",
            "sys",
            "tmp",
            "lib",
            "lib64",
            "usr",
            "lib/modules",
        ] {
            cpio.dir(dir);
        }
        cpio.file("bin/busybox", 0o755, &read(&self.host.busybox)?);
        let order = self.module_order()?;
        let mut loaded = Vec::new();
        for m in &order {
            let source = self.host.modules.join(m);
            let data = decompress(&source, read(&source)?)?;
            let name = m
                .trim_end_matches(".xz")
                .trim_end_matches(".zst")
                .trim_end_matches(".gz")
                .replace('/', "_");
            cpio.file(&format!("lib/modules/{name}"), 0o644, &data);
            loaded.push(name);
        }
        cpio.file("init", 0o755, self.init_script(&loaded).as_bytes());
        cpio.file("test", 0o755, &read(&self.binary)?);
        for lib in libraries(&self.binary)? {
            let inside = lib.to_string_lossy().trim_start_matches('/').to_owned();
            let mut parent = String::new();
            for part in Path::new(&inside)
                .parent()
                .into_iter()
                .flat_map(|p| p.iter())
            {
                if !parent.is_empty() {
                    parent.push('/');
                }
                parent.push_str(&part.to_string_lossy());
                cpio.dir(&parent);
            }
            cpio.file(
                &inside,
                0o755,
                &read(&fs::canonicalize(&lib).unwrap_or(lib))?,
            );
        }
        let bytes = cpio.finish();
        fs::File::create(out)
            .and_then(|mut f| f.write_all(&bytes))
            .map_err(|source| GuestError::Initramfs {
                what: out.display().to_string(),
                source,
            })
    }
}

/// A module as the kernel's loader takes it: compressed ones are expanded with `xz`/`zstd`.
fn decompress(path: &Path, data: Vec<u8>) -> Result<Vec<u8>, GuestError> {
    let tool = match path.extension().and_then(|e| e.to_str()) {
        Some("xz") => "xz",
        Some("zst") => "zstd",
        Some("gz") => "gzip",
        _ => return Ok(data),
    };
    let output = Command::new(tool)
        .args(["-dc"])
        .arg(path)
        .output()
        .map_err(|source| GuestError::Initramfs {
            what: format!("{tool} -dc {}", path.display()),
            source,
        })?;
    Ok(output.stdout)
}

/// The shared libraries `binary` links, with the dynamic loader, as `ldd` names them; none
/// for a static binary.
fn libraries(binary: &Path) -> Result<Vec<PathBuf>, GuestError> {
    let out = Command::new("ldd")
        .arg(binary)
        .output()
        .map_err(|_| GuestError::Ldd(binary.to_owned()))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        // "not a dynamic executable": a static binary needs nothing more.
        let err = String::from_utf8_lossy(&out.stderr);
        return if text.contains("not a dynamic") || err.contains("not a dynamic") {
            Ok(Vec::new())
        } else {
            Err(GuestError::Ldd(binary.to_owned()))
        };
    }
    Ok(text
        .lines()
        .filter_map(|l| {
            let l = l.trim();
            let path = match l.split_once("=>") {
                Some((_, rest)) => rest.split_whitespace().next()?,
                None => l.split_whitespace().next()?,
            };
            path.starts_with('/').then(|| PathBuf::from(path))
        })
        .collect())
}

/// A `newc` cpio archive, the format the kernel unpacks as an initramfs.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    inode: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8]) {
        self.inode += 1;
        let size = u32::try_from(data.len()).expect("initramfs member over 4 GiB");
        let name_len = u32::try_from(name.len() + 1).expect("name fits");
        let header = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.inode, mode, 0, 0, 1, 0, size, 0, 0, 0, 0, name_len, 0
        );
        self.out.extend_from_slice(header.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if self.dirs.insert(name.to_owned()) {
            self.entry(name, 0o040_755, &[]);
        }
    }

    fn file(&mut self, name: &str, perm: u32, data: &[u8]) {
        self.entry(name, 0o100_000 | perm, data);
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[]);
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpio_members_are_aligned_and_trailed() {
        let mut c = Cpio::default();
        c.dir("bin");
        c.file("bin/x", 0o755, b"abc");
        let out = c.finish();
        assert_eq!(out.len() % 4, 0);
        assert!(out.starts_with(b"070701"));
        let text = String::from_utf8_lossy(&out);
        assert!(text.contains("bin/x"));
        assert!(text.contains("TRAILER!!!"));
        // The file's size field (7th) is 3.
        let second = text.match_indices("070701").nth(1).unwrap().0;
        assert_eq!(&text[second + 6 + 6 * 8..second + 6 + 7 * 8], "00000003");
    }

    #[test]
    fn outcome_parses_status_lines_and_dmesg() {
        let o = Outcome {
            console: format!(
                "boot\r\nEDU ok id\r\n{EXIT} 0\r\n{DMESG_BEGIN}\nDMAR: fault\n{DMESG_END}\n"
            ),
            status: Some(0),
            timed_out: false,
            wall: Duration::ZERO,
        };
        assert_eq!(o.lines("EDU "), vec!["ok id"]);
        assert!(o.dmesg().contains("DMAR: fault"));
        assert!(o.passed());
    }
}
