//! When an application's cron triggers fire, in its time zone, and which run is made up
//! after the home agent was down (the missed-run policy).
//!
//! A cron trigger's generation is named after its occurrence, `cron-YYYY-MM-DDTHHMM+ZZZZ`
//! in the application's time zone (with its offset, so the hour repeated when clocks go
//! back names two generations), and runs on that date: the same occurrence fired twice (a
//! restart at the wrong moment) is one generation, as long as it runs. Expressions have
//! five fields (minute, hour, day of month, month, day of week): a generation per minute
//! at most.
//!
//! **Missed runs.** The journal records each cron trigger's last occurrence fired. When the
//! home agent starts (or the application is deployed again) and occurrences passed since
//! then, the latest of them fires once, at once, and the earlier ones are skipped (and
//! logged): a payroll missed for three days runs once, for the last of them, not three
//! times in a burst. An application deployed for the first time fires nothing from the past.

use chrono::{DateTime, TimeZone as _, Utc};
use chrono_tz::Tz;
use croner::Cron;

/// A cron trigger of an application, in its time zone.
#[derive(Clone, Debug)]
pub struct CronTrigger {
    /// The expression.
    pub cron: Cron,
    /// The application's time zone.
    pub tz: Tz,
}

impl CronTrigger {
    /// Parses `pattern` in time zone `tz` (an IANA name).
    ///
    /// # Errors
    /// A bad expression or an unknown time zone, in words.
    pub fn new(pattern: &str, tz: &str) -> Result<Self, String> {
        let cron = padres_workflow::parse::cron_expression(pattern)?;
        let tz = tz.parse::<Tz>().map_err(|_| format!("unknown time zone '{tz}'"))?;
        Ok(Self { cron, tz })
    }

    /// The first occurrence after `after`.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        let local = after.with_timezone(&self.tz);
        self.cron.find_next_occurrence(&local, false).ok().map(|t| t.with_timezone(&Utc))
    }

    /// The occurrences after `last` up to `now` (the last of them is made up; see the
    /// module docs): the latest, and how many came before it.
    pub fn missed(&self, last: DateTime<Utc>, now: DateTime<Utc>) -> Option<(DateTime<Utc>, usize)> {
        let local = now.with_timezone(&self.tz);
        let latest = self.cron.find_previous_occurrence(&local, true).ok()?.with_timezone(&Utc);
        if latest <= last {
            return None;
        }
        // Those skipped, counted for the log (at most 10,000 looked at).
        let mut earlier = 0;
        let mut at = last;
        while earlier < 10_000 {
            match self.next_after(at) {
                Some(next) if next < latest => {
                    earlier += 1;
                    at = next;
                }
                _ => break,
            }
        }
        Some((latest, earlier))
    }

    /// The generation an occurrence starts: its gid and date, in the application's zone.
    pub fn generation(&self, at: DateTime<Utc>) -> (String, String) {
        let local = self.tz.from_utc_datetime(&at.naive_utc());
        (format!("cron-{}", local.format("%Y-%m-%dT%H%M%z")), local.format("%Y-%m-%d").to_string())
    }
}

/// Now, from the system clock.
pub fn now() -> DateTime<Utc> {
    DateTime::from_timestamp_millis(padres_client::check::now().millis()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn utc(text: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(text).expect("a time").with_timezone(&Utc)
    }

    #[test]
    fn a_trigger_fires_in_its_time_zone_and_names_its_generation_there() {
        let trigger = CronTrigger::new("0 18 * * *", "America/New_York").expect("valid");
        // 18:00 in New York on 2026-11-27 (EST, UTC-5) is 23:00 UTC.
        let next = trigger.next_after(utc("2026-11-27T12:00:00Z")).expect("a next run");
        assert_eq!(next, utc("2026-11-27T23:00:00Z"));
        assert_eq!(
            trigger.generation(next),
            ("cron-2026-11-27T1800-0500".to_owned(), "2026-11-27".to_owned())
        );
        // After it, the next day's.
        assert_eq!(trigger.next_after(next), Some(utc("2026-11-28T23:00:00Z")));
    }

    #[test]
    fn of_runs_missed_only_the_latest_is_made_up() {
        let trigger = CronTrigger::new("0 18 * * *", "UTC").expect("valid");
        let missed = trigger.missed(utc("2026-11-24T18:00:00Z"), utc("2026-11-27T19:00:00Z"));
        assert_eq!(missed, Some((utc("2026-11-27T18:00:00Z"), 2)), "25th and 26th skipped, 27th made up");
        assert_eq!(trigger.missed(utc("2026-11-27T18:00:00Z"), utc("2026-11-27T19:00:00Z")), None);
        // Years missed: the latest still, found directly.
        let years = trigger.missed(utc("2020-01-01T00:00:00Z"), utc("2026-11-27T19:00:00Z"));
        assert_eq!(
            years.map(|(at, skipped)| (at, skipped > 2_000)),
            Some((utc("2026-11-27T18:00:00Z"), true))
        );
    }

    #[test]
    fn bad_expressions_and_zones_are_refused_in_words() {
        assert!(CronTrigger::new("61 * * * *", "UTC").unwrap_err().contains("bad cron expression"));
        assert!(CronTrigger::new("*/5 * * * * *", "UTC").unwrap_err().contains("five fields"));
        assert!(CronTrigger::new("0 18 * * *", "Mars/Olympus").unwrap_err().contains("unknown time zone"));
    }

    #[test]
    fn a_daily_trigger_fires_once_a_day_across_daylight_saving_changes() {
        let utc = |t: &str| DateTime::parse_from_rfc3339(t).expect("a time").with_timezone(&Utc);
        let fires = |pattern: &str, from: &str, n: usize| {
            let trigger = CronTrigger::new(pattern, "Europe/Paris").expect("valid");
            let mut at = utc(from);
            (0..n)
                .map(|_| {
                    at = trigger.next_after(at).expect("another");
                    (at.to_rfc3339(), trigger.generation(at).0)
                })
                .collect::<Vec<_>>()
        };
        // Spring forward (29 March 2026, 02:00 -> 03:00): 02:00 does not exist that day;
        // the run comes at 03:00, once, on its day.
        let spring = fires("0 2 * * *", "2026-03-28T12:00:00Z", 2);
        assert_eq!(spring[0], ("2026-03-29T01:00:00+00:00".into(), "cron-2026-03-29T0300+0200".into()));
        assert_eq!(spring[1], ("2026-03-30T00:00:00+00:00".into(), "cron-2026-03-30T0200+0200".into()));
        // Fall back (25 October 2026, 03:00 -> 02:00): 02:30 happens twice; the run comes
        // at the first, once.
        let fall = fires("30 2 * * *", "2026-10-24T12:00:00Z", 2);
        assert_eq!(fall[0], ("2026-10-25T00:30:00+00:00".into(), "cron-2026-10-25T0230+0200".into()));
        assert_eq!(fall[1], ("2026-10-26T01:30:00+00:00".into(), "cron-2026-10-26T0230+0100".into()));
        // A trigger every half hour keeps its pace in real time through the repeated hour,
        // each run a generation of its own.
        let gids: Vec<String> =
            fires("*/30 * * * *", "2026-10-25T00:00:00Z", 3).into_iter().map(|(_, g)| g).collect();
        assert_eq!(
            gids,
            ["cron-2026-10-25T0230+0200", "cron-2026-10-25T0200+0100", "cron-2026-10-25T0230+0100"]
        );
    }
}
