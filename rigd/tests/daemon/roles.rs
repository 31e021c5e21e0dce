//! Roles apart: being allowed to use GPUs (`daemon.group`, `[access]`) never makes a user
//! an administrator. Administrators are root, rigd's user and members of
//! `daemon.admin_group`, taken from the socket's credentials (`SO_PEERGROUPS`); only they
//! may stop or evict others' work or list others' clients, devices and processes. A user
//! still sees its own devices. The key is validated by `--check` as at start, and SIGHUP
//! applies it to connections from then on.
//!
//! The other users are this test binary run again as root, which takes the groups and then
//! the uid it is told to before it connects (`child_roles`). Parts that need root skip
//! without it.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use rig_proto::messages::{DeviceId, Request, Response};
use rig_testkit::rigd::{Rigd, holds_within};

/// The group GPU users are in (the socket's group and `[access]`), and the administrators'.
const USERS: u32 = 4242;
const ADMINS: u32 = 4243;

const SIM: &str = "[[sim]]\nprocessor = \"gfx1100\"\nmemory_bytes = 1073741824\n";

fn root_or_skip() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("not root: cannot run clients as other users; skipping");
        return false;
    }
    true
}

/// The documented setup: the socket's group and `[access]` are the GPU users' group.
fn config(admin_group: Option<u32>) -> String {
    let admins = admin_group.map_or(String::new(), |g| format!("admin_group = \"{g}\"\n"));
    format!(
        "[daemon]\ngroup = \"{USERS}\"\nmode = 0o660\n{admins}[access]\nany = false\ngroups = [\"{USERS}\"]\n{SIM}"
    )
}

fn start(config: &str) -> Rigd {
    let d = Rigd::start(config);
    std::fs::set_permissions(
        d.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    d
}

/// What `child_roles` answered, by name.
type Answers = BTreeMap<String, String>;

/// Runs `child_roles` as `uid` with supplementary `groups` against `d`, naming the device
/// `victim` of process `pid` as others' work.
fn as_user(d: &Rigd, uid: u32, groups: &[u32], victim: DeviceId, pid: u32) -> Answers {
    let groups: Vec<String> = groups.iter().map(u32::to_string).collect();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            rig_testkit::test_name!(child_roles),
            "--nocapture",
            "--test-threads=1",
        ])
        .env("RIGD_ROLES_SOCKET", &d.socket)
        .env("RIGD_ROLES_UID", uid.to_string())
        .env("RIGD_ROLES_GROUPS", groups.join(","))
        .env("RIGD_ROLES_DEVICE", victim.0.to_string())
        .env("RIGD_ROLES_PID", pid.to_string())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let answers: Answers = stdout
        .lines()
        .filter_map(|l| l.strip_prefix("RESULT "))
        .filter_map(|l| l.split_once(' '))
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    assert!(
        answers.contains_key("done"),
        "the child did not finish ({:?}): {stdout} {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    answers
}

/// How a request was answered: `ok`, or the error's code, and whether an error's message
/// names `daemon.admin_group`.
fn outcome(r: &Response) -> String {
    match r {
        Response::Error(e) => format!(
            "{:?}{}",
            e.code,
            if e.message.contains("daemon.admin_group") {
                "+key"
            } else {
                ""
            }
        ),
        _ => "ok".into(),
    }
}

