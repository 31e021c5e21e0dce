//! `include/rig_capi.h` is what cbindgen makes of the crate: C and C++ programs compile
//! against the functions the library exports. `RIG_CAPI_BLESS=1` rewrites it.

use std::path::Path;

#[test]
fn the_header_is_up_to_date() {
    let crate_dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(crate_dir.join("cbindgen.toml")).unwrap();
    let mut made = Vec::new();
    cbindgen::Builder::new()
        .with_crate(crate_dir)
        .with_config(config)
        .generate()
        .expect("cbindgen reads the crate")
        .write(&mut made);
    let path = crate_dir.join("include/rig_capi.h");
    if std::env::var_os("RIG_CAPI_BLESS").is_some() {
        std::fs::write(&path, &made).unwrap();
    }
    let checked_in = std::fs::read(&path).unwrap_or_default();
    assert!(
        checked_in == made,
        "{} is out of date: run RIG_CAPI_BLESS=1 cargo test -p rig-capi --test header and commit it",
        path.display()
    );
}
