//! Calendars and run terms, evaluated against a generation's date (never the wall clock).
//!
//! A [`Calendar`] names the workdays of the week and the holidays. A [`RunTerm`] says on
//! which dates a job is selected: `daily`, `workdays`, `weekends`, day names and lists
//! (`friday`, `mon,wed,fri`, `mon-fri`), `first-workday-of-month`,
//! `last-workday-of-month`, `day-15`, `cron:<expr>` (its day fields decide; any time of the
//! day counts), or `never`. A [`HolidayRule`] says what happens when a selected date is a
//! holiday: the job is skipped, runs anyway, or moves to the previous or next workday (a
//! definition's default is `run` for `daily` jobs and `skip` for every other term).
//! [`Schedule::runs_on`] puts these together, with an `except` term.
//!
//! `workdays` means the calendar's working weekdays (holidays are the holiday rule's
//! business); `first-workday-of-month` and `last-workday-of-month` count holidays out
//! themselves, so they never fall on one.

use std::collections::BTreeSet;
use std::str::FromStr;

use chrono::{Datelike, Days, NaiveDate, Weekday, WeekdaySet};

/// Working weekdays and holidays.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Calendar {
    /// The calendar's name.
    pub name: String,
    /// Working weekdays.
    pub workdays: WeekdaySet,
    /// Dates that are not worked.
    pub holidays: BTreeSet<NaiveDate>,
}

impl Default for Calendar {
    /// Monday to Friday, no holidays.
    fn default() -> Self {
        Self {
            name: "default".to_owned(),
            workdays: WeekdaySet::from_array([
                Weekday::Mon,
                Weekday::Tue,
                Weekday::Wed,
                Weekday::Thu,
                Weekday::Fri,
            ]),
            holidays: BTreeSet::new(),
        }
    }
}

impl Calendar {
    /// True if `date` is a holiday.
    pub fn is_holiday(&self, date: NaiveDate) -> bool {
        self.holidays.contains(&date)
    }

    /// True if `date` is a working weekday and not a holiday.
    pub fn is_workday(&self, date: NaiveDate) -> bool {
        self.workdays.contains(date.weekday()) && !self.is_holiday(date)
    }
}

const DAY_NAMES: [(&str, &str); 7] = [
    ("mon", "monday"),
    ("tue", "tuesday"),
    ("wed", "wednesday"),
    ("thu", "thursday"),
    ("fri", "friday"),
    ("sat", "saturday"),
    ("sun", "sunday"),
];

fn weekday(word: &str) -> Option<Weekday> {
    let word = word.trim().to_ascii_lowercase();
    let index = DAY_NAMES.iter().position(|(short, long)| word == *short || word == *long)?;
    Weekday::try_from(u8::try_from(index).ok()?).ok()
}

/// Parses weekdays: names (`mon` or `monday`), lists (`mon,wed,fri`) and ranges
/// (`mon-fri`, `sat-sun`).
pub fn parse_weekdays(text: &str) -> Result<WeekdaySet, String> {
    let mut days = WeekdaySet::EMPTY;
    for part in text.split(',') {
        let bad = || format!("'{part}' is not a weekday, a list or a range of them (e.g. mon-fri)");
        match part.split_once('-') {
            Some((from, to)) => {
                let (from, to) = (weekday(from).ok_or_else(bad)?, weekday(to).ok_or_else(bad)?);
                // A range may wrap round the week (fri-mon).
                let mut d = from;
                loop {
                    days.insert(d);
                    if d == to {
                        break;
                    }
                    d = d.succ();
                }
            }
            None => {
                days.insert(weekday(part).ok_or_else(bad)?);
            }
        }
    }
    Ok(days)
}

