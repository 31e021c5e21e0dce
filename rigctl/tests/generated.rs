//! What rigctl makes of its own command line, for packagers and shells: its manual page
//! (clap_mangen) and completion scripts (clap_complete); and `rigctl version` with no rigd
//! to reach. rigd's page: rigd/tests/check.rs.

use std::process::Command;

fn run(program: &str, args: &[&str]) -> (bool, String, String) {
    let o = Command::new(program)
        .args(args)
        .env("RIG_SOCKET", "/nonexistent/rigd.sock")
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

#[test]
fn the_man_page_names_its_section_and_every_verb() {
    let (ok, page, err) = run(env!("CARGO_BIN_EXE_rigctl"), &["man"]);
    assert!(ok, "{err}");
    assert!(page.contains(".TH rigctl 1"), "{page}");
    for verb in ["status", "gpus", "evict", "version", "completions"] {
        assert!(page.contains(verb), "{verb} missing from rigctl(1)");
    }
}

#[test]
fn completions_for_each_shell() {
    for (shell, marker) in [
        ("bash", "complete -F"),
        ("zsh", "#compdef rigctl"),
        ("fish", "complete -c rigctl"),
    ] {
        let (ok, script, err) = run(env!("CARGO_BIN_EXE_rigctl"), &["completions", shell]);
        assert!(ok, "{shell}: {err}");
        assert!(script.contains(marker), "{shell}: {script}");
        assert!(script.contains("evict"), "{shell}");
    }
}

#[test]
fn version_says_rigctls_own_and_why_rigd_cannot_say_its() {
    let (ok, out, err) = run(env!("CARGO_BIN_EXE_rigctl"), &["version"]);
    assert!(!ok);
    assert!(
        out.starts_with(concat!("rigctl ", env!("CARGO_PKG_VERSION"), " (protocol ")),
        "{out}"
    );
    assert!(err.contains("rigd is not running"), "{err}");
    let (_, out, _) = run(env!("CARGO_BIN_EXE_rigctl"), &["--json", "version"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["protocol"], rig_proto::VERSION, "{v}");
    assert!(v["rigd"].is_null() && v["error"].is_string(), "{v}");
}