/// The child half: takes `RIGD_ROLES_GROUPS` and then `RIGD_ROLES_UID`, connects, opens a
/// device of its own, then asks about and against the victim's work, printing each answer.
#[test]
fn child_roles() {
    let Ok(socket) = std::env::var("RIGD_ROLES_SOCKET") else {
        return;
    };
    use nix::unistd::{Gid, Uid, setgroups, setresgid, setresuid};
    let env = |k: &str| std::env::var(k).unwrap();
    let uid: u32 = env("RIGD_ROLES_UID").parse().unwrap();
    let groups: Vec<Gid> = env("RIGD_ROLES_GROUPS")
        .split(',')
        .filter(|g| !g.is_empty())
        .map(|g| Gid::from_raw(g.parse().unwrap()))
        .collect();
    let victim = DeviceId(env("RIGD_ROLES_DEVICE").parse().unwrap());
    let pid: u32 = env("RIGD_ROLES_PID").parse().unwrap();
    setgroups(&groups).unwrap();
    let nobody = Gid::from_raw(65534);
    setresgid(nobody, nobody, nobody).unwrap();
    let u = Uid::from_raw(uid);
    setresuid(u, u, u).unwrap();
    let say = |k: &str, v: &str| println!("\nRESULT {k} {v}");
    let mut c = rig_testkit::rigd::Client {
        conn: rig_proto::Connection::connect(std::path::Path::new(&socket), "roles").unwrap(),
    };
    let mine = c.open();
    match c.call(Request::ListDevices) {
        Response::Devices(v) => {
            let ids: Vec<String> = v.iter().map(|d| d.device.0.to_string()).collect();
            say("devices", &ids.join(","));
        }
        r => say("devices", &outcome(&r)),
    }
    say("mine", &mine.id().0.to_string());
    let r = c.call(Request::ShowDevice { device: mine.id() });
    say("show_mine", &outcome(&r));
    let r = c.call(Request::ShowDevice { device: victim });
    say("show", &outcome(&r));
    let r = c.call(Request::ListClients);
    say("clients", &outcome(&r));
    match c.call(Request::ListProcesses) {
        Response::Processes(p) => say("processes", &format!("ok{}", p.len())),
        r => say("processes", &outcome(&r)),
    }
    let r = c.call(Request::AdminStop { device: victim });
    say("stop", &outcome(&r));
    let r = c.call(Request::Evict { pid });
    say("evict", &outcome(&r));
    say("done", "");
}

fn lost(c: &mut rig_testkit::rigd::Client, id: DeviceId) -> Option<String> {
    match c.call(Request::ShowDevice { device: id }) {
        Response::Device(d) => d.info.lost.map(|f| f.to_string()),
        r => panic!("show: {r:?}"),
    }
}

/// The documented setup, no `daemon.admin_group`: a GPU user in rigd's group may use its
/// GPUs and see its own devices, and nothing of anyone else's, nor stop them; root may.
#[test]
fn gpu_users_are_not_administrators() {
    if !root_or_skip() {
        return;
    }
    let d = start(&config(None));
    let mut victim = d.client("victim");
    let o = victim.open();
    let me = std::process::id();
    let a = as_user(&d, 65534, &[USERS], o.id(), me);
    let refused = "PermissionDenied+key";
    for k in ["show", "clients", "processes", "stop", "evict"] {
        assert_eq!(a[k], refused, "{k}: {a:?}");
    }
    // Its own devices only, and its own device in full.
    assert_eq!(a["devices"], a["mine"], "{a:?}");
    assert_eq!(a["show_mine"], "ok", "{a:?}");
    assert_eq!(
        lost(&mut victim, o.id()),
        None,
        "the victim's device goes on"
    );
    // Root is an administrator.
    let mut root = d.client("root-admin");
    match root.call(Request::ListProcesses) {
        Response::Processes(p) => assert!(p.iter().any(|p| p.pid == me), "{p:?}"),
        r => panic!("{r:?}"),
    }
    assert!(matches!(
        root.call(Request::AdminStop { device: o.id() }),
        Response::Done
    ));
    assert_eq!(
        lost(&mut victim, o.id()).as_deref(),
        Some("stopped by the administrator")
    );
    let o2 = victim.open();
    match root.call(Request::Evict { pid: me }) {
        Response::Evicted { devices } => assert!(devices.contains(&o2.id()), "{devices:?}"),
        r => panic!("{r:?}"),
    }
    // The log says who did it, and why the devices were lost.
    let log = d.log();
    let line = |what: &str| {
        log.lines()
            .find(|l| l.contains(what))
            .unwrap_or_else(|| panic!("no {what:?} in\n{log}"))
    };
    let by = format!("by_user=root by_uid=0 by_pid={me} cause=administrator");
    let stopped = line("device stopped by an administrator");
    assert!(
        stopped.contains(&format!("device={} owner_pid={me} {by}", o.id().0)),
        "{stopped}"
    );
    let evicted = line("process evicted by an administrator");
    assert!(
        evicted.contains(&format!("pid={me} devices={} {by}", o2.id().0)),
        "{evicted}"
    );
    for id in [o.id(), o2.id()] {
        assert!(
            log.lines().any(|l| l.contains("device lost")
                && l.contains(&format!("device={} ", id.0))
                && l.contains("cause=administrator")),
            "{log}"
        );
    }
}

