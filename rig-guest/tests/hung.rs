//! A guest that does not finish in its time is killed, and the outcome says so.
//! Skipped, and says so, when QEMU, a kernel or busybox is missing.

use std::time::Duration;

#[test]
fn a_hung_guest_is_killed_at_its_limit_and_reported() {
    let host = match rig_guest::Host::find() {
        Ok(h) => h,
        Err(missing) => {
            eprintln!("skipped: {missing}");
            return;
        }
    };
    let work = tempfile::tempdir().unwrap();
    let limit = Duration::from_secs(3);
    let outcome = rig_guest::Guest::new(host, "/bin/sleep")
        .args(["600"])
        .timeout(limit)
        .run(work.path())
        .unwrap();
    assert!(outcome.timed_out, "{}", outcome.console);
    assert_eq!(outcome.status, None);
    assert!(!outcome.passed());
    assert!(outcome.wall >= limit && outcome.wall < limit + Duration::from_secs(5));
}
