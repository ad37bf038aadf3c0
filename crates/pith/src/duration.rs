//! Durations as people write them in flags, env and config: a whole number with a unit
//! (`500ms`, `30s`, `10m`, `12h`, `1d`, `2w`). One parser for every command.

use std::time::Duration;

/// Parse `s`; the error says what was wrong and shows the form.
pub fn parse(s: &str) -> Result<Duration, String> {
    let bad =
        || format!("{s:?} is not a duration; use a number with ms, s, m, h, d or w (e.g. 30s)");
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).ok_or_else(bad)?;
    let (n, unit) = s.split_at(split);
    let n: u64 = n.parse().map_err(|_| bad())?;
    let unit_ms: u64 = match unit {
        "ms" => 1,
        "s" => 1_000,
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        "w" => 7 * 86_400_000,
        _ => return Err(bad()),
    };
    n.checked_mul(unit_ms)
        .map(Duration::from_millis)
        .ok_or_else(bad)
}

/// `d` in the largest unit [`parse`] takes that writes it whole (`parse(&format(d)) == d` for
/// whole milliseconds).
pub fn format(d: Duration) -> String {
    let ms = d.as_millis();
    for (unit, size) in [
        ("w", 7 * 86_400_000),
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1_000),
    ] {
        if ms >= size && ms.is_multiple_of(size) {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_and_errors() {
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse("30m"), Ok(Duration::from_secs(1800)));
        assert_eq!(parse("1d"), Ok(Duration::from_secs(86_400)));
        assert!(parse("1x").unwrap_err().contains("use a number"));
        assert!(parse("d").is_err());
        assert!(parse("10").is_err());
        for text in ["500ms", "30s", "90s", "30m", "12h", "1d", "2w", "0ms"] {
            assert_eq!(format(parse(text).unwrap()), text);
        }
    }
}
