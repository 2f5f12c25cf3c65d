//! Cron expressions of `jobs.schedules`: the five standard fields (minute, hour, day of month,
//! month, day of week) with lists, ranges, steps and names, or a macro such as `@daily`; and
//! the slots they name in a time zone. A slot is a local wall-clock time, turned into an
//! instant by PostgreSQL's own time-zone rules (`local AT TIME ZONE zone`, the server's tz
//! database and zone names): a local time that a spring-forward skips becomes the instant just
//! after the gap, and one that a fall-back repeats is one instant, so each local slot runs once
//! however the clock moves that day. Slots that land on the same instant are one slot.
//!
//! Written here rather than taken from a crate: the refusal must name the bad field and what
//! it accepts (`jobs.schedule`'s contract), and the slots must follow PostgreSQL's zone rules,
//! not a second copy of the tz database.

use pgrx::direct_function_call;
use pgrx::prelude::*;
use std::cell::RefCell;
use std::collections::HashMap;

const US_PER_MINUTE: i64 = 60_000_000;
const MINUTES_PER_DAY: i64 = 1440;
/// Far enough to find any slot a valid expression names: February 29 on a given weekday
/// comes back within 28 years.
const SEARCH_DAYS: i64 = 366 * 29;
/// The last local minute whose instant PostgreSQL can hold in any zone: two days before the
/// end of its timestamps (294276-12-31). A search reaching it ends there: no slot after.
const LAST_LOCAL_MINUTE: i64 = 9_223_371_331_200_000_000 / US_PER_MINUTE - 2 * MINUTES_PER_DAY;
/// A DST change moves a local time by at most this much (two hours in Antarctica/Troll), so
/// a candidate further than this from the one found cannot be an earlier instant.
const SHIFT_MINUTES: i64 = 180;

#[derive(Clone, Copy, Debug, PartialEq)]
struct Cron {
    minutes: u64,
    hours: u32,
    days: u32,
    months: u16,
    weekdays: u8,
    any_day: bool,
    any_weekday: bool,
}

struct Field {
    name: &'static str,
    min: u32,
    max: u32,
    names: &'static [&'static str],
}

const FIELDS: [Field; 5] = [
    Field {
        name: "minute",
        min: 0,
        max: 59,
        names: &[],
    },
    Field {
        name: "hour",
        min: 0,
        max: 23,
        names: &[],
    },
    Field {
        name: "day of month",
        min: 1,
        max: 31,
        names: &[],
    },
    Field {
        name: "month",
        min: 1,
        max: 12,
        names: &[
            "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
        ],
    },
    // 0 and 7 are both Sunday.
    Field {
        name: "day of week",
        min: 0,
        max: 7,
        names: &["sun", "mon", "tue", "wed", "thu", "fri", "sat"],
    },
];

fn macro_for(text: &str) -> Option<&'static str> {
    Some(match text {
        "@yearly" | "@annually" => "0 0 1 1 *",
        "@monthly" => "0 0 1 * *",
        "@weekly" => "0 0 * * 0",
        "@daily" | "@midnight" => "0 0 * * *",
        "@hourly" => "0 * * * *",
        _ => return None,
    })
}

impl Field {
    fn value(&self, text: &str) -> Option<u32> {
        if let Ok(n) = text.parse::<u32>() {
            return (self.min..=self.max).contains(&n).then_some(n);
        }
        let lower = text.to_ascii_lowercase();
        let at = self.names.iter().position(|n| *n == lower)? as u32;
        Some(if self.min == 1 { at + 1 } else { at })
    }

    /// The bits of one comma-separated item: `*`, `n`, `a-b`, each optionally `/step`.
    fn item(&self, item: &str) -> Option<u64> {
        let (range, step) = match item.split_once('/') {
            Some((r, s)) => (r, s.parse::<u32>().ok().filter(|s| *s >= 1)?),
            None => (item, 1),
        };
        let (from, to) = if range == "*" {
            (self.min, self.max)
        } else if let Some((a, b)) = range.split_once('-') {
            let (a, b) = (self.value(a)?, self.value(b)?);
            (a <= b).then_some((a, b))?
        } else {
            let a = self.value(range)?;
            // `a/step` runs from a to the end of the field.
            (a, if item.contains('/') { self.max } else { a })
        };
        Some(
            (from..=to)
                .step_by(step as usize)
                .fold(0u64, |bits, n| bits | 1 << n),
        )
    }