/// On which dates a job is selected (see the module docs).
#[derive(Clone, Debug)]
pub enum RunTerm {
    /// Every day.
    Daily,
    /// The calendar's working weekdays.
    Workdays,
    /// The calendar's non-working weekdays.
    Weekends,
    /// These weekdays.
    Days(WeekdaySet),
    /// The first workday (holidays counted out) of each month.
    FirstWorkdayOfMonth,
    /// The last workday (holidays counted out) of each month.
    LastWorkdayOfMonth,
    /// This day of each month (1 to 31; months without it are skipped).
    DayOfMonth(u32),
    /// Dates on which the cron expression matches at some time.
    Cron(Box<croner::Cron>),
    /// No date (the job runs only when asked by hand).
    Never,
}

impl PartialEq for RunTerm {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (Self::Days(a), Self::Days(b)) => a == b,
            (Self::DayOfMonth(a), Self::DayOfMonth(b)) => a == b,
            (Self::Cron(a), Self::Cron(b)) => a.pattern.to_string() == b.pattern.to_string(),
            _ => std::mem::discriminant(self) == std::mem::discriminant(other),
        }
    }
}

impl FromStr for RunTerm {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let term = text.trim();
        if let Some(expr) = term.strip_prefix("cron:") {
            return croner::Cron::from_str(expr.trim())
                .map(|c| Self::Cron(Box::new(c)))
                .map_err(|e| format!("bad cron expression '{}': {e}", expr.trim()));
        }
        if let Some(day) = term.strip_prefix("day-") {
            return match day.parse::<u32>() {
                Ok(d @ 1..=31) => Ok(Self::DayOfMonth(d)),
                _ => Err(format!("bad run term '{term}': day-N takes N from 1 to 31")),
            };
        }
        Ok(match term.to_ascii_lowercase().as_str() {
            "daily" => Self::Daily,
            "workdays" | "workday" => Self::Workdays,
            "weekends" | "weekend" => Self::Weekends,
            "first-workday-of-month" => Self::FirstWorkdayOfMonth,
            "last-workday-of-month" => Self::LastWorkdayOfMonth,
            "never" => Self::Never,
            _ => Self::Days(parse_weekdays(term).map_err(|_| {
                format!(
                    "bad run term '{term}': expected daily, workdays, weekends, day names (friday, mon,wed,fri, \
                     mon-fri), first-workday-of-month, last-workday-of-month, day-N, cron:<expr> or never"
                )
            })?),
        })
    }
}

impl std::fmt::Display for RunTerm {
    /// The canonical text, which parses back to the same term.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Daily => f.write_str("daily"),
            Self::Workdays => f.write_str("workdays"),
            Self::Weekends => f.write_str("weekends"),
            Self::Days(days) => f.write_str(&weekdays_text(*days)),
            Self::FirstWorkdayOfMonth => f.write_str("first-workday-of-month"),
            Self::LastWorkdayOfMonth => f.write_str("last-workday-of-month"),
            Self::DayOfMonth(d) => write!(f, "day-{d}"),
            Self::Cron(cron) => write!(f, "cron:{}", cron.pattern),
            Self::Never => f.write_str("never"),
        }
    }
}

/// Weekdays as a list of short names, Monday first (`mon,wed,fri`).
pub fn weekdays_text(days: WeekdaySet) -> String {
    let names: Vec<&str> =
        days.iter(Weekday::Mon).map(|d| DAY_NAMES[d.num_days_from_monday() as usize].0).collect();
    names.join(",")
}

impl RunTerm {
    /// True if this term selects `date` (holidays aside, see the module docs).
    pub fn selects(&self, date: NaiveDate, calendar: &Calendar) -> bool {
        match self {
            Self::Daily => true,
            Self::Workdays => calendar.workdays.contains(date.weekday()),
            Self::Weekends => !calendar.workdays.contains(date.weekday()),
            Self::Days(days) => days.contains(date.weekday()),
            Self::FirstWorkdayOfMonth => {
                calendar.is_workday(date)
                    && (1..date.day()).all(|d| date.with_day(d).is_none_or(|e| !calendar.is_workday(e)))
            }
            Self::LastWorkdayOfMonth => {
                calendar.is_workday(date)
                    && date
                        .iter_days()
                        .skip(1)
                        .take_while(|d| d.month() == date.month())
                        .all(|d| !calendar.is_workday(d))
            }
            Self::DayOfMonth(day) => date.day() == *day,
            Self::Cron(cron) => {
                let Some(start) = date.and_hms_opt(0, 0, 0) else { return false };
                let start = start.and_utc();
                cron.find_next_occurrence(&start, true).is_ok_and(|next| next.date_naive() == date)
            }
            Self::Never => false,
        }
    }
}

