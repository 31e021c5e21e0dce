//! The plugin binary between real peers over real Unix sockets: a kubelet written here (a
//! tonic server of `Registration` and of the pod-resources `PodResourcesLister`, and a
//! client of the plugin's `DevicePlugin` service, as the kubelet is), and a real rigd
//! serving simulated gfx1100s (this test program run again as rigd's daemon:
//! [`serve_rigd`]).
//!
//! Every wait is bounded by [`WITHIN`], long enough for a loaded two-core machine; the
//! plugin polls rigd every 100 ms here.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rig_device_plugin::api;
use rig_device_plugin::api::device_plugin_client::DevicePluginClient;
use rig_device_plugin::api::registration_server::{Registration, RegistrationServer};
use rig_device_plugin::podresources;
use rig_device_plugin::podresources::pod_resources_lister_server::{
    PodResourcesLister, PodResourcesListerServer,
};
use rig_device_plugin::uds;
use tokio::sync::mpsc;
use tonic::transport::Channel;

/// The bound of every wait.
const WITHIN: Duration = Duration::from_secs(20);

/// In the child that serves rigd: its socket.
const RIGD_SOCKET_ENV: &str = "RIG_PLUGIN_TEST_RIGD";
/// In the child that serves rigd: how many simulated GPUs.
const RIGD_GPUS_ENV: &str = "RIG_PLUGIN_TEST_GPUS";
/// The simulated GPUs' memory.
const GPU_BYTES: u64 = 1 << 30;
/// The plugin's memory unit in these tests: 8 units per GPU.
const UNIT: u64 = 128 << 20;

/// The hook of [`Rigd`], not a test: in the child it starts, this serves rigd until
/// SIGTERM and exits; run any other way it returns at once.
#[test]
#[ignore = "rigd's daemon, run by Rigd::start in a child process"]
fn serve_rigd() {
    let Some(socket) = std::env::var_os(RIGD_SOCKET_ENV).map(PathBuf::from) else {
        return;
    };
    let _ = nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGTERM);
    let gpus: usize = std::env::var(RIGD_GPUS_ENV)
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1);
    let mut config = rigd::config::Config::embedded();
    config.daemon.socket = socket.clone();
    config.daemon.mode = 0o600;
    config.access.any = true;
    config.kfd.device = socket.with_extension("no-kfd");
    config.sim = vec![
        rigd::config::SimGpuConfig {
            processor: "gfx1100".into(),
            memory_bytes: GPU_BYTES,
            ..rigd::config::SimGpuConfig::embedded_default()
        };
        gpus
    ];
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .expect("rigd's runtime");
    let code = match runtime.block_on(rigd::serve_until_sigterm(&socket, &config)) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("the test's rigd: {e}");
            1
        }
    };
    std::process::exit(code);
}

/// A rigd of the test's own on `socket`, stopped (SIGTERM) when dropped.
struct Rigd {
    child: Child,
}

impl Rigd {
    fn start(socket: &Path, gpus: u32) -> Rigd {
        let log = std::fs::File::options()
            .create(true)
            .append(true)
            .open(socket.with_extension("log"))
            .expect("rigd's log");
        let child = Command::new(std::env::current_exe().expect("the test program"))
            .args([
                "--exact",
                "serve_rigd",
                "--include-ignored",
                "--test-threads=1",
            ])
            .env(RIGD_SOCKET_ENV, socket)
            .env(RIGD_GPUS_ENV, gpus.to_string())
            .env("RUST_LOG", "rigd=info")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("start rigd");
        let start = Instant::now();
        while rig_proto::Connection::connect(socket, "plugin-test").is_err() {
            assert!(
                start.elapsed() < WITHIN,
                "rigd did not come up on {socket:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        Rigd { child }
    }

    fn stop(mut self) {
        self.terminate();
    }

    fn signal(&self, signal: nix::sys::signal::Signal) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        nix::sys::signal::kill(pid, signal).expect("signal rigd");
    }

    fn terminate(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        // A rigd a failed test left stopped must run to take the SIGTERM.
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGCONT);
        let _ = self.child.wait();
    }
}

