//! How the console writes times and quantities: UTC dates from Unix milliseconds (no
//! time zone database: reviewers compare times with the audit trail, which is UTC),
//! and large numbers with SI prefixes.

/// Days since 1970-01-01 as (year, month, day), proleptic Gregorian (Howard Hinnant's
/// `civil_from_days`).
pub(super) fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    (
        year,
        u32::try_from(month).unwrap_or(1),
        u32::try_from(day).unwrap_or(1),
    )
}

/// `2026-11-27 14:05:09 UTC`.
pub(super) fn utc(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let (y, m, d) = civil(secs.div_euclid(86_400));
    let t = secs.rem_euclid(86_400);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        t / 3600,
        t % 3600 / 60,
        t % 60
    )
}

/// `11-27`, for a chart's axis.
pub(super) fn month_day(days: i64) -> String {
    let (_, m, d) = civil(days);
    format!("{m:02}-{d:02}")
}

/// `1.5 G`, `320 k`, `12`.
pub(super) fn si(n: u64) -> String {
    const UNITS: [(u64, &str); 4] = [
        (1_000_000_000_000, "T"),
        (1_000_000_000, "G"),
        (1_000_000, "M"),
        (1_000, "k"),
    ];
    for (size, unit) in UNITS {
        if n >= size {
            let whole = n / size;
            let tenth = n % size * 10 / size;
            return if whole >= 100 || tenth == 0 {
                format!("{whole} {unit}")
            } else {
                format!("{whole}.{tenth} {unit}")
            };
        }
    }
    n.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_numbers_read_as_people_write_them() {
        assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
        assert_eq!(utc(1_795_745_109_000), "2026-11-27 02:05:09 UTC");
        assert_eq!(month_day(20_783), "11-26");
        assert_eq!(civil(-1), (1969, 12, 31));
        assert_eq!(si(999), "999");
        assert_eq!(si(1_500_000_000), "1.5 G");
        assert_eq!(si(250_000_000_000), "250 G");
        assert_eq!(si(2_000), "2 k");
    }
}
