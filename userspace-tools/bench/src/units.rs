//! Parsing and printing of sizes and durations given on the command line.

use std::time::Duration;

/// Parses "4096", "4k", "16K", "1M", "1MiB", "2g" (binary multiples: k = 1024).
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    if t.is_empty() {
        return Err("empty size".into());
    }
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(format!("size {s:?} does not start with a number"));
    }
    let n: u64 = num.parse().map_err(|_| format!("bad number in size {s:?}"))?;
    let mult: u64 = match unit.to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        _ => return Err(format!("unknown unit {unit:?} in size {s:?} (use k, M or G)")),
    };
    n.checked_mul(mult).ok_or_else(|| format!("size {s:?} overflows"))
}

/// Parses a non-zero size.
pub fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    match parse_size(s)? {
        0 => Err(format!("size {s:?} must be greater than zero")),
        n => Ok(n),
    }
}

/// Largest block (and buffer) size accepted: buffers are allocated whole, up front.
pub const MAX_BLOCK: u64 = 256 << 20;

/// Parses a non-zero block size of at most [`MAX_BLOCK`].
pub fn parse_block_size(s: &str) -> Result<u64, String> {
    match parse_nonzero_size(s)? {
        n if n > MAX_BLOCK => Err(format!("block size {s:?} is larger than the maximum, 256M")),
        n => Ok(n),
    }
}

/// Parses a comma-separated list of non-zero sizes ("4k,16k,1M").
pub fn parse_size_list(s: &str) -> Result<Vec<u64>, String> {
    let v: Vec<u64> = s.split(',').filter(|p| !p.trim().is_empty()).map(parse_nonzero_size).collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("empty list".into());
    }
    Ok(v)
}

/// Parses "1s", "500ms", "2m", "1.5" (seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let (num, mult) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| format!("bad duration {s:?} (e.g. 500ms, 1s, 2m)"))?;
    let secs = v * mult;
    if !secs.is_finite() || secs <= 0.0 {
        return Err(format!("duration {s:?} must be positive"));
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses fill levels: "50,80,90" (percent) or "0.5,0.8" (fractions); each must be in [0, 1).
pub fn parse_fill_list(s: &str) -> Result<Vec<f64>, String> {
    let v: Vec<f64> = s.split(',').filter(|p| !p.trim().is_empty()).map(parse_fill).collect::<Result<_, _>>()?;
    if v.is_empty() {
        return Err("empty list".into());
    }
    Ok(v)
}

/// One fill level: "80", "80%" or "0.8".
pub fn parse_fill(s: &str) -> Result<f64, String> {
    let t = s.trim().trim_end_matches('%');
    let v: f64 = t.parse().map_err(|_| format!("bad fill level {s:?}"))?;
    let f = if v > 1.0 { v / 100.0 } else { v };
    if !(0.0..1.0).contains(&f) {
        return Err(format!("fill level {s:?} must be below 100 %"));
    }
    Ok(f)
}

/// "4k", "1M", "16M", or bytes when not a round multiple.
pub fn fmt_size(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{}G", n >> 30)
    } else if n >= 1 << 20 && n.is_multiple_of(1 << 20) {
        format!("{}M", n >> 20)
    } else if n >= 1 << 10 && n.is_multiple_of(1 << 10) {
        format!("{}k", n >> 10)
    } else {
        format!("{n}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("4096"), Ok(4096));
        assert_eq!(parse_size("4k"), Ok(4096));
        assert_eq!(parse_size("16K"), Ok(16384));
        assert_eq!(parse_size("1M"), Ok(1 << 20));
        assert_eq!(parse_size("1MiB"), Ok(1 << 20));
        assert_eq!(parse_size("2g"), Ok(2 << 30));
        assert!(parse_size("").is_err());
        assert!(parse_size("k").is_err());
        assert!(parse_size("4x").is_err());
        assert!(parse_size("99999999999999999999G").is_err());
        assert!(parse_nonzero_size("0").is_err());
        assert_eq!(parse_block_size("256M"), Ok(256 << 20));
        assert!(parse_block_size("257M").is_err());
        assert!(parse_block_size("0").is_err());
        assert_eq!(parse_size_list("4k,16k,32k,64k,128k,1M,16M").unwrap().len(), 7);
        assert!(parse_size_list(",").is_err());
        assert!(parse_size_list("4k,0").is_err());
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1.5"), Ok(Duration::from_millis(1500)));
        assert!(parse_duration("0").is_err());
        assert!(parse_duration("-1s").is_err());
        assert!(parse_duration("abc").is_err());
    }

    #[test]
    fn fills() {
        assert_eq!(parse_fill_list("50,80,90").unwrap(), vec![0.5, 0.8, 0.9]);
        assert_eq!(parse_fill("0.8"), Ok(0.8));
        assert_eq!(parse_fill("80%"), Ok(0.8));
        assert_eq!(parse_fill("0"), Ok(0.0));
        assert!(parse_fill("100").is_err());
        assert!(parse_fill("x").is_err());
    }

    #[test]
    fn format() {
        assert_eq!(fmt_size(4096), "4k");
        assert_eq!(fmt_size(1 << 20), "1M");
        assert_eq!(fmt_size(16 << 20), "16M");
        assert_eq!(fmt_size(1000), "1000");
        assert_eq!(fmt_size(3 << 30), "3G");
    }
}
