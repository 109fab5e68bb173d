//! Fuzz target: the input is the raw NAND image (2 KiB pages, 32 KiB blocks, 32 blocks = 1 MiB; bytes past
//! the input are erased), then mount, walk, read, write, unmount, remount. See `ferrofs_fuzz::run_raw`.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    ferrofs_fuzz::run_raw(data);
});