/// What a job does when a date it is selected on is a holiday.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum HolidayRule {
    /// It does not run that generation.
    #[default]
    Skip,
    /// It runs on the last workday before the holiday instead.
    PreviousWorkday,
    /// It runs on the first workday after the holiday instead.
    NextWorkday,
    /// It runs on the holiday anyway.
    Run,
}

impl HolidayRule {
    /// As written in the XML.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Skip => "skip",
            Self::PreviousWorkday => "previous-workday",
            Self::NextWorkday => "next-workday",
            Self::Run => "run",
        }
    }
}

impl FromStr for HolidayRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim() {
            "skip" => Ok(Self::Skip),
            "previous-workday" => Ok(Self::PreviousWorkday),
            "next-workday" => Ok(Self::NextWorkday),
            "run" => Ok(Self::Run),
            other => Err(format!(
                "bad holiday rule '{other}': expected skip, previous-workday, next-workday or run"
            )),
        }
    }
}

/// When one job runs: its run term, the dates it is excepted on, and its holiday rule.
#[derive(Clone, Debug, PartialEq)]
pub struct Schedule {
    /// Dates selected.
    pub run: RunTerm,
    /// Dates excluded even if selected.
    pub except: Option<RunTerm>,
    /// What a selected holiday does.
    pub holiday: HolidayRule,
}

/// How far a job may move to reach a workday (a month of holidays is far enough).
const MOST_DAYS_MOVED: u64 = 31;

impl Schedule {
    /// Selected by the terms alone, holidays aside.
    fn wanted(&self, date: NaiveDate, calendar: &Calendar) -> bool {
        self.run.selects(date, calendar) && !self.except.as_ref().is_some_and(|e| e.selects(date, calendar))
    }