impl Drop for Rigd {
    fn drop(&mut self) {
        self.terminate();
    }
}

/// The plugin binary, stopped (SIGTERM) when dropped; its log beside the kubelet's socket.
struct Plugin {
    child: Child,
    log: PathBuf,
}

impl Plugin {
    fn start(kubelet_socket: &Path, rigd_socket: &Path, args: &[&str]) -> Plugin {
        let log = kubelet_socket.with_file_name("plugin.log");
        let child = Command::new(env!("CARGO_BIN_EXE_rig-device-plugin"))
            .arg("--kubelet-socket")
            .arg(kubelet_socket)
            .arg("--rigd-socket")
            .arg(rigd_socket)
            .arg("--pod-resources-socket")
            .arg(kubelet_socket.with_file_name(POD_RESOURCES))
            .args(["--poll-ms", "100", "--memory-unit", &UNIT.to_string()])
            .args(args)
            .env("RUST_LOG", "rig_device_plugin=debug")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).expect("the plugin's log"))
            .spawn()
            .expect("start the plugin");
        Plugin { child, log }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Plugin {
    fn drop(&mut self) {
        let pid = nix::unistd::Pid::from_raw(self.child.id() as i32);
        let _ = nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM);
        let _ = self.child.wait();
        if std::thread::panicking() {
            eprintln!("the plugin's log:\n{}", self.log());
        }
    }
}

/// The kubelet's `Registration` service: each request goes to the test.
struct Registrar {
    seen: mpsc::UnboundedSender<api::RegisterRequest>,
}

#[tonic::async_trait]
impl Registration for Registrar {
    async fn register(
        &self,
        request: tonic::Request<api::RegisterRequest>,
    ) -> Result<tonic::Response<api::Empty>, tonic::Status> {
        let request = request.into_inner();
        if request.version != "v1beta1" {
            return Err(tonic::Status::invalid_argument("unsupported version"));
        }
        let _ = self.seen.send(request);
        Ok(tonic::Response::new(api::Empty {}))
    }
}

/// The pod-resources socket's name, beside the kubelet's registration socket in these
/// tests (the kubelet's is `/var/lib/kubelet/pod-resources/kubelet.sock`).
const POD_RESOURCES: &str = "pod-resources.sock";

/// The pods the kubelet stand-in lists, as the test sets them.
type Pods = std::sync::Arc<std::sync::Mutex<Vec<podresources::PodResources>>>;

/// The kubelet's pod-resources service: the test's list.
struct Lister {
    pods: Pods,
}

#[tonic::async_trait]
impl PodResourcesLister for Lister {
    async fn list(
        &self,
        _request: tonic::Request<podresources::ListPodResourcesRequest>,
    ) -> Result<tonic::Response<podresources::ListPodResourcesResponse>, tonic::Status> {
        let pod_resources = self.pods.lock().unwrap().clone();
        Ok(tonic::Response::new(
            podresources::ListPodResourcesResponse { pod_resources },
        ))
    }
}

/// A pod of one container holding `devices` of `resource`.
fn pod(name: &str, resource: &str, devices: &[String]) -> podresources::PodResources {
    podresources::PodResources {
        name: name.into(),
        namespace: "default".into(),
        containers: vec![podresources::ContainerResources {
            name: "work".into(),
            devices: vec![podresources::ContainerDevices {
                resource_name: resource.into(),
                device_ids: devices.to_vec(),
            }],
        }],
    }
}

/// The kubelet stand-in: its registration socket, what registered, the pods it lists, and
/// its servers.
struct Kubelet {
    socket: PathBuf,
    registered: mpsc::UnboundedReceiver<api::RegisterRequest>,
    pods: Pods,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<()>,
}

