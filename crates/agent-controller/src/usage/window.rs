//! The windows usage is counted in: the day window, which starts every day at the budget's
//! `dailyResetTime` (UTC), as LiteLLM's `tpd`/`rpd` counters do; and the cost period, which
//! starts with the first spend and lasts `cost.period`, as LiteLLM's `budget_duration`. Times are
//! Unix seconds.

use jiff::tz::TimeZone;
use jiff::{Span, Timestamp};

const DAY: i64 = 86_400;

/// A day window: `[start, reset)`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DayWindow {
    pub start: i64,
    pub reset: i64,
}

impl DayWindow {
    /// The window `now` is in, for a reset time `HH:MM` (UTC; the API admits only valid ones,
    /// anything else counts as midnight).
    pub fn containing(now: i64, reset_time: &str) -> Self {
        let offset = time_of_day(reset_time).unwrap_or(0);
        let start = (now - offset).div_euclid(DAY) * DAY + offset;
        DayWindow {
            start,
            reset: start + DAY,
        }
    }
}

/// Seconds after midnight of `HH:MM`.
fn time_of_day(text: &str) -> Option<i64> {
    let (hours, minutes) = text.split_once(':')?;
    let (hours, minutes): (i64, i64) = (hours.parse().ok()?, minutes.parse().ok()?);
    ((0..24).contains(&hours) && (0..60).contains(&minutes)).then_some(hours * 3600 + minutes * 60)
}

/// When a cost period that started at `start` ends, for a period `<n>(s|m|h|d|mo)` (a month is a
/// calendar month in UTC); None for a period the API would not admit.
pub fn period_end(start: i64, period: &str) -> Option<i64> {
    let digits = period.find(|c: char| !c.is_ascii_digit())?;
    let (count, unit) = period.split_at(digits);
    let count: i64 = count.parse().ok().filter(|n| *n > 0)?;
    let seconds = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => DAY,
        "mo" => {
            let from = Timestamp::from_second(start).ok()?.to_zoned(TimeZone::UTC);
            let to = from.checked_add(Span::new().try_months(count).ok()?).ok()?;
            return Some(to.timestamp().as_second());
        }
        _ => return None,
    };
    Some(start + count * seconds)
}

/// Unix seconds as a Kubernetes time.
pub fn time(seconds: i64) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Time {
    k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
        Timestamp::from_second(seconds).unwrap_or(Timestamp::UNIX_EPOCH),
    )
}

/// A Kubernetes time as Unix seconds.
pub fn seconds(time: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> i64 {
    time.0.as_second()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(text: &str) -> i64 {
        text.parse::<Timestamp>().expect("a time").as_second()
    }

    #[test]
    fn the_day_window_starts_at_the_reset_time_in_utc() {
        let midnight = DayWindow::containing(at("2026-11-29T13:45:00Z"), "00:00");
        assert_eq!(
            midnight,
            DayWindow {
                start: at("2026-11-29T00:00:00Z"),
                reset: at("2026-11-30T00:00:00Z")
            }
        );
        // Before today's reset time: the window began yesterday at that time.
        let early = DayWindow::containing(at("2026-11-29T05:59:59Z"), "06:00");
        assert_eq!(early.start, at("2026-11-28T06:00:00Z"));
        let late = DayWindow::containing(at("2026-11-29T06:00:00Z"), "06:00");
        assert_eq!(late.start, at("2026-11-29T06:00:00Z"));
        assert_eq!(late.reset, at("2026-11-30T06:00:00Z"));
        assert_eq!(
            DayWindow::containing(at("2026-11-29T13:45:00Z"), "25:00"),
            midnight
        );
    }

    #[test]
    fn a_cost_period_lasts_its_count_of_units() {
        let start = at("2026-01-31T10:00:00Z");
        assert_eq!(period_end(start, "30s"), Some(start + 30));
        assert_eq!(period_end(start, "5m"), Some(start + 300));
        assert_eq!(period_end(start, "2h"), Some(start + 7200));
        assert_eq!(period_end(start, "1d"), Some(start + DAY));
        // A calendar month (jiff clamps the 31st to the month's last day).
        assert_eq!(period_end(start, "1mo"), Some(at("2026-02-28T10:00:00Z")));
        assert_eq!(period_end(start, "1w"), None);
        assert_eq!(period_end(start, "d"), None);
    }

    #[test]
    fn times_convert_both_ways() {
        let t = at("2026-11-29T00:00:00Z");
        assert_eq!(seconds(&time(t)), t);
    }
}