    /// True if the job runs in the generation dated `date`.
    pub fn runs_on(&self, date: NaiveDate, calendar: &Calendar) -> bool {
        if calendar.is_holiday(date) {
            return self.holiday == HolidayRule::Run && self.wanted(date, calendar);
        }
        if self.wanted(date, calendar) {
            return true;
        }
        // A holiday it was wanted on may have moved here: for previous-workday, from the
        // non-workdays right after this workday; for next-workday, from those right before.
        let forward = match self.holiday {
            HolidayRule::PreviousWorkday => true,
            HolidayRule::NextWorkday => false,
            HolidayRule::Skip | HolidayRule::Run => return false,
        };
        if !calendar.is_workday(date) {
            return false;
        }
        let step = Days::new(1);
        let mut day = date;
        for _ in 0..MOST_DAYS_MOVED {
            let next = if forward { day.checked_add_days(step) } else { day.checked_sub_days(step) };
            let Some(next) = next else { return false };
            day = next;
            if calendar.is_workday(day) {
                return false;
            }
            if calendar.is_holiday(day) && self.wanted(day, calendar) {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn date(text: &str) -> NaiveDate {
        text.parse().expect("a date")
    }

    fn schedule(run: &str, holiday: HolidayRule) -> Schedule {
        Schedule { run: run.parse().expect("a run term"), except: None, holiday }
    }

    #[test]
    fn run_terms_select_dates() {
        let cal = Calendar::default();
        // 2026-11-20 is a Friday, 2026-11-21 a Saturday.
        let friday = date("2026-11-20");
        let saturday = date("2026-11-21");
        for (term, on_friday, on_saturday) in [
            ("daily", true, true),
            ("workdays", true, false),
            ("weekends", false, true),
            ("friday", true, false),
            ("fri", true, false),
            ("mon,wed,fri", true, false),
            ("sat-sun", false, true),
            ("fri-mon", true, true),
            ("day-20", true, false),
            ("cron:0 18 * * 5", true, false),
            ("cron:30 2 * * SAT", false, true),
            ("never", false, false),
        ] {
            let t: RunTerm = term.parse().expect(term);
            assert_eq!(
                (t.selects(friday, &cal), t.selects(saturday, &cal)),
                (on_friday, on_saturday),
                "{term}"
            );
        }
    }

    #[test]
    fn month_terms_count_holidays_out() {
        let mut cal = Calendar::default();
        // November 2026: Sunday the 1st, Monday the 2nd; Monday the 30th is the last day.
        let first: RunTerm = "first-workday-of-month".parse().expect("term");
        let last: RunTerm = "last-workday-of-month".parse().expect("term");
        assert!(first.selects(date("2026-11-02"), &cal));
        assert!(!first.selects(date("2026-11-03"), &cal));
        assert!(last.selects(date("2026-11-30"), &cal));
        cal.holidays.insert(date("2026-11-02"));
        cal.holidays.insert(date("2026-11-30"));
        assert!(first.selects(date("2026-11-03"), &cal), "the 2nd is a holiday");
        assert!(last.selects(date("2026-11-27"), &cal), "the 30th is a holiday, the 28th and 29th a weekend");
    }

    #[test]
    fn holiday_rules_skip_run_or_move() {
        let mut cal = Calendar::default();
        let christmas = date("2026-12-25"); // a Friday
        cal.holidays.insert(christmas);
        let thursday = date("2026-12-24");
        let monday = date("2026-12-28");
        assert!(!schedule("friday", HolidayRule::Skip).runs_on(christmas, &cal));
        assert!(!schedule("friday", HolidayRule::Skip).runs_on(thursday, &cal));
        assert!(schedule("friday", HolidayRule::Run).runs_on(christmas, &cal));
        let earlier = schedule("friday", HolidayRule::PreviousWorkday);
        assert!(!earlier.runs_on(christmas, &cal) && earlier.runs_on(thursday, &cal));
        let later = schedule("friday", HolidayRule::NextWorkday);
        assert!(!later.runs_on(christmas, &cal) && later.runs_on(monday, &cal), "over the weekend to Monday");
        assert!(!later.runs_on(date("2026-12-29"), &cal));
    }

    #[test]
    fn except_removes_dates() {
        let cal = Calendar::default();
        let s = Schedule {
            run: "workdays".parse().expect("term"),
            except: Some("last-workday-of-month".parse().expect("term")),
            holiday: HolidayRule::Skip,
        };
        assert!(s.runs_on(date("2026-11-27"), &cal));
        assert!(!s.runs_on(date("2026-11-30"), &cal));
    }

    #[test]
    fn terms_print_back_to_themselves() {
        for text in [
            "daily",
            "workdays",
            "weekends",
            "mon,wed,fri",
            "first-workday-of-month",
            "last-workday-of-month",
            "day-15",
            "never",
            "cron:0 18 * * 5",
        ] {
            let term: RunTerm = text.parse().expect(text);
            assert_eq!(term.to_string().parse::<RunTerm>().as_ref(), Ok(&term), "{text}");
        }
        assert_eq!("mon-fri".parse::<RunTerm>().map(|t| t.to_string()), Ok("mon,tue,wed,thu,fri".to_owned()));
    }

    #[test]
    fn bad_terms_say_what_is_expected() {
        for bad in ["sometimes", "day-32", "cron:61 * * * *", "mon-funday"] {
            assert!(bad.parse::<RunTerm>().is_err(), "{bad}");
        }
        assert!("weekly".parse::<RunTerm>().is_err_and(|e| e.contains("first-workday-of-month")));
        let weekdays =
            WeekdaySet::from_array([Weekday::Mon, Weekday::Tue, Weekday::Wed, Weekday::Thu, Weekday::Fri]);
        assert_eq!(parse_weekdays("mon-fri"), Ok(weekdays));
        assert_eq!(parse_weekdays("fri-mon").map(weekdays_text).as_deref(), Ok("mon,fri,sat,sun"));
    }
}
