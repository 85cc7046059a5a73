//! A workflow's cron schedule: five fields (minute hour day-of-month month day-of-week) or a
//! macro (`@yearly`, `@annually`, `@monthly`, `@weekly`, `@daily`, `@midnight`, `@hourly`),
//! read in an IANA time zone (UTC when unset), so `0 9 * * *` in Europe/Berlin is 09:00 there
//! in summer and in winter. Missed fire times are not caught up one by one: as a CronJob, only
//! the latest one starts a run.

use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};
use jiff::Timestamp;
use jiff::tz::TimeZone;

/// Beyond this many missed fire times, as the CronJob controller, say so (the latest still
/// runs); counting stops there, so a long outage costs no more than this.
pub const MAX_MISSED: usize = 100;

/// Why a schedule cannot be read or has no next fire time. Each names what the user wrote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ScheduleError {
    #[error("invalid schedule {expression:?}: {reason}")]
    Expression { expression: String, reason: String },
    #[error("unknown time zone {time_zone:?}: use an IANA name such as Europe/Berlin ({reason})")]
    TimeZone { time_zone: String, reason: String },
    #[error(
        "schedule {expression:?} never fires (a date that does not exist, such as February 30?)"
    )]
    NeverFires { expression: String },
    #[error("schedule {expression:?} has no fire time after {after}")]
    NoFireTime {
        expression: String,
        after: Timestamp,
    },
}

/// The fire time a schedule owes a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Due {
    /// The latest fire time at or before now: the run to start.
    pub time: Timestamp,
    /// Fire times since the last run, this one included, counted up to `MAX_MISSED + 1`.
    pub missed: usize,
}

impl Due {
    /// Whether more than [`MAX_MISSED`] fire times went by without a run (the controller was
    /// down, or the workflow suspended): worth a warning, as a CronJob gives one.
    pub fn too_many_missed(&self) -> bool {
        self.missed > MAX_MISSED
    }
}

/// A parsed schedule in its time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    expression: String,
    cron: Cron,
    time_zone: TimeZone,
}

impl Schedule {
    /// Reads `expression` in `time_zone` (an IANA name; `None` is UTC, the API's
    /// `DEFAULT_TIME_ZONE`).
    pub fn parse(expression: &str, time_zone: Option<&str>) -> Result<Self, ScheduleError> {
        let time_zone = match time_zone {
            None => TimeZone::UTC,
            Some(name) => TimeZone::get(name).map_err(|error| ScheduleError::TimeZone {
                time_zone: name.to_string(),
                reason: error.to_string(),
            })?,
        };
        let cron = parser()
            .parse(&standard_macro(expression.trim()))
            .map_err(|error| ScheduleError::Expression {
                expression: expression.to_string(),
                reason: error.to_string(),
            })?;
        // Every day, weekday and leap day comes round within 28 years of any instant: a pattern
        // with no fire time after 1970 has none at all, and is refused now rather than found
        // out on every reconcile.
        if cron
            .find_next_occurrence(&Timestamp::UNIX_EPOCH.to_zoned(time_zone.clone()), false)
            .is_err()
        {
            return Err(ScheduleError::NeverFires {
                expression: expression.to_string(),
            });
        }
        Ok(Self {
            expression: expression.to_string(),
            cron,
            time_zone,
        })
    }

    pub fn expression(&self) -> &str {
        &self.expression
    }

    /// The first fire time strictly after `after`.
    pub fn next_after(&self, after: Timestamp) -> Result<Timestamp, ScheduleError> {
        self.cron
            .find_next_occurrence(&after.to_zoned(self.time_zone.clone()), false)
            .map(|next| next.timestamp())
            .map_err(|_| self.no_fire_time(after))
    }

    /// The run the schedule owes at `now`, if a fire time passed since `last_schedule` (the
    /// last run it started, or the workflow's creation): only the latest one, however many
    /// were missed.
    pub fn due(
        &self,
        last_schedule: Timestamp,
        now: Timestamp,
    ) -> Result<Option<Due>, ScheduleError> {
        if now <= last_schedule {
            return Ok(None);
        }
        let Ok(latest) = self
            .cron
            .find_previous_occurrence(&now.to_zoned(self.time_zone.clone()), true)
        else {
            // Nothing ever fired before now (a fire time far in the future only).
            return Ok(None);
        };
        let latest = latest.timestamp();
        if latest <= last_schedule {
            return Ok(None);
        }
        let missed = self
            .cron
            .iter_after(last_schedule.to_zoned(self.time_zone.clone()))
            .map(|fire| fire.timestamp())
            .take_while(|fire| *fire <= now)
            .take(MAX_MISSED + 1)
            .count();
        Ok(Some(Due {
            time: latest,
            missed: missed.max(1),
        }))
    }

