//! Errors with exit codes, size parsing, clocks and formatting helpers.

use std::fmt;

use ferrofs_engine::{Error, Pairing, PairingScheme, Timespec};

/// fsck(8) exit code: no errors.
pub const EXIT_OK: i32 = 0;
/// fsck(8) exit code: errors corrected.
pub const EXIT_CORRECTED: i32 = 1;
/// fsck(8) exit code: errors left uncorrected.
pub const EXIT_UNCORRECTED: i32 = 4;
/// fsck(8) exit code: operational error (cannot open the device, not a ferrofs...).
pub const EXIT_OPERATIONAL: i32 = 8;
/// fsck(8) exit code: usage or syntax error. All three tools use it for bad arguments.
pub const EXIT_USAGE: i32 = 16;
/// fsck(8) exit code: checking cancelled by user request.
pub const EXIT_CANCELLED: i32 = 32;
/// Generic failure of mkfs and dump.
pub const EXIT_FAILURE: i32 = 1;

/// An error to report as `error: <msg>` before exiting with `code`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolError {
    /// Exit code.
    pub code: i32,
    /// Message (without the `error: ` prefix).
    pub msg: String,
}

impl ToolError {
    /// An error with the given exit code.
    pub fn new(code: i32, msg: impl Into<String>) -> Self {
        ToolError { code, msg: msg.into() }
    }
    /// Operational error (exit 8).
    pub fn op(msg: impl Into<String>) -> Self {
        Self::new(EXIT_OPERATIONAL, msg)
    }
    /// Filesystem damaged beyond what the tool corrects (exit 4).
    pub fn damaged(msg: impl Into<String>) -> Self {
        Self::new(EXIT_UNCORRECTED, msg)
    }
    /// Usage error (exit 16).
    pub fn usage(msg: impl Into<String>) -> Self {
        Self::new(EXIT_USAGE, msg)
    }
    /// Generic failure (exit 1).
    pub fn fail(msg: impl Into<String>) -> Self {
        Self::new(EXIT_FAILURE, msg)
    }
    /// Same error with another exit code.
    pub fn with_code(mut self, code: i32) -> Self {
        self.code = code;
        self
    }
}

impl fmt::Display for ToolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.msg)
    }
}

impl std::error::Error for ToolError {}

/// Parse a size like `4096`, `2k`, `128KiB`, `256M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let digits_end = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(digits_end);
    if num.is_empty() {
        return Err(format!("invalid size '{s}': expected a number with an optional k/M/G suffix"));
    }
    let n: u64 = num.parse().map_err(|_| format!("invalid size '{s}': number too large"))?;
    let mult: u64 = match suffix.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        "t" | "tb" | "tib" => 1 << 40,
        _ => return Err(format!("invalid size '{s}': unknown suffix '{suffix}' (use k, M, G)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("invalid size '{s}': too large"))
}

/// Parse a size that must fit in 32 bits.
pub fn parse_size_u32(s: &str) -> Result<u32, String> {
    let v = parse_size(s)?;
    u32::try_from(v).map_err(|_| format!("size '{s}' is too large (at most 4 GiB - 1)"))
}

/// Parse `--pairing`: the page pairing of an MLC NAND chip, `dist3` (Linux's
/// `dist3_pairing_scheme`, e.g. Hynix H27UCG8T2ETR-BC, Toshiba TC58TEG5DCLTA00) or `adjacent` (pages 2k and 2k + 1).
pub fn parse_pairing(s: &str) -> Result<Pairing, String> {
    let scheme = match s {
        "dist3" => PairingScheme::Dist3,
        "adjacent" => PairingScheme::Adjacent,
        _ => return Err(format!("unknown pairing '{s}': dist3 or adjacent")),
    };
    Ok(Pairing { groups: 2, scheme })
}

/// Human-readable binary size (`12.5 MiB`).
pub fn human(bytes: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < U.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", U.get(i).copied().unwrap_or("B"))
    }
}

/// The current time as an engine timestamp.
pub fn now() -> Timespec {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => Timespec { sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX), nsec: d.subsec_nanos() },
        Err(_) => Timespec::default(),
    }
}

