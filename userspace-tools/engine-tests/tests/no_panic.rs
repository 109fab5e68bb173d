//! Runs `no-panic/check.sh`: the engine, monomorphized and compiled with overflow checks, must
//! contain no panic site. Without the kernel's rustc (/usr/bin/rustc, or `RUSTC_FOR_NO_PANIC`)
//! or objdump the check cannot run, and fails saying so (`qemu/install-deps.sh` installs both).

use std::path::Path;
use std::process::Command;

#[test]
fn engine_has_no_panic_site() {
    let rustc = std::env::var("RUSTC_FOR_NO_PANIC").unwrap_or_else(|_| "/usr/bin/rustc".into());
    assert!(Path::new(&rustc).exists(), "cannot run the no-panic check: {rustc} is missing (set RUSTC_FOR_NO_PANIC)");
    assert!(Command::new("objdump").arg("--version").output().is_ok(), "cannot run the no-panic check: objdump is missing");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("no-panic/check.sh");
    let out = Command::new("bash").arg(&script).env("RUSTC", &rustc).output().expect("run check.sh");
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
