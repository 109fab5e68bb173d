//! Fuzz target: patches (optionally CRC-fixed) over a valid populated image, then mount, walk,
//! read everything, write, sync, unmount, remount. See `ferrofs_fuzz::run_patched`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrofs_fuzz::run_patched(data);
});
