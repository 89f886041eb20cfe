//! Byte sizes for humans: `16MiB`, `512KB`, `1048576`, as flags take them and messages print them.
//!
//! Units follow dd(1) and IEC: `K`, `M`, `G` and `KiB`, `MiB`, `GiB` are powers of 1024; `KB`, `MB`,
//! `GB` powers of 1000; `B` or no unit is bytes. Case and a space before the unit do not matter.

/// Parses a byte size that must be greater than zero (a flag's value parser).
pub fn parse_nonzero_size(s: &str) -> Result<u64, String> {
    let n = parse_size(s)?;
    if n == 0 {
        return Err(format!(
            "`{}` must be greater than zero",
            crate::output::escape_controls(s)
        ));
    }
    Ok(n)
}

/// Parses a byte size such as `16MiB`, `16M`, `500kB` or `1048576`.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let bad = || {
        format!(
            "`{}` is not a byte size; use e.g. 16MiB, 512KiB, 1GB or a number of bytes",
            crate::output::escape_controls(s)
        )
    };
    let factor: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kib" => 1 << 10,
        "m" | "mib" => 1 << 20,
        "g" | "gib" => 1 << 30,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        _ => return Err(bad()),
    };
    if number.is_empty() {
        return Err(bad());
    }
    if let Ok(n) = number.parse::<u64>() {
        return n
            .checked_mul(factor)
            .ok_or_else(|| format!("`{}` is too large", crate::output::escape_controls(s)));
    }
    let x: f64 = number.parse().map_err(|_| bad())?;
    let bytes = x * factor as f64;
    if !bytes.is_finite() || bytes >= u64::MAX as f64 {
        return Err(format!(
            "`{}` is too large",
            crate::output::escape_controls(s)
        ));
    }
    Ok(bytes.round() as u64)
}

/// A size for humans, in the largest binary unit that keeps a whole number or one decimal:
/// `16 MiB`, `1.5 KiB`, `300 B`.
pub fn format_size(n: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, f) in UNITS {
        if n >= f {
            let x = n as f64 / f as f64;
            return if n.is_multiple_of(f) {
                format!("{} {unit}", n / f)
            } else {
                format!("{x:.1} {unit}")
            };
        }
    }
    format!("{n} B")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_sizes() {
        for (s, want) in [
            ("16MiB", 16 << 20),
            ("16M", 16 << 20),
            ("16 mib", 16 << 20),
            ("512KiB", 512 << 10),
            ("1k", 1024),
            ("500kB", 500_000),
            ("1GB", 1_000_000_000),
            ("2GiB", 2 << 30),
            ("1048576", 1_048_576),
            ("10B", 10),
            ("1.5KiB", 1536),
            (" 8MiB ", 8 << 20),
        ] {
            assert_eq!(parse_size(s), Ok(want), "{s}");
        }
        for s in [
            "",
            "MiB",
            "16XB",
            "-1",
            "abc",
            "1e3",
            "99999999999999999999GiB",
        ] {
            assert!(parse_size(s).is_err(), "{s}");
        }
        assert!(parse_nonzero_size("0").is_err());
        assert!(parse_nonzero_size("0MiB").is_err());
    }

    #[test]
    fn formats_sizes() {
        assert_eq!(format_size(16 << 20), "16 MiB");
        assert_eq!(format_size(1536), "1.5 KiB");
        assert_eq!(format_size(300), "300 B");
        assert_eq!(format_size(3 << 30), "3 GiB");
    }
}