    fn no_fire_time(&self, after: Timestamp) -> ScheduleError {
        ScheduleError::NoFireTime {
            expression: self.expression.clone(),
            after,
        }
    }
}

/// Five fields exactly: no seconds, no year, as a CronJob's schedule.
fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Disallowed)
        .year(Year::Disallowed)
        .build()
}

/// `@midnight` is cron's other name for `@daily`, which the parser does not know.
fn standard_macro(expression: &str) -> String {
    if expression.eq_ignore_ascii_case("@midnight") {
        "@daily".to_string()
    } else {
        expression.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(instant: &str) -> Timestamp {
        instant.parse().expect("an RFC 3339 instant")
    }

    fn next(expression: &str, zone: Option<&str>, after: &str) -> Result<Timestamp, ScheduleError> {
        Schedule::parse(expression, zone)?.next_after(at(after))
    }

    /// Asserts when `expression` read in `zone` fires next after each instant: (after, next).
    fn assert_fires(
        expression: &str,
        zone: Option<&str>,
        cases: &[(&str, &str)],
    ) -> Result<(), ScheduleError> {
        for &(after, expected) in cases {
            let fires = next(expression, zone, after)?;
            assert_eq!(fires, at(expected), "{expression} after {after}");
        }
        Ok(())
    }

    #[test]
    fn every_five_minutes() -> Result<(), ScheduleError> {
        assert_fires(
            "*/5 * * * *",
            None,
            &[
                ("2025-06-01T10:02:30Z", "2025-06-01T10:05:00Z"),
                // Strictly after: a fire time is not its own next.
                ("2025-06-01T10:05:00Z", "2025-06-01T10:10:00Z"),
                ("2025-06-01T23:58:00Z", "2025-06-02T00:00:00Z"),
            ],
        )
    }

    #[test]
    fn the_macros() -> Result<(), ScheduleError> {
        let after = "2025-06-11T10:20:00Z"; // a Wednesday
        assert_eq!(next("@hourly", None, after)?, at("2025-06-11T11:00:00Z"));
        assert_eq!(next("@daily", None, after)?, at("2025-06-12T00:00:00Z"));
        assert_eq!(next("@midnight", None, after)?, at("2025-06-12T00:00:00Z"));
        assert_eq!(next("@weekly", None, after)?, at("2025-06-15T00:00:00Z"));
        assert_eq!(next("@monthly", None, after)?, at("2025-07-01T00:00:00Z"));
        assert_eq!(next("@yearly", None, after)?, at("2026-01-01T00:00:00Z"));
        assert_eq!(next("@annually", None, after)?, at("2026-01-01T00:00:00Z"));
        Ok(())
    }

    #[test]
    fn weekdays_and_names() -> Result<(), ScheduleError> {
        // Friday 2025-06-13 18:00 → Monday 09:00.
        let friday_evening = [("2025-06-13T18:00:00Z", "2025-06-16T09:00:00Z")];
        assert_fires("0 9 * * 1-5", None, &friday_evening)?;
        assert_fires("0 9 * * MON", None, &friday_evening)
    }

    #[test]
    fn a_time_zone_with_daylight_saving_keeps_the_local_hour() -> Result<(), ScheduleError> {
        // 09:00 in Berlin is 08:00 UTC in winter (CET) and 07:00 UTC in summer (CEST); the
        // clocks went forward on 2025-03-30.
        assert_fires(
            "0 9 * * *",
            Some("Europe/Berlin"),
            &[
                ("2025-03-29T12:00:00Z", "2025-03-30T07:00:00Z"),
                ("2025-03-28T12:00:00Z", "2025-03-29T08:00:00Z"),
                // And back on 2025-10-26.
                ("2025-10-25T12:00:00Z", "2025-10-26T08:00:00Z"),
            ],
        )
    }

    #[test]
    fn a_fire_time_in_a_daylight_saving_change_fires_once() -> Result<(), ScheduleError> {
        // 02:30 does not exist in Berlin on 2025-03-30 (02:00 → 03:00): the run is not lost,
        // it fires when the clocks have gone forward, at 03:00 CEST.
        let berlin = Some("Europe/Berlin");
        assert_fires(
            "30 2 * * *",
            berlin,
            &[("2025-03-29T12:00:00Z", "2025-03-30T01:00:00Z")],
        )?;
        // 02:30 happens twice on 2025-10-26: it fires once, at the first.
        let schedule = Schedule::parse("30 2 * * *", berlin)?;
        let first = schedule.next_after(at("2025-10-25T12:00:00Z"))?;
        assert_eq!(first, at("2025-10-26T00:30:00Z"));
        assert_eq!(schedule.next_after(first)?, at("2025-10-27T01:30:00Z"));
        Ok(())
    }

    #[test]
    fn errors_name_the_expression_or_the_zone() {
        for bad in [
            "* * * *",
            "0 0 * * * *",
            "61 * * * *",
            "@often",
            "banana",
            "",
        ] {
            let error = Schedule::parse(bad, None).expect_err(bad);
            assert!(
                matches!(error, ScheduleError::Expression { .. }),
                "{bad}: {error}"
            );
            assert!(
                error
                    .to_string()
                    .starts_with(&format!("invalid schedule {bad:?}: ")),
                "{error}"
            );
        }
        let error = Schedule::parse("@daily", Some("Mars/Olympus_Mons")).expect_err("no such zone");
        assert!(
            error
                .to_string()
                .starts_with("unknown time zone \"Mars/Olympus_Mons\": use an IANA name"),
            "{error}"
        );
    }

    #[test]
    fn a_schedule_that_never_fires_is_refused() -> Result<(), ScheduleError> {
        assert_eq!(
            Schedule::parse("0 0 30 2 *", None).map(|_| ()),
            Err(ScheduleError::NeverFires {
                expression: "0 0 30 2 *".to_string()
            })
        );
        // February 29 comes every four years.
        assert_eq!(
            next("0 0 29 2 *", None, "2025-01-01T00:00:00Z")?,
            at("2028-02-29T00:00:00Z")
        );
        Ok(())
    }

    #[test]
    fn due_is_the_latest_missed_fire_time() -> Result<(), ScheduleError> {
        let schedule = Schedule::parse("*/5 * * * *", None)?;
        let last = at("2025-06-01T10:00:00Z");
        // Nothing fired since.
        assert_eq!(schedule.due(last, at("2025-06-01T10:04:59Z"))?, None);
        assert_eq!(schedule.due(last, last)?, None);
        // One fire time, exactly now.
        assert_eq!(
            schedule.due(last, at("2025-06-01T10:05:00Z"))?,
            Some(Due {
                time: at("2025-06-01T10:05:00Z"),
                missed: 1
            })
        );
        // Three missed: only the latest is owed.
        assert_eq!(
            schedule.due(last, at("2025-06-01T10:17:00Z"))?,
            Some(Due {
                time: at("2025-06-01T10:15:00Z"),
                missed: 3
            })
        );
        Ok(())
    }

    #[test]
    fn more_than_a_hundred_missed_is_counted_no_further() -> Result<(), ScheduleError> {
        let schedule = Schedule::parse("* * * * *", None)?;
        // A year of minutes missed.
        let due = schedule
            .due(at("2024-06-01T00:00:00Z"), at("2025-06-01T12:34:56Z"))?
            .expect("owed");
        assert_eq!(due.time, at("2025-06-01T12:34:00Z"));
        assert_eq!(due.missed, MAX_MISSED + 1);
        assert!(due.too_many_missed());
        let due = schedule
            .due(at("2025-06-01T12:00:00Z"), at("2025-06-01T13:40:00Z"))?
            .expect("owed");
        assert_eq!((due.missed, due.too_many_missed()), (100, false));
        Ok(())
    }

    #[test]
    fn due_follows_the_time_zone() -> Result<(), ScheduleError> {
        let schedule = Schedule::parse("0 9 * * *", Some("America/New_York"))?;
        // 09:00 EDT is 13:00 UTC.
        assert_eq!(
            schedule.due(at("2025-06-01T12:00:00Z"), at("2025-06-01T13:30:00Z"))?,
            Some(Due {
                time: at("2025-06-01T13:00:00Z"),
                missed: 1
            })
        );
        Ok(())
    }
}
