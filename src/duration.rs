//! Duration flags: a bare number means seconds, otherwise humantime's forms (`500ms`, `10m`,
//! `1h30m`), bounded to what a lock lease can sensibly be.
//!
//! humantime alone is a trap here: it reads `10M` as ten *months*, accepts `0s` (Redis rejects
//! `PX 0`) and rejects a bare `90`. This wrapper refuses month and year units outright, because a
//! lease measured in months is always a typo for minutes.

use std::time::Duration;

/// The longest duration any flag accepts.
pub(crate) const MAX: Duration = Duration::from_secs(30 * 24 * 3600);

/// The units a duration may be written in (humantime's own list names months and years too,
/// which are refused here).
const UNITS: &str = "ms, s, m or min, h, d, w";

/// Parses a duration flag value; the error is one line suitable after `invalid value`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    parse_at_least(text, Duration::from_millis(1), "")
}

/// [`parse`], with a higher floor: `why` says what needs it (after "must be at least N").
pub(crate) fn parse_at_least(text: &str, floor: Duration, why: &str) -> Result<Duration, String> {
    parse_within(text, floor, MAX, why)
}

/// [`parse`], from `floor` to `ceiling` (what the lock's history can span, rather than what a
/// lease can sensibly be): `why` says what needs the floor.
pub(crate) fn parse_within(
    text: &str,
    floor: Duration,
    ceiling: Duration,
    why: &str,
) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration; use e.g. 30s, 10m or 1h".into());
    }
    if text.starts_with('-') {
        return Err("must be positive; use e.g. 30s, 10m or 1h".into());
    }
    let duration = if text.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let seconds: f64 = text
            .parse()
            .map_err(|_| format!("'{text}' is not a number of seconds"))?;
        if seconds > ceiling.as_secs_f64() {
            return Err(too_long(ceiling));
        }
        Duration::from_secs_f64(seconds)
    } else {
        refuse_ambiguous_units(text)?;
        humantime::parse_duration(text).map_err(|_| {
            format!(
                "'{text}' is not a duration; use a number of seconds, or units {UNITS} (e.g. 500ms, 30s, 10m, 1h30m)"
            )
        })?
    };
    if duration < floor {
        return Err(format!("must be at least {}{why}", display(floor)));
    }
    if duration > ceiling {
        return Err(too_long(ceiling));
    }
    Ok(duration)
}

fn too_long(ceiling: Duration) -> String {
    format!(
        "longer than the limit of {} days",
        ceiling.as_secs() / 86_400
    )
}

/// Rejects months and years: `M` is months to humantime but minutes to most people.
fn refuse_ambiguous_units(text: &str) -> Result<(), String> {
    let units = text
        .split(|c: char| c.is_ascii_digit() || c == '.' || c.is_whitespace())
        .filter(|unit| !unit.is_empty());
    for unit in units {
        match unit {
            "M" | "month" | "months" => {
                return Err(format!(
                    "'{unit}' means months; write 'm' or 'min' for minutes"
                ));
            }
            "y" | "Y" | "year" | "years" => {
                return Err(format!("'{unit}' (years) is not a sensible lease"));
            }
            _ => {}
        }
    }
    Ok(())
}

/// Short human form: `850ms`, `4.2s`, `3m 12s`, `2h 5m`.
pub(crate) fn display(duration: Duration) -> String {
    let ms = duration.as_millis();
    if ms < 1000 {
        format!("{ms}ms")
    } else if ms < 60_000 {
        format!("{:.1}s", duration.as_secs_f64())
    } else {
        let secs = duration.as_secs();
        let rounded = if secs >= 3600 { secs / 60 * 60 } else { secs };
        humantime::format_duration(Duration::from_secs(rounded)).to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_seconds_and_humantime_forms() {
        assert_eq!(parse("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse("1.5"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("10min"), Ok(Duration::from_secs(600)));
        assert_eq!(parse("1h 30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("30d"), Ok(MAX));
    }

    #[test]
    fn rejects_zero_negative_ambiguous_and_absurd() {
        for bad in [
            "", "0", "0s", "0.0001", "-5", "-5s", "abc", "10M", "2months", "1y", "31d", "1e9",
        ] {
            assert!(parse(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse("10M").unwrap_err().contains("months"));
    }

    /// The messages name only what is accepted, in words a person writes.
    #[test]
    fn messages_name_the_accepted_units_and_limits() {
        let unknown = parse("10x").unwrap_err();
        assert!(unknown.contains("ms, s, m or min, h, d, w"), "{unknown}");
        assert!(
            !unknown.contains("month") && !unknown.contains("year"),
            "{unknown}"
        );
        assert_eq!(
            parse("31d").unwrap_err(),
            "longer than the limit of 30 days"
        );
        assert_eq!(parse("0").unwrap_err(), "must be at least 1ms");
        assert_eq!(
            parse_at_least("0.5", Duration::from_secs(1), " for run").unwrap_err(),
            "must be at least 1.0s for run"
        );
        let year = Duration::from_secs(366 * 86_400);
        assert_eq!(
            parse_within("365d", Duration::from_secs(60), year, ""),
            Ok(Duration::from_secs(365 * 86_400))
        );
        assert_eq!(
            parse_within("367d", Duration::from_secs(60), year, "").unwrap_err(),
            "longer than the limit of 366 days"
        );
    }

    #[test]
    fn displays_short_forms() {
        assert_eq!(display(Duration::from_millis(850)), "850ms");
        assert_eq!(display(Duration::from_millis(4200)), "4.2s");
        assert_eq!(display(Duration::from_secs(192)), "3m 12s");
        assert_eq!(display(Duration::from_secs(7530)), "2h 5m");
    }
}