/// A random 64-bit value (for volume serials): /dev/urandom, or the clock and pid.
pub fn random_u64() -> u64 {
    use std::io::Read;
    let mut b = [0u8; 8];
    if let Ok(mut f) = std::fs::File::open("/dev/urandom") {
        if f.read_exact(&mut b).is_ok() {
            let v = u64::from_le_bytes(b);
            if v != 0 {
                return v;
            }
        }
    }
    let t = now();
    (t.sec as u64).rotate_left(32) ^ u64::from(t.nsec) ^ u64::from(std::process::id()).rotate_left(17) ^ 0x9e37_79b9_7f4a_7c15
}

/// The errno name of an engine error (`ENOSPC`...), for messages.
pub fn errno_name(e: Error) -> &'static str {
    match e {
        Error::NotFound => "ENOENT",
        Error::Exists => "EEXIST",
        Error::NotEmpty => "ENOTEMPTY",
        Error::NotDir => "ENOTDIR",
        Error::IsDir => "EISDIR",
        Error::NameTooLong => "ENAMETOOLONG",
        Error::Invalid => "EINVAL",
        Error::NoSpace => "ENOSPC",
        Error::NoMem => "ENOMEM",
        Error::Io => "EIO",
        Error::Corrupt => "EUCLEAN (corrupted data)",
        Error::ReadOnly => "EROFS",
        Error::NoData => "ENODATA",
        Error::Range => "ERANGE",
        Error::TooManyLinks => "EMLINK",
        Error::FileTooBig => "EFBIG",
        Error::NotPermitted => "EPERM",
        Error::NotSupported => "EOPNOTSUPP",
        Error::BadFormat => "not a ferrofs filesystem or incompatible format",
        Error::NoSuchAddress => "ENXIO",
        Error::PowerCut => "EIO (power cut)",
    }
}

/// `ls -l`-style mode string (`drwxr-xr-x`).
pub fn mode_string(mode: u32) -> String {
    use ferrofs_engine::format::*;
    let t = match mode & S_IFMT {
        S_IFDIR => 'd',
        S_IFLNK => 'l',
        S_IFCHR => 'c',
        S_IFBLK => 'b',
        S_IFIFO => 'p',
        S_IFSOCK => 's',
        S_IFREG => '-',
        _ => '?',
    };
    let mut s = String::with_capacity(10);
    s.push(t);
    let bit = |m: u32, c: char| if mode & m != 0 { c } else { '-' };
    s.push(bit(0o400, 'r'));
    s.push(bit(0o200, 'w'));
    s.push(match (mode & 0o100 != 0, mode & 0o4000 != 0) {
        (true, true) => 's',
        (false, true) => 'S',
        (true, false) => 'x',
        (false, false) => '-',
    });
    s.push(bit(0o040, 'r'));
    s.push(bit(0o020, 'w'));
    s.push(match (mode & 0o010 != 0, mode & 0o2000 != 0) {
        (true, true) => 's',
        (false, true) => 'S',
        (true, false) => 'x',
        (false, false) => '-',
    });
    s.push(bit(0o004, 'r'));
    s.push(bit(0o002, 'w'));
    s.push(match (mode & 0o001 != 0, mode & 0o1000 != 0) {
        (true, true) => 't',
        (false, true) => 'T',
        (true, false) => 'x',
        (false, false) => '-',
    });
    s
}

/// A timestamp as `seconds.nanoseconds` and, when representable, an UTC date.
pub fn fmt_time(t: Timespec) -> String {
    format!("{} ({}.{:09})", utc_date(t.sec), t.sec, t.nsec)
}

/// `YYYY-MM-DD hh:mm:ss` (UTC) of a Unix time.
pub fn utc_date(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // civil from days (Howard Hinnant's algorithm)
    let z = days.saturating_add(719_468);
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe.saturating_add(era.saturating_mul(400));
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y.saturating_add(1) } else { y };
    format!("{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02}", rem / 3600, (rem / 60) % 60, rem % 60)
}

/// Printable form of a name (non-UTF-8 bytes escaped as `\xNN`, control characters escaped).
pub fn show_name(name: &[u8]) -> String {
    let mut s = String::with_capacity(name.len());
    for chunk in name.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c.is_control() || c == '\\' {
                s.extend(c.escape_default());
            } else {
                s.push(c);
            }
        }
        for b in chunk.invalid() {
            s.push_str(&format!("\\x{b:02x}"));
        }
    }
    s
}

