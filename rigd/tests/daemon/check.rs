//! `rigd --check` refuses what a start refuses: the same configuration, the same `RUST_LOG`,
//! the same exit code (2) and the key named.

use std::process::Command;

use rig_testkit::rigd::SIM;

/// Runs rigd with `config` and `rust_log` (unset when `None`), `--check` first and then to
/// start, and returns (exit code, stderr) of each.
fn check_then_start(config: &str, rust_log: Option<&str>) -> [(Option<i32>, String); 2] {
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(&cfg, config).unwrap();
    [true, false].map(|check| {
        // A start that is not refused serves; `timeout` stops it (and the test fails).
        let mut cmd = Command::new("timeout");
        cmd.arg("10")
            .arg(env!("CARGO_BIN_EXE_rigd"))
            .arg("--config")
            .arg(&cfg)
            .arg("--socket")
            .arg(dir.path().join("rigd.sock"))
            .env_remove("RUST_LOG")
            .env_remove("JOURNAL_STREAM");
        if check {
            cmd.arg("--check");
        }
        if let Some(v) = rust_log {
            cmd.env("RUST_LOG", v);
        }
        let out = cmd.output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    })
}

#[test]
fn a_socket_group_that_does_not_exist_is_refused_by_the_check_and_the_start() {
    for key in ["daemon", "metrics"] {
        let config = format!("{SIM}\n[{key}]\ngroup = \"no-such-group-rig\"\n");
        for (code, err) in check_then_start(&config, None) {
            assert_eq!(code, Some(2), "{err}");
            assert!(
                err.contains(&format!("{key}.group")) && err.contains("no-such-group-rig"),
                "{err}"
            );
        }
    }
}

#[test]
fn an_invalid_rust_log_is_refused_by_the_check_and_the_start() {
    for (code, err) in check_then_start(SIM, Some("rigd=loud")) {
        assert_eq!(code, Some(2), "{err}");
        assert!(
            err.contains("RUST_LOG") && err.contains("rigd=loud"),
            "{err}"
        );
        // The parser's reason once, and rigd's name once.
        assert_eq!(err.matches("expected one of").count(), 1, "{err}");
        assert!(!err.contains("rigd: rigd:"), "{err}");
    }
}

#[test]
fn a_log_level_typo_is_refused_with_the_valid_levels() {
    for typo in ["verbose", "err", "warning"] {
        let config = format!("[daemon]\nlog = \"{typo}\"\n{SIM}");
        for (code, err) in check_then_start(&config, None) {
            assert_eq!(code, Some(2), "{typo}: {err}");
            assert!(
                err.contains("daemon.log")
                    && err.contains(typo)
                    && err.contains("trace, debug, info, warn, error, off"),
                "{err}"
            );
        }
    }
    for (code, err) in check_then_start(SIM, Some("warning")) {
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains("RUST_LOG"), "{err}");
    }
}

#[test]
fn the_man_page_is_rigd_8_and_names_every_option() {
    let out = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--man")
        .output()
        .unwrap();
    assert!(out.status.success());
    let page = String::from_utf8(out.stdout).unwrap();
    assert!(page.contains(".TH rigd 8"), "{page}");
    for option in ["config", "socket", "check", "man"] {
        assert!(
            page.contains(&format!("\\-\\-{option}")),
            "--{option}: {page}"
        );
    }
}

#[test]
fn vfio_entries_that_do_not_parse_or_repeat_are_refused_by_the_check_and_the_start() {
    for (allow, says) in [
        (
            "\"0000:03:0.0\"",
            "vfio.allow \"0000:03:0.0\" is not a PCI address",
        ),
        (
            "\"03:00.0\", \"0000:03:00.0\"",
            "vfio.allow names 0000:03:00.0 twice (entries 1 and 2)",
        ),
    ] {
        let config = format!("{SIM}\n[vfio]\nallow = [{allow}]\n");
        for (code, err) in check_then_start(&config, None) {
            assert_eq!(code, Some(2), "{err}");
            assert!(err.contains(says), "{err}");
        }
    }
    // Valid entries pass the check.
    let dir = tempfile::tempdir().unwrap();
    let cfg = dir.path().join("rigd.toml");
    std::fs::write(
        &cfg,
        format!("{SIM}\n[vfio]\nallow = [\"0000:03:00.0\", \"1002:744c\"]\n"),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rigd"))
        .arg("--config")
        .arg(&cfg)
        .arg("--check")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