impl Kubelet {
    /// Starts serving on `socket`, first removing every other socket in its directory as
    /// the kubelet does when it starts.
    fn start(socket: &Path) -> Kubelet {
        let dir = socket.parent().expect("a directory");
        for entry in std::fs::read_dir(dir).expect("the device-plugins directory") {
            let path = entry.expect("an entry").path();
            if path.extension().is_some_and(|e| e == "sock") {
                // The plugin may be re-making its own socket at this moment.
                match std::fs::remove_file(&path) {
                    Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                        panic!("remove a socket: {e}")
                    }
                    _ => {}
                }
            }
        }
        let listener = tokio::net::UnixListener::bind(socket).expect("bind kubelet.sock");
        let pods = Pods::default();
        let lister = Lister { pods: pods.clone() };
        let resources = socket.with_file_name(POD_RESOURCES);
        let _ = std::fs::remove_file(&resources);
        let resources =
            tokio::net::UnixListener::bind(&resources).expect("bind the pod-resources socket");
        let (seen, registered) = mpsc::unbounded_channel();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (stop_lister, lister_stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let listing = tokio::spawn(
                tonic::transport::Server::builder()
                    .add_service(PodResourcesListerServer::new(lister))
                    .serve_with_incoming_shutdown(
                        tokio_stream::wrappers::UnixListenerStream::new(resources),
                        async {
                            let _ = lister_stopped.await;
                        },
                    ),
            );
            tonic::transport::Server::builder()
                .add_service(RegistrationServer::new(Registrar { seen }))
                .serve_with_incoming_shutdown(
                    tokio_stream::wrappers::UnixListenerStream::new(listener),
                    async {
                        let _ = stopped.await;
                    },
                )
                .await
                .expect("the kubelet's server");
            let _ = stop_lister.send(());
            let _ = listing.await;
        });
        Kubelet {
            socket: socket.to_owned(),
            registered,
            pods,
            stop: Some(stop),
            server,
        }
    }

    /// The next `n` registrations, by resource name.
    async fn registrations(&mut self, n: usize) -> Vec<api::RegisterRequest> {
        let mut got = Vec::new();
        while got.len() < n {
            let r = tokio::time::timeout(WITHIN, self.registered.recv())
                .await
                .expect("the plugin registers in time")
                .expect("the kubelet serves");
            got.push(r);
        }
        got.sort_by(|a, b| a.resource_name.cmp(&b.resource_name));
        got
    }

    /// Stops, and removes its socket as a stopping kubelet's socket goes away.
    async fn stop(mut self) {
        let _ = self.stop.take().expect("once").send(());
        let _ = tokio::time::timeout(WITHIN, &mut self.server).await;
        let _ = std::fs::remove_file(&self.socket);
    }
}

/// What the kubelet does after a registration: dial the plugin's endpoint.
async fn dial(kubelet_socket: &Path, endpoint: &str) -> DevicePluginClient<Channel> {
    let path = kubelet_socket.with_file_name(endpoint);
    let channel = tokio::time::timeout(WITHIN, uds::channel(&path))
        .await
        .expect("connect in time")
        .expect("connect to the plugin");
    DevicePluginClient::new(channel)
}

/// Reads ListAndWatch answers until one satisfies `want`, and returns it.
async fn until(
    stream: &mut tonic::Streaming<api::ListAndWatchResponse>,
    what: &str,
    want: impl Fn(&[api::Device]) -> bool,
) -> Vec<api::Device> {
    let deadline = tokio::time::Instant::now() + WITHIN;
    loop {
        let next = tokio::time::timeout_at(deadline, stream.message())
            .await
            .unwrap_or_else(|_| panic!("no device list where {what} came in time"))
            .expect("the stream goes on")
            .expect("the stream is open");
        if want(&next.devices) {
            return next.devices;
        }
    }
}

fn all(health: &'static str) -> impl Fn(&[api::Device]) -> bool {
    move |d| !d.is_empty() && d.iter().all(|d| d.health == health)
}

fn ids(devices: &[api::Device]) -> Vec<&str> {
    devices.iter().map(|d| d.id.as_str()).collect()
}