/// With `daemon.admin_group`, its members are administrators (from the socket's groups);
/// a member of the users' group only is not.
#[test]
fn members_of_the_admin_group_administer() {
    if !root_or_skip() {
        return;
    }
    let d = start(&config(Some(ADMINS)));
    let mut victim = d.client("victim");
    let o = victim.open();
    let me = std::process::id();
    let a = as_user(&d, 65534, &[USERS], o.id(), me);
    assert_eq!(a["stop"], "PermissionDenied+key", "{a:?}");
    assert_eq!(a["evict"], "PermissionDenied+key", "{a:?}");
    assert_eq!(a["processes"], "PermissionDenied+key", "{a:?}");
    assert_eq!(lost(&mut victim, o.id()), None);
    // An operator's account: in the users' group (to connect) and the administrators'.
    let a = as_user(&d, 65533, &[USERS, ADMINS], o.id(), me);
    assert_eq!(a["show"], "ok", "{a:?}");
    assert_eq!(a["clients"], "ok", "{a:?}");
    assert!(a["processes"].starts_with("ok"), "{a:?}");
    assert_ne!(a["processes"], "ok0", "{a:?}");
    assert_eq!(a["stop"], "ok", "{a:?}");
    assert!(
        d.log().lines().any(
            |l| l.contains("device stopped by an administrator") && l.contains("by_uid=65533 ")
        ),
        "{}",
        d.log()
    );
    // Evict finds the victim's pid (its device is already stopped).
    assert_eq!(a["evict"], "ok", "{a:?}");
    let devices: Vec<&str> = a["devices"].split(',').collect();
    assert!(devices.contains(&o.id().0.to_string().as_str()), "{a:?}");
    assert_eq!(
        lost(&mut victim, o.id()).as_deref(),
        Some("stopped by the administrator")
    );
}

/// SIGHUP puts a new `daemon.admin_group` in force for connections from then on.
#[test]
fn a_reload_makes_the_admin_group() {
    if !root_or_skip() {
        return;
    }
    let d = start(&config(None));
    let mut victim = d.client("victim");
    let o = victim.open();
    let me = std::process::id();
    let a = as_user(&d, 65533, &[USERS, ADMINS], o.id(), me);
    assert_eq!(a["stop"], "PermissionDenied+key", "{a:?}");
    std::fs::write(d.dir.path().join("rigd.toml"), config(Some(ADMINS))).unwrap();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(d.pid() as i32),
        nix::sys::signal::Signal::SIGHUP,
    )
    .unwrap();
    assert!(
        holds_within(Duration::from_secs(10), || d
            .log()
            .contains(&format!("daemon.admin_group={ADMINS}"))),
        "{}",
        d.log()
    );
    let a = as_user(&d, 65533, &[USERS, ADMINS], o.id(), me);
    assert_eq!(a["stop"], "ok", "{a:?}");
}

fn rigd(args: &[&str], config: &str) -> (Option<i32>, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("rigd.toml");
    std::fs::write(&p, config).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--config")
        .arg(&p)
        .args(args)
        .arg("--socket")
        .arg(dir.path().join("rigd.sock"))
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// `--check` refuses an administrators' group that does not exist, as a start does, naming
/// the key; a valid one is named in its answer.
#[test]
fn check_validates_the_admin_group() {
    let bad = format!("[daemon]\nadmin_group = \"no-such-group-rig\"\n{SIM}");
    for args in [&["--check"][..], &[][..]] {
        let (status, _, err) = rigd(args, &bad);
        assert_eq!(status, Some(2), "{args:?}: {err}");
        assert!(
            err.contains("daemon.admin_group") && err.contains("no-such-group-rig"),
            "{err}"
        );
    }
    let (status, out, err) = rigd(
        &["--check"],
        &format!("[daemon]\nadmin_group = \"{ADMINS}\"\n"),
    );
    assert_eq!(status, Some(0), "{err}");
    assert!(out.contains(&format!("gid {ADMINS}")), "{out}");
    let (status, out, _) = rigd(&["--check"], SIM);
    assert_eq!(status, Some(0));
    assert!(out.contains("root and rigd's user only"), "{out}");
}