    fn parse(&self, text: &str) -> Option<u64> {
        text.split(',')
            .try_fold(0u64, |bits, item| Some(bits | self.item(item)?))
    }

    fn accepts(&self) -> String {
        let names = match self.names.first() {
            Some(first) => format!(" or names ({first}-{})", self.names.last().unwrap()),
            None => String::new(),
        };
        format!(
            "{}-{}{names}, as a value, a range a-b, a step */n or a-b/n, or a list of them",
            self.min, self.max
        )
    }
}

fn parse(text: &str) -> Result<Cron, String> {
    let trimmed = text.trim();
    let expanded = if trimmed.starts_with('@') {
        macro_for(&trimmed.to_ascii_lowercase()).ok_or_else(|| {
            format!(
                "unknown macro {trimmed:?}: the macros are @yearly, @annually, @monthly, @weekly, \
                 @daily, @midnight and @hourly"
            )
        })?
    } else {
        trimmed
    };
    let parts: Vec<&str> = expanded.split_whitespace().collect();
    if parts.len() != 5 {
        return Err(format!(
            "a cron expression has 5 fields (minute hour day-of-month month day-of-week), got {}",
            parts.len()
        ));
    }
    let mut bits = [0u64; 5];
    for (i, (field, part)) in FIELDS.iter().zip(&parts).enumerate() {
        bits[i] = field.parse(part).ok_or_else(|| {
            format!(
                "cron field {} ({}) is {part:?}: it accepts {}",
                i + 1,
                field.name,
                field.accepts()
            )
        })?;
    }
    let weekdays = bits[4] | bits[4] >> 7; // 7 is Sunday too
    Ok(Cron {
        minutes: bits[0],
        hours: bits[1] as u32,
        days: bits[2] as u32,
        months: bits[3] as u16,
        weekdays: (weekdays & 0x7f) as u8,
        any_day: parts[2].starts_with('*'),
        any_weekday: parts[4].starts_with('*'),
    })
}

thread_local! {
    static PARSED: RefCell<HashMap<String, Cron>> = RefCell::new(HashMap::new());
}

/// The expression parsed once per backend (jobs.schedules holds few distinct ones).
fn parsed(text: &str) -> Cron {
    if let Some(cron) = PARSED.with(|p| p.borrow().get(text).copied()) {
        return cron;
    }
    let cron = match parse(text) {
        Ok(cron) => cron,
        Err(problem) => {
            ereport!(
                ERROR,
                PgSqlErrorCode::ERRCODE_INVALID_PARAMETER_VALUE,
                format!("pg_jobs: {problem}")
            );
        }
    };
    PARSED.with(|p| {
        let mut p = p.borrow_mut();
        if p.len() > 1000 {
            p.clear();
        }
        p.insert(text.to_string(), cron);
    });
    cron
}