fn units(gpu: u32, range: std::ops::Range<u64>) -> Vec<String> {
    range.map(|k| format!("gpu{gpu}-m{k}")).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registers_lists_prefers_and_allocates() {
    let dir = tempfile::tempdir().unwrap();
    let rigd_socket = dir.path().join("rigd.sock");
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir(&plugins).unwrap();
    let kubelet_socket = plugins.join("kubelet.sock");
    let _rigd = Rigd::start(&rigd_socket, 3);
    let mut kubelet = Kubelet::start(&kubelet_socket);
    let _plugin = Plugin::start(&kubelet_socket, &rigd_socket, &["--whole-gpus", "2"]);

    let regs = kubelet.registrations(2).await;
    assert_eq!(regs[0].resource_name, "rig.dev/gpu");
    assert_eq!(regs[0].endpoint, "rig-gpu.sock");
    assert_eq!(regs[1].resource_name, "rig.dev/gpu-memory");
    assert_eq!(regs[1].endpoint, "rig-gpu-memory.sock");
    for r in &regs {
        assert_eq!(r.version, "v1beta1");
        let options = r.options.expect("options");
        assert!(options.get_preferred_allocation_available);
        assert!(!options.pre_start_required);
    }

    let mut gpu = dial(&kubelet_socket, &regs[0].endpoint).await;
    let mut memory = dial(&kubelet_socket, &regs[1].endpoint).await;
    let options = gpu.get_device_plugin_options(api::Empty {}).await.unwrap();
    assert!(options.into_inner().get_preferred_allocation_available);

    // GPU 2 whole; GPUs 0 and 1 in units of 128 MiB, 8 each.
    let mut stream = gpu
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    let whole = until(&mut stream, "GPU 2 is healthy", all("Healthy")).await;
    assert_eq!(ids(&whole), ["gpu2"]);
    let mut stream = memory
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    let shares = until(&mut stream, "the units are healthy", all("Healthy")).await;
    let per_gpu = GPU_BYTES / UNIT;
    let mut want = units(0, 0..per_gpu);
    want.extend(units(1, 0..per_gpu));
    assert_eq!(ids(&shares), want);

    // Packing: GPU 0 has 2 units left, GPU 1 all 8. Two fit on GPU 0 (the tightest fit);
    // four only on GPU 1; ten take both, GPU 1's first.
    let mut available = units(0, per_gpu - 2..per_gpu);
    available.extend(units(1, 0..per_gpu));
    let prefer = |size: i32, must: Vec<String>| api::PreferredAllocationRequest {
        container_requests: vec![api::ContainerPreferredAllocationRequest {
            available_device_i_ds: available.clone(),
            must_include_device_i_ds: must,
            allocation_size: size,
        }],
    };
    let answer = |r: tonic::Response<api::PreferredAllocationResponse>| {
        r.into_inner().container_responses[0].device_i_ds.clone()
    };
    let got = answer(
        memory
            .get_preferred_allocation(prefer(2, vec![]))
            .await
            .unwrap(),
    );
    assert_eq!(got, units(0, per_gpu - 2..per_gpu));
    let got = answer(
        memory
            .get_preferred_allocation(prefer(4, vec![]))
            .await
            .unwrap(),
    );
    assert_eq!(got, units(1, 0..4));
    let got = answer(
        memory
            .get_preferred_allocation(prefer(10, vec![]))
            .await
            .unwrap(),
    );
    assert_eq!(got, available);
    let must = vec!["gpu1-m7".to_string()];
    let got = answer(
        memory
            .get_preferred_allocation(prefer(3, must))
            .await
            .unwrap(),
    );
    assert_eq!(got, ["gpu1-m0", "gpu1-m1", "gpu1-m7"]);

    // Allocate: the grant's socket directory mounted read-only, RIG_SOCKET inside it, the
    // share in the environment.
    let request = api::AllocateRequest {
        container_requests: vec![api::ContainerAllocateRequest {
            devices_ids: units(1, 0..4),
        }],
    };
    let response = memory.allocate(request).await.unwrap().into_inner();
    let c = &response.container_responses[0];
    assert_eq!(c.envs["RIG_SOCKET"], "/run/rig/rigd.sock");
    assert_eq!(c.envs["RIG_VISIBLE_GPUS"], "1");
    assert_eq!(c.envs["RIG_MEMORY_LIMIT"], (4 * UNIT).to_string());
    assert_eq!(c.envs["RIG_GPU_MEMORY"], format!("1:{}", 4 * UNIT));
    assert_eq!(c.mounts.len(), 1);
    let mount = &c.mounts[0];
    assert_eq!(mount.container_path, "/run/rig");
    assert_eq!(
        Path::new(&mount.host_path).parent(),
        Some(dir.path().join("alloc").as_path()),
        "the grant's own directory, not rigd's"
    );
    assert!(mount.read_only);
    assert!(c.devices.is_empty() && c.cdi_devices.is_empty());
    // The container's RIG_SOCKET, seen through the mount, is rigd holding the grant: it
    // opens devices on GPU 1 only, within 4 units.
    let mut conn = in_container(c);
    let (listed, _) = conn.call(&rig_proto::Request::ListGpus, &[]).unwrap();
    let rig_proto::Response::Gpus(listed) = listed else {
        panic!("{listed:?}")
    };
    assert!(listed.iter().any(|g| g.index == 1 && g.budget == GPU_BYTES));
    let (outside, _) = conn
        .call(&rig_proto::Request::OpenDevice { gpu: 0 }, &[])
        .unwrap();
    assert!(
        matches!(&outside, rig_proto::Response::Error(e) if e.message.contains("gpu 1 only")),
        "{outside:?}"
    );
    let (inside, _) = conn
        .call(&rig_proto::Request::OpenDevice { gpu: 1 }, &[])
        .unwrap();
    let rig_proto::Response::DeviceOpened(o) = inside else {
        panic!("{inside:?}")
    };
    let (past, _) = conn
        .call(
            &rig_proto::Request::Alloc {
                device: o.device,
                memory: rig_proto::MemoryKind::Device,
                bytes: 4 * UNIT + 4096,
            },
            &[],
        )
        .unwrap();
    assert!(
        matches!(&past, rig_proto::Response::NoMemory { limit: Some(l), .. } if l.name.ends_with("memory on gpu 1")),
        "{past:?}"
    );

    let whole = gpu
        .allocate(api::AllocateRequest {
            container_requests: vec![api::ContainerAllocateRequest {
                devices_ids: vec!["gpu2".into()],
            }],
        })
        .await
        .unwrap()
        .into_inner();
    let c = &whole.container_responses[0];
    assert_eq!(c.envs["RIG_VISIBLE_GPUS"], "2");
    assert_eq!(c.envs["RIG_MEMORY_LIMIT"], GPU_BYTES.to_string());

    // A device that is not the resource's is refused, naming it.
    for (whole, id) in [(true, "gpu0"), (false, "gpu2-m0"), (false, "gpu0-m99")] {
        let client = if whole { &mut gpu } else { &mut memory };
        let refused = client
            .allocate(api::AllocateRequest {
                container_requests: vec![api::ContainerAllocateRequest {
                    devices_ids: vec![id.into()],
                }],
            })
            .await
            .expect_err(id);
        assert_eq!(refused.code(), tonic::Code::InvalidArgument, "{id}");
        assert!(refused.message().contains(id), "{}", refused.message());
    }
    memory
        .pre_start_container(api::PreStartContainerRequest {
            devices_ids: units(1, 0..4),
        })
        .await
        .unwrap();
}

/// A rig-proto connection to the socket a container given `c` reaches, through the host
/// side of its mount.
fn in_container(c: &api::ContainerAllocateResponse) -> rig_proto::Connection {
    let mount = &c.mounts[0];
    let inside = Path::new(&c.envs["RIG_SOCKET"])
        .strip_prefix(&mount.container_path)
        .unwrap();
    rig_proto::Connection::connect(Path::new(&mount.host_path).join(inside), "pod")
        .expect("rigd through the mount")
}

/// The grants rigd holds, through a connection of the test's own (it runs as root, an
/// administrator of its rigd).
fn grants(rigd_socket: &Path) -> Vec<rig_proto::GrantInfo> {
    let Ok(mut c) = rig_proto::Connection::connect(rigd_socket, "test") else {
        return Vec::new();
    };
    match c.call(&rig_proto::Request::Grants, &[]) {
        Ok((rig_proto::Response::Grants(g), _)) => g,
        other => panic!("grants: {other:?}"),
    }
}

/// Waits (bounded by [`WITHIN`]) until `f` holds.
async fn eventually(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + WITHIN;
    while !f() {
        assert!(Instant::now() < deadline, "{what} did not happen in time");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_follow_the_pods_the_kubelet_lists_and_outlive_rigd() {
    let dir = tempfile::tempdir().unwrap();
    let rigd_socket = dir.path().join("rigd.sock");
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir(&plugins).unwrap();
    let kubelet_socket = plugins.join("kubelet.sock");
    let features = dir.path().join("features.d/rig");
    let rigd = Rigd::start(&rigd_socket, 2);
    let mut kubelet = Kubelet::start(&kubelet_socket);
    let plugin = Plugin::start(
        &kubelet_socket,
        &rigd_socket,
        &["--features-file", features.to_str().unwrap()],
    );
    let regs = kubelet.registrations(2).await;
    let mut memory = dial(&kubelet_socket, &regs[1].endpoint).await;
    let mut stream = memory
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    until(&mut stream, "the units are healthy", all("Healthy")).await;

    // Node labels of the GPUs, as a Node Feature Discovery feature file.
    eventually("the feature file is written", || {
        std::fs::read_to_string(&features).is_ok_and(|f| {
            f.lines().any(|l| l == "rig-gpu.count=2")
                && f.lines().any(|l| l == "rig-gpu.processor=gfx1100")
                && f.lines().any(|l| l == "rig-gpu.memory-gib=1")
        })
    })
    .await;

    // Two containers holding units of GPU 0 each: a grant each.
    let mut held = Vec::new();
    for (name, devices) in [("tenant-a", units(0, 0..2)), ("tenant-b", units(0, 2..4))] {
        let response = memory
            .allocate(api::AllocateRequest {
                container_requests: vec![api::ContainerAllocateRequest {
                    devices_ids: devices.clone(),
                }],
            })
            .await
            .unwrap()
            .into_inner();
        held.push((name, devices, response.container_responses[0].clone()));
    }
    assert_ne!(held[0].2.mounts[0].host_path, held[1].2.mounts[0].host_path);
    let mut a = in_container(&held[0].2);
    let (r, _) = a
        .call(&rig_proto::Request::OpenDevice { gpu: 0 }, &[])
        .unwrap();
    assert!(matches!(r, rig_proto::Response::DeviceOpened(_)), "{r:?}");

    // The kubelet lists them: rigd learns each grant's pod and container.
    *kubelet.pods.lock().unwrap() = held
        .iter()
        .map(|(name, devices, _)| pod(name, "rig.dev/gpu-memory", devices))
        .collect();
    eventually("the grants take their pods' names", || {
        let g = grants(&rigd_socket);
        g.len() == 2
            && g.iter().all(|g| {
                g.spec.holder.namespace.as_deref() == Some("default")
                    && g.spec.holder.container.as_deref() == Some("work")
            })
            && g.iter()
                .any(|g| g.spec.holder.pod.as_deref() == Some("tenant-a"))
    })
    .await;

    // rigd restarts: the plugin makes the grants again, at the same sockets.
    rigd.stop();
    let rigd = Rigd::start(&rigd_socket, 2);
    eventually("the grants are made again", || {
        grants(&rigd_socket).len() == 2
    })
    .await;
    let socket_a = Path::new(&held[0].2.mounts[0].host_path).join("rigd.sock");
    assert!(socket_a.exists(), "{socket_a:?}");
    let mut a = in_container(&held[0].2);
    let (r, _) = a
        .call(&rig_proto::Request::OpenDevice { gpu: 0 }, &[])
        .unwrap();
    assert!(matches!(r, rig_proto::Response::DeviceOpened(_)), "{r:?}");

    // tenant-a's pod goes: its grant is revoked, its connection closed; tenant-b's stays.
    kubelet.pods.lock().unwrap().remove(0);
    eventually("tenant-a's grant is revoked", || {
        let g = grants(&rigd_socket);
        g.len() == 1 && g[0].spec.holder.pod.as_deref() == Some("tenant-b")
    })
    .await;
    assert!(a.call(&rig_proto::Request::ListGpus, &[]).is_err());
    assert!(!socket_a.exists());
    assert!(
        plugin.log().contains("grant revoked"),
        "the plugin says it reclaimed:\n{}",
        plugin.log()
    );
    drop(rigd);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_follows_rigd_away_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let rigd_socket = dir.path().join("rigd.sock");
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir(&plugins).unwrap();
    let kubelet_socket = plugins.join("kubelet.sock");
    let rigd = Rigd::start(&rigd_socket, 1);
    let mut kubelet = Kubelet::start(&kubelet_socket);
    let _plugin = Plugin::start(&kubelet_socket, &rigd_socket, &[]);
    let regs = kubelet.registrations(2).await;
    let mut memory = dial(&kubelet_socket, &regs[1].endpoint).await;
    let mut stream = memory
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    let healthy = until(&mut stream, "the units are healthy", all("Healthy")).await;
    assert_eq!(healthy.len() as u64, GPU_BYTES / UNIT);

    rigd.stop();
    let sick = until(&mut stream, "rigd is gone", all("Unhealthy")).await;
    assert_eq!(ids(&sick), ids(&healthy), "the devices stay, unhealthy");

    let rigd = Rigd::start(&rigd_socket, 1);
    let back = until(&mut stream, "rigd is back", all("Healthy")).await;
    assert_eq!(ids(&back), ids(&healthy));

    // A rigd that stops answering (stopped here; stuck, or systemd's socket with rigd
    // down, alike) is unhealthy once a poll waits past its bound, and healthy when it
    // answers again.
    rigd.signal(nix::sys::signal::Signal::SIGSTOP);
    until(&mut stream, "rigd is stuck", all("Unhealthy")).await;
    rigd.signal(nix::sys::signal::Signal::SIGCONT);
    until(&mut stream, "rigd answers again", all("Healthy")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_kubelet_gets_registered_again() {
    let dir = tempfile::tempdir().unwrap();
    let rigd_socket = dir.path().join("rigd.sock");
    let plugins = dir.path().join("device-plugins");
    std::fs::create_dir(&plugins).unwrap();
    let kubelet_socket = plugins.join("kubelet.sock");
    let _rigd = Rigd::start(&rigd_socket, 1);
    // The plugin first: it waits for the kubelet's socket.
    let plugin = Plugin::start(&kubelet_socket, &rigd_socket, &["--whole-gpus", "0"]);
    std::thread::sleep(Duration::from_millis(200));
    let mut kubelet = Kubelet::start(&kubelet_socket);
    let regs = kubelet.registrations(2).await;
    let mut gpu = dial(&kubelet_socket, &regs[0].endpoint).await;
    let mut stream = gpu
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    until(&mut stream, "GPU 0 is healthy", all("Healthy")).await;

    // The kubelet restarts: its socket goes and comes back, and it removes the plugins'.
    kubelet.stop().await;
    let mut kubelet = Kubelet::start(&kubelet_socket);
    let again = kubelet.registrations(2).await;
    assert_eq!(
        again.iter().map(|r| &r.resource_name).collect::<Vec<_>>(),
        ["rig.dev/gpu", "rig.dev/gpu-memory"]
    );
    // The old watch ended with the old servers; the new socket serves.
    let ended = tokio::time::timeout(WITHIN, async {
        loop {
            match stream.message().await {
                Ok(Some(_)) => continue,
                Ok(None) | Err(_) => return,
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "the old ListAndWatch stream ended");
    let mut gpu = dial(&kubelet_socket, &again[0].endpoint).await;
    let mut stream = gpu
        .list_and_watch(api::Empty {})
        .await
        .unwrap()
        .into_inner();
    let devices = until(&mut stream, "GPU 0 is healthy again", all("Healthy")).await;
    assert_eq!(ids(&devices), ["gpu0"]);
    assert!(
        plugin.log().contains("registering again"),
        "the plugin says why it registered again:\n{}",
        plugin.log()
    );
}