/// Encode a Linux `dev_t` as the 32-bit "new" encoding (`new_encode_dev`) stored in inodes.
pub fn encode_rdev(rdev: u64) -> u32 {
    let major = ((rdev >> 8) & 0xfff) | ((rdev >> 32) & !0xfff);
    let minor = (rdev & 0xff) | ((rdev >> 12) & !0xff);
    ((minor & 0xff) | ((major & 0xfff) << 8) | ((minor & !0xff) << 12)) as u32
}

/// Decode the 32-bit "new" device encoding into (major, minor).
pub fn decode_rdev(v: u32) -> (u32, u32) {
    let major = (v & 0xfff00) >> 8;
    let minor = (v & 0xff) | ((v >> 12) & 0xfff00);
    (major, minor)
}

/// Turn a clap parse error into an exit: help and version print and exit 0; every other
/// error prints the message and the usage line and exits 16 (fsck(8)'s usage error).
pub fn clap_exit<C: clap::CommandFactory>(e: clap::Error) -> ! {
    use clap::error::ErrorKind;
    match e.kind() {
        ErrorKind::DisplayHelp | ErrorKind::DisplayVersion => {
            let _ = e.print();
            std::process::exit(0)
        }
        _ => {
            let text = e.render().to_string();
            eprint!("{text}");
            if !text.contains("Usage:") {
                eprintln!("\n{}", C::command().render_usage());
            }
            std::process::exit(EXIT_USAGE)
        }
    }
}

/// Restore the default action of SIGPIPE (terminate quietly), as C tools have it. Rust ignores
/// SIGPIPE, so writing a report into a closed pipe (`fsck.ferrofs /dev/mtd0 | head`) would make
/// `println!` panic; every tool calls this first.
pub fn default_sigpipe() {
    // SAFETY: signal(2) with SIG_DFL installs no handler; called at the start of main, before
    // any thread exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

static CANCEL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

extern "C" fn on_cancel_signal(_sig: libc::c_int) {
    CANCEL.store(true, std::sync::atomic::Ordering::Relaxed);
}

/// From now on SIGINT and SIGTERM only ask the program to stop ([`cancelled`] turns true):
/// a repair then finishes the operation at hand, writes its checkpoint and exits 32, instead
/// of dying between two writes.
pub fn cancel_on_signals() {
    let h: extern "C" fn(libc::c_int) = on_cancel_signal;
    // SAFETY: the handler only stores to an atomic (async-signal-safe); signal(2) is called
    // from the main thread.
    unsafe {
        libc::signal(libc::SIGINT, h as libc::sighandler_t);
        libc::signal(libc::SIGTERM, h as libc::sighandler_t);
    }
}

/// Whether SIGINT or SIGTERM arrived since [`cancel_on_signals`].
pub fn cancelled() -> bool {
    CANCEL.load(std::sync::atomic::Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("2k"), Ok(2048));
        assert_eq!(parse_size("128KiB"), Ok(128 << 10));
        assert_eq!(parse_size("256M"), Ok(256 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert!(parse_size("x").is_err());
        assert!(parse_size("12q").is_err());
        assert!(parse_size("99999999999999999999").is_err());
        assert!(parse_size_u32("4G").is_err());
    }

    #[test]
    fn rdev_roundtrip() {
        // major 8, minor 1 (sda1) in glibc's dev_t
        let d = (8u64 << 8) | 1;
        let e = encode_rdev(d);
        assert_eq!(decode_rdev(e), (8, 1));
        // a large minor
        let d = libc::makedev(259, 70000);
        assert_eq!(decode_rdev(encode_rdev(d)), (259, 70000));
    }

    #[test]
    fn modes_and_dates() {
        assert_eq!(mode_string(0o40755), "drwxr-xr-x");
        assert_eq!(mode_string(0o104755), "-rwsr-xr-x");
        assert_eq!(mode_string(0o41777), "drwxrwxrwt");
        assert_eq!(utc_date(0), "1970-01-01 00:00:00");
        assert_eq!(utc_date(1_700_000_000), "2023-11-14 22:13:20");
        assert_eq!(show_name(b"a\nb\xff"), "a\\nb\\xff");
    }
}