/// Days since 2000-01-01 (PostgreSQL's epoch) as (year, month, day), the proleptic Gregorian
/// calendar's civil date by the usual era arithmetic.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 10957 + 719468; // days since 0000-03-01
    let era = z.div_euclid(146097);
    let doe = z.rem_euclid(146097);
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Cron {
    fn runs_on(&self, days: i64) -> bool {
        let (_, month, day) = civil(days);
        if self.months & 1 << month == 0 {
            return false;
        }
        let weekday = (days + 6).rem_euclid(7); // 2000-01-01 was a Saturday
        let by_day = self.days & 1 << day != 0;
        let by_weekday = self.weekdays & 1 << weekday != 0;
        match (self.any_day, self.any_weekday) {
            (true, true) => true,
            (true, false) => by_weekday,
            (false, true) => by_day,
            // Both restricted: either matches (as every cron since Vixie's does).
            (false, false) => by_day || by_weekday,
        }
    }

    fn minutes_of_day(&self) -> impl Iterator<Item = i64> + '_ {
        (0..24i64)
            .filter(|h| self.hours & 1 << h != 0)
            .flat_map(move |h| {
                (0..60i64)
                    .filter(|m| self.minutes & 1 << m != 0)
                    .map(move |m| h * 60 + m)
            })
    }

    /// The slots in (after, until], earliest first, at most `max`: instants in microseconds.
    fn slots(&self, zone: &Zone, after: i64, until: i64, max: usize) -> Vec<i64> {
        let after_local = zone.local_minute(after);
        let until_local = if until == i64::MAX {
            i64::MAX
        } else {
            zone.local_minute(until)
        };
        let first_day = (after_local - SHIFT_MINUTES).div_euclid(MINUTES_PER_DAY);
        let mut found: Vec<i64> = Vec::new();
        let mut last_local = i64::MAX; // the local minute of the max-th slot found
        'days: for day in first_day..first_day + SEARCH_DAYS {
            // A long search (a huge max, a rare expression) ends at a cancel or a shutdown.
            pg_sys::check_for_interrupts!();
            if !self.runs_on(day) {
                continue;
            }
            for minute in self.minutes_of_day() {
                let local = day * MINUTES_PER_DAY + minute;
                if local < after_local - SHIFT_MINUTES {
                    continue;
                }
                if local > until_local.saturating_add(SHIFT_MINUTES)
                    || local > last_local.saturating_add(SHIFT_MINUTES)
                    || local > LAST_LOCAL_MINUTE
                {
                    break 'days;
                }
                let instant = zone.instant(local);
                // Two local minutes give one instant only around a daylight-saving change,
                // among the last slots found (a scan of them all made a long search quadratic).
                if instant > after
                    && instant <= until
                    && !found.iter().rev().take(256).any(|f| *f == instant)
                {
                    found.push(instant);
                    if found.len() >= max && last_local == i64::MAX {
                        last_local = local;
                    }
                }
            }
        }
        found.sort_unstable();
        found.truncate(max);
        found
    }
}

/// A time zone by name, as PostgreSQL resolves it.
struct Zone(pg_sys::Datum);

impl Zone {
    fn new(name: &str) -> Zone {
        Zone(name.into_datum().expect("a text datum"))
    }

    /// The local time of an instant, in minutes since 2000-01-01 00:00 local.
    fn local_minute(&self, instant: i64) -> i64 {
        let tz = TimestampWithTimeZone::try_from(instant).expect("a finite time");
        let local: Timestamp = unsafe {
            direct_function_call(pg_sys::timestamptz_zone, &[Some(self.0), tz.into_datum()])
        }
        .expect("a local time");
        pg_sys::Timestamp::from(local).div_euclid(US_PER_MINUTE)
    }

    /// The instant of a local time given in minutes since 2000-01-01 00:00 local.
    fn instant(&self, local_minute: i64) -> i64 {
        let local = Timestamp::try_from(local_minute * US_PER_MINUTE).expect("a finite time");
        let tz: TimestampWithTimeZone = unsafe {
            direct_function_call(pg_sys::timestamp_zone, &[Some(self.0), local.into_datum()])
        }
        .expect("an instant");
        pg_sys::TimestampTz::from(tz)
    }
}

fn instant(t: TimestampWithTimeZone) -> Option<i64> {
    (!t.is_infinity() && !t.is_neg_infinity()).then(|| pg_sys::TimestampTz::from(t))
}

fn timestamptz(us: i64) -> TimestampWithTimeZone {
    TimestampWithTimeZone::try_from(us).expect("a slot in range")
}

/// `jobs._cron_problem(cron)`: what is wrong with a cron expression, or NULL.
#[pg_extern(immutable, parallel_safe, name = "_cron_problem")]
pub fn cron_problem(cron: &str) -> Option<String> {
    parse(cron).err()
}

/// `jobs._cron_slots(cron, zone, after, until, max)`: the slots of a cron expression in a time
/// zone after `after` and at or before `until`, earliest first, at most `max` of them.
#[pg_extern(stable, parallel_safe, name = "_cron_slots")]
pub fn cron_slots(
    cron: &str,
    zone: &str,
    after: TimestampWithTimeZone,
    until: TimestampWithTimeZone,
    max: i32,
) -> Vec<TimestampWithTimeZone> {
    let Some(from) = instant(after) else {
        return Vec::new();
    };
    let until = if until.is_infinity() {
        i64::MAX
    } else {
        instant(until).unwrap_or(i64::MIN)
    };
    if until <= from || max < 1 {
        return Vec::new();
    }
    parsed(cron)
        .slots(&Zone::new(zone), from, until, max as usize)
        .into_iter()
        .map(timestamptz)
        .collect()
}

/// `jobs._cron_next(cron, zone, after)`: the first slot after `after`, or NULL when none comes.
#[pg_extern(stable, parallel_safe, name = "_cron_next")]
pub fn cron_next(
    cron: &str,
    zone: &str,
    after: TimestampWithTimeZone,
) -> Option<TimestampWithTimeZone> {
    let from = instant(after)?;
    parsed(cron)
        .slots(&Zone::new(zone), from, i64::MAX, 1)
        .first()
        .copied()
        .map(timestamptz)
}

/// `jobs._cron_latest(cron, zone, after, until)`: the last slot in (after, until], or NULL.
/// Looks back from `until` in windows that double, so a long gap costs a few searches.
#[pg_extern(stable, parallel_safe, name = "_cron_latest")]
pub fn cron_latest(
    cron: &str,
    zone: &str,
    after: TimestampWithTimeZone,
    until: TimestampWithTimeZone,
) -> Option<TimestampWithTimeZone> {
    let (from, until) = (instant(after)?, instant(until)?);
    let cron = parsed(cron);
    let zone = Zone::new(zone);
    let mut window = US_PER_MINUTE;
    loop {
        let start = until.saturating_sub(window).max(from);
        if let Some(mut latest) = cron.slots(&zone, start, until, 1).first().copied() {
            while let Some(next) = cron.slots(&zone, latest, until, 1).first().copied() {
                latest = next;
            }
            return Some(timestamptz(latest));
        }
        if start == from {
            return None;
        }
        window = window.saturating_mul(2);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_and_names() {
        let c = parse("*/15 9-17 * jan,JUL mon-fri").unwrap();
        assert_eq!(c.minutes, 1 | 1 << 15 | 1 << 30 | 1 << 45);
        assert_eq!(c.hours, (9..=17).fold(0, |b, h| b | 1 << h));
        assert_eq!(c.months, 1 << 1 | 1 << 7);
        assert_eq!(c.weekdays, 0b0111110);
        assert!(c.any_day && !c.any_weekday);
        assert_eq!(parse("0 0 * * 7").unwrap().weekdays, 1);
        assert_eq!(parse("@daily").unwrap(), parse("0 0 * * *").unwrap());
        assert_eq!(
            parse("5/20 * * * *").unwrap().minutes,
            1 << 5 | 1 << 25 | 1 << 45
        );
    }

    #[test]
    fn refusals_name_the_field() {
        assert!(parse("0 25 * * *")
            .unwrap_err()
            .starts_with("cron field 2 (hour) is \"25\""));
        assert!(parse("0 0 * foo *")
            .unwrap_err()
            .contains("field 4 (month)"));
        assert!(parse("0 0 * * 8")
            .unwrap_err()
            .contains("field 5 (day of week)"));
        assert!(parse("*/0 * * * *")
            .unwrap_err()
            .contains("field 1 (minute)"));
        assert!(parse("5-1 * * * *").unwrap_err().contains("field 1"));
        assert!(parse("* * * *").unwrap_err().contains("5 fields"));
        assert!(parse("@often").unwrap_err().contains("unknown macro"));
    }

    #[test]
    fn calendar() {
        assert_eq!(civil(0), (2000, 1, 1));
        assert_eq!(civil(59), (2000, 2, 29));
        assert_eq!(civil(-1), (1999, 12, 31));
        assert_eq!(civil(9466), (2025, 12, 1));
    }
}
