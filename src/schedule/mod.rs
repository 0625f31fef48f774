//! Time for the night: the zone, the morning deadline, cron fire times, and sleeping (docs/limits.md, docs/README.md).
//!
//! This module resolves the time zone (flag/config → `$TZ` → system → UTC with a warning),
//! turns a deadline (`07:00` or RFC 3339) into an instant correct across midnight and DST,
//! computes cron fire times with `croner` (5 or 6 fields; a DST change fires a job once), prints
//! ready-to-install crontab and systemd units, and sleeps in slices checked against the wall
//! clock so a suspended machine wakes on time, cancellably. Time is read through the [`Clock`]
//! trait so tests can move it.
//!
//! It is not the usage-limit reader (`limit`), and it does not decide *whether* to sleep or
//! start a drain: the run loop and `nightshift schedule` do.
//!
//! Local-time rules used throughout: a wall time that does not exist (spring-forward gap)
//! resolves to the end of the gap (the first valid instant after it); a wall time that exists
//! twice (fall-back overlap) resolves to the earlier instant. Days are stepped on the calendar,
//! never as 24 hours.
//!
//! Why `croner` and not the `cron` crate: `cron` 0.17 requires a seconds field (it rejects
//! the 5-field `0 7 * * *` users type), and across DST it skips the spring-forward day and
//! fires twice on the fall-back day; `croner` accepts 5 or 6 fields and fires once in both
//! cases (pinned by tests/schedule.rs).

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::str::FromStr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{
    DateTime, LocalResult, NaiveDate, NaiveDateTime, NaiveTime, TimeDelta, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;
use tokio_util::sync::CancellationToken;

mod server;

pub use server::{MAX_SKEW, ServerClock, server_clock, server_now, skew_note};

/// Errors of zone resolution, deadlines and cron expressions.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ScheduleError {
    /// A zone name given by flag or config is not an IANA zone.
    #[error(
        "unknown time zone {zone:?} (from {origin}): use an IANA name such as Asia/Taipei or America/New_York"
    )]
    UnknownZone { zone: String, origin: String },
    /// A deadline that is neither `HH:MM` nor RFC 3339.
    #[error(
        "bad deadline {input:?}: expected HH:MM (24-hour local time, e.g. 07:00) or RFC 3339 (e.g. 2026-03-05T07:00:00+08:00)"
    )]
    BadDeadline { input: String },
    /// An RFC 3339 deadline that already passed.
    #[error(
        "deadline {input:?} is in the past (now is {now}): give a later time, or HH:MM for the next occurrence"
    )]
    DeadlinePast { input: String, now: String },
    /// A cron expression croner rejects.
    #[error(
        "bad cron expression {expr:?}: {reason} (expected 5 fields `min hour day month weekday`, or 6 with seconds first)"
    )]
    BadCron { expr: String, reason: String },
    /// A cron expression that never fires again.
    #[error("cron expression {expr:?} has no fire time after {after}: {reason}")]
    NoFireTime {
        expr: String,
        after: String,
        reason: String,
    },
    /// A valid cron expression the target (crontab or systemd OnCalendar) cannot express.
    #[error("cron expression {expr:?} cannot be written as {target}: {reason}")]
    Untranslatable {
        expr: String,
        target: &'static str,
        reason: String,
    },
}

// ---------------------------------------------------------------------------------------------
// Zone
// ---------------------------------------------------------------------------------------------

/// Where the resolved time zone came from (docs/config.md `timezone`, DEPS "Scheduling and time").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZoneSource {
    /// `--tz` or the config key `timezone`.
    Flag,
    /// The `TZ` environment variable (`Area/City` or `:Area/City`).
    Env,
    /// The system setting; `how` names it (`/etc/timezone`, `/etc/localtime -> …`, `iana-time-zone`).
    System { how: String },
    /// Nothing usable was found: UTC, and the caller should warn.
    UtcFallback,
}

impl ZoneSource {
    /// The warning to print when the zone is a guess (only for [`ZoneSource::UtcFallback`]).
    pub fn warning(&self) -> Option<String> {
        matches!(self, ZoneSource::UtcFallback).then(|| {
            "no time zone configured and none found in $TZ, /etc/timezone or /etc/localtime: using UTC \
             (set `timezone` in .nightshift/config.toml or --tz)"
                .to_string()
        })
    }
}

/// Resolves the zone: `flag_or_config` → `$TZ` → system (`/etc/timezone`, the `/etc/localtime`
/// symlink, iana-time-zone) → UTC with [`ZoneSource::UtcFallback`]. An unusable `$TZ` (a POSIX
/// rule such as `CST-8`) is skipped, as chrono's `Local` would fall back too.
///
/// # Errors
/// [`ScheduleError::UnknownZone`] when `flag_or_config` is given but is not an IANA zone name:
/// an explicit setting is never silently replaced.
pub fn resolve_zone(flag_or_config: Option<&str>) -> Result<(Tz, ZoneSource), ScheduleError> {
    let env_tz = std::env::var("TZ").ok();
    resolve_zone_in(flag_or_config, env_tz.as_deref(), Path::new("/etc"), true)
}

/// [`resolve_zone`] with its inputs explicit: `env_tz` is the value of `$TZ`, `etc` the
/// directory holding `timezone` / `localtime`, `use_library` whether to ask iana-time-zone last.
///
/// # Errors
/// As [`resolve_zone`].
pub fn resolve_zone_in(
    flag_or_config: Option<&str>,
    env_tz: Option<&str>,
    etc: &Path,
    use_library: bool,
) -> Result<(Tz, ZoneSource), ScheduleError> {
    if let Some(name) = flag_or_config {
        let tz = parse_zone(name).ok_or_else(|| ScheduleError::UnknownZone {
            zone: name.to_string(),
            origin: "--tz / config `timezone`".to_string(),
        })?;
        return Ok((tz, ZoneSource::Flag));
    }
    if let Some(tz) = env_tz.and_then(parse_zone) {
        return Ok((tz, ZoneSource::Env));
    }
    let timezone_file = etc.join("timezone");
    if let Ok(text) = std::fs::read_to_string(&timezone_file)
        && let Some(tz) = parse_zone(text.trim())
    {
        return Ok((
            tz,
            ZoneSource::System {
                how: timezone_file.display().to_string(),
            },
        ));
    }
    let localtime = etc.join("localtime");
    if let Ok(target) = std::fs::read_link(&localtime)
        && let Some(tz) = zone_from_zoneinfo_path(&target)
    {
        return Ok((
            tz,
            ZoneSource::System {
                how: format!("{} -> {}", localtime.display(), target.display()),
            },
        ));
    }
    // iana-time-zone ignores $TZ on Linux (chrono::Local honours it), which is why $TZ was read first.
    if use_library
        && let Some(tz) = iana_time_zone::get_timezone()
            .ok()
            .as_deref()
            .and_then(parse_zone)
    {
        return Ok((
            tz,
            ZoneSource::System {
                how: "iana-time-zone".to_string(),
            },
        ));
    }
    Ok((Tz::UTC, ZoneSource::UtcFallback))
}

/// `Asia/Taipei`, `:Asia/Taipei` (glibc's file form), surrounding spaces allowed.
fn parse_zone(name: &str) -> Option<Tz> {
    let name = name.trim().trim_start_matches(':');
    if name.is_empty() {
        return None;
    }
    Tz::from_str(name).ok().or_else(|| {
        // `:/usr/share/zoneinfo/Asia/Taipei` is also accepted by glibc.
        zone_from_zoneinfo_path(Path::new(name))
    })
}

/// `/usr/share/zoneinfo/Asia/Taipei` or `../usr/share/zoneinfo/posix/Asia/Taipei` → Asia/Taipei.
fn zone_from_zoneinfo_path(path: &Path) -> Option<Tz> {
    let text = path.to_string_lossy();
    let (_, rest) = text.split_once("zoneinfo/")?;
    let rest = rest
        .strip_prefix("posix/")
        .or_else(|| rest.strip_prefix("right/"))
        .unwrap_or(rest);
    Tz::from_str(rest).ok()
}

// ---------------------------------------------------------------------------------------------
// Local time and deadlines
// ---------------------------------------------------------------------------------------------

/// Maps a wall-clock time in `zone` to an instant: a time in a DST gap → the end of the gap
/// (the first valid instant after it); a time in an overlap → the earlier instant. docs/limits.md.
pub fn resolve_local<Z: TimeZone>(zone: &Z, local: NaiveDateTime) -> DateTime<Utc> {
    match zone.from_local_datetime(&local) {
        LocalResult::Single(t) => t.with_timezone(&Utc),
        LocalResult::Ambiguous(earlier, later) => {
            let (a, b) = (earlier.with_timezone(&Utc), later.with_timezone(&Utc));
            a.min(b)
        }
        LocalResult::None => {
            // Gaps in tzdb are at most a few hours and start on whole minutes: walk forward
            // minute by minute to the first wall time that exists; that is the gap's end.
            let start = local.with_second(0).unwrap_or(local);
            for minutes in 1..=24 * 60 {
                let probe = start + TimeDelta::minutes(minutes);
                match zone.from_local_datetime(&probe) {
                    LocalResult::Single(t) => return t.with_timezone(&Utc),
                    LocalResult::Ambiguous(a, b) => {
                        return a.with_timezone(&Utc).min(b.with_timezone(&Utc));
                    }
                    LocalResult::None => {}
                }
            }
            // Unreachable with real tzdb data; treat the wall time as UTC rather than panic.
            Utc.from_utc_datetime(&local)
        }
    }
}

/// The next instant strictly after `now` whose wall-clock time in `tz` is `hh:mm`, stepping
/// calendar days (not 24 h). Gap → end of the gap, overlap → earlier instant. docs/limits.md
/// ("default next 07:00 … correct across midnight and DST").
///
/// Examples (Asia/Taipei): now 23:30 → tomorrow 07:00; now 06:59 → today 07:00; now 07:00 →
/// tomorrow 07:00. `hh` > 23 or `mm` > 59 are clamped to 23:59.
pub fn next_local_time(now: DateTime<Utc>, tz: Tz, hh: u32, mm: u32) -> DateTime<Utc> {
    let time = NaiveTime::from_hms_opt(hh.min(23), mm.min(59), 0).unwrap_or(NaiveTime::MIN);
    let mut day: NaiveDate = now.with_timezone(&tz).date_naive();
    // Three days always suffice: today's time passed → tomorrow exists in every zone.
    for _ in 0..4 {
        let candidate = resolve_local(&tz, day.and_time(time));
        if candidate > now {
            return candidate;
        }
        day = day.succ_opt().unwrap_or(day);
    }
    resolve_local(&tz, day.and_time(time))
}

/// Parses a deadline: `HH:MM` (also `H:MM`) is the next such local time in `tz` (see
/// [`next_local_time`]); an RFC 3339 instant is taken as is. docs/commands.md#drain, docs/limits.md.
///
/// # Errors
/// [`ScheduleError::BadDeadline`] naming the accepted forms; [`ScheduleError::DeadlinePast`]
/// for an RFC 3339 instant not after `now`.
pub fn parse_deadline(s: &str, now: DateTime<Utc>, tz: Tz) -> Result<DateTime<Utc>, ScheduleError> {
    let input = s.trim();
    if let Some((h, m)) = input.split_once(':') {
        let digits = |x: &str, max: u32| -> Option<u32> {
            if x.is_empty() || x.len() > 2 || !x.bytes().all(|b| b.is_ascii_digit()) {
                return None;
            }
            x.parse().ok().filter(|v| *v <= max)
        };
        if m.len() == 2
            && let (Some(hh), Some(mm)) = (digits(h, 23), digits(m, 59))
        {
            return Ok(next_local_time(now, tz, hh, mm));
        }
    }
    match DateTime::parse_from_rfc3339(input) {
        Ok(t) => {
            let t = t.with_timezone(&Utc);
            if t <= now {
                return Err(ScheduleError::DeadlinePast {
                    input: input.to_string(),
                    now: now.to_rfc3339(),
                });
            }
            Ok(t)
        }
        Err(_) => Err(ScheduleError::BadDeadline {
            input: input.to_string(),
        }),
    }
}

// ---------------------------------------------------------------------------------------------
// Clock and sliced sleep
// ---------------------------------------------------------------------------------------------

/// A boxed future returned by [`Clock::sleep`] (boxed so `dyn Clock` works).
pub type SleepFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// The source of time: the wall clock (`now`, UTC) and a sleep of a duration.
pub trait Clock: Send + Sync {
    /// The wall-clock instant (UTC). May jump (NTP, suspend/resume).
    fn now(&self) -> DateTime<Utc>;
    /// Sleeps for `d` of running time (may be longer than wall time when the machine suspends).
    fn sleep(&self, d: Duration) -> SleepFuture<'_>;
}

/// The real clock: `Utc::now()` and `tokio::time::sleep`.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> DateTime<Utc> {
        Utc::now()
    }
    fn sleep(&self, d: Duration) -> SleepFuture<'_> {
        Box::pin(tokio::time::sleep(d))
    }
}

/// A clock for tests: time moves only when told. `sleep(d)` advances the time by `d` (plus any
/// jump scheduled with [`TestClock::jump_on_sleep`], which simulates a suspend), records the
/// call, and yields to the runtime. Cloning shares the same time.
#[derive(Debug, Clone)]
pub struct TestClock {
    inner: Arc<Mutex<TestClockState>>,
}

#[derive(Debug)]
struct TestClockState {
    now: DateTime<Utc>,
    sleeps: Vec<Duration>,
    jumps: Vec<(usize, Duration)>,
}

impl TestClock {
    /// A clock standing at `start`.
    pub fn new(start: DateTime<Utc>) -> TestClock {
        TestClock {
            inner: Arc::new(Mutex::new(TestClockState {
                now: start,
                sleeps: Vec::new(),
                jumps: Vec::new(),
            })),
        }
    }

    /// Moves the wall clock forward by `d` (milliseconds precision).
    pub fn advance(&self, d: Duration) {
        let mut s = self.lock();
        s.now += TimeDelta::from_std(d).unwrap_or(TimeDelta::MAX);
    }

    /// Makes the `nth` call of `sleep` (1-based) also jump the wall clock by `extra`, as a
    /// machine suspended during that slice would see on resume.
    pub fn jump_on_sleep(&self, nth: usize, extra: Duration) {
        self.lock().jumps.push((nth, extra));
    }

    /// The durations `sleep` was called with, in order.
    pub fn sleeps(&self) -> Vec<Duration> {
        self.lock().sleeps.clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TestClockState> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl Clock for TestClock {
    fn now(&self) -> DateTime<Utc> {
        self.lock().now
    }
    fn sleep(&self, d: Duration) -> SleepFuture<'_> {
        {
            let mut s = self.lock();
            s.sleeps.push(d);
            let n = s.sleeps.len();
            let extra: Duration = s
                .jumps
                .iter()
                .filter(|(k, _)| *k == n)
                .map(|(_, e)| *e)
                .sum();
            s.now += TimeDelta::from_std(d + extra).unwrap_or(TimeDelta::MAX);
        }
        Box::pin(tokio::task::yield_now())
    }
}

/// The default slice of [`sleep_until`]: 30 s.
pub const DEFAULT_SLICE: Duration = Duration::from_secs(30);

/// How a [`sleep_until`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepOutcome {
    /// The wall clock reached `until`.
    Reached,
    /// The token was cancelled first (signal, shutdown).
    Cancelled,
}

/// Sleeps until the wall clock reaches `until`, in slices of at most `slice` (0 → 30 s), each
/// followed by a look at the wall clock, so a machine suspended mid-sleep wakes at most one
/// slice after resume instead of oversleeping. Returns at once when `cancel` fires. docs/limits.md#sleep-policy.
pub async fn sleep_until(
    clock: &dyn Clock,
    until: DateTime<Utc>,
    cancel: &CancellationToken,
    slice: Duration,
) -> SleepOutcome {
    let slice = if slice.is_zero() {
        DEFAULT_SLICE
    } else {
        slice
    };
    loop {
        if cancel.is_cancelled() {
            return SleepOutcome::Cancelled;
        }
        let now = clock.now();
        if now >= until {
            return SleepOutcome::Reached;
        }
        let remaining = (until - now).to_std().unwrap_or(Duration::ZERO);
        let step = remaining.min(slice).max(Duration::from_millis(1));
        tokio::select! {
            biased;
            _ = cancel.cancelled() => return SleepOutcome::Cancelled,
            _ = clock.sleep(step) => {}
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Cron
// ---------------------------------------------------------------------------------------------

/// A cron expression for `nightshift schedule --cron` (docs/README.md, docs/commands.md): 5 fields
/// (`min hour day month weekday`) or 6 with seconds first; `@daily`-style nicknames too.
#[derive(Debug, Clone)]
pub struct CronSchedule {
    expr: String,
    cron: croner::Cron,
}

impl CronSchedule {
    /// Parses an expression.
    ///
    /// # Errors
    /// [`ScheduleError::BadCron`] with croner's reason.
    pub fn parse(expr: &str) -> Result<CronSchedule, ScheduleError> {
        let expanded = expand_nickname(expr.trim());
        let fields = expanded.split_whitespace().count();
        if !(5..=6).contains(&fields) {
            return Err(ScheduleError::BadCron {
                expr: expr.to_string(),
                reason: format!("{fields} fields"),
            });
        }
        let cron = croner_parse(&expanded).map_err(|e| ScheduleError::BadCron {
            expr: expr.to_string(),
            reason: bad_field(&expanded).unwrap_or_else(|| e.to_string()),
        })?;
        Ok(CronSchedule {
            expr: expr.trim().to_string(),
            cron,
        })
    }

    /// The expression as given.
    pub fn expr(&self) -> &str {
        &self.expr
    }

    /// The first fire time strictly after `now`, with the fields read as wall-clock time in
    /// `tz`. Across DST each fire happens once: a time in the gap fires at the end of the gap,
    /// a time in the overlap fires on its first pass.
    ///
    /// # Errors
    /// [`ScheduleError::NoFireTime`] when the expression never matches again (e.g. `0 0 30 2 *`).
    pub fn next_after(&self, now: DateTime<Utc>, tz: Tz) -> Result<DateTime<Utc>, ScheduleError> {
        let local = now.with_timezone(&tz);
        self.cron
            .find_next_occurrence(&local, false)
            .map(|t| t.with_timezone(&Utc))
            .map_err(|e| ScheduleError::NoFireTime {
                expr: self.expr.clone(),
                after: now.to_rfc3339(),
                reason: e.to_string(),
            })
    }
}

fn croner_parse(expr: &str) -> Result<croner::Cron, croner::errors::CronError> {
    croner::parser::CronParser::builder()
        .seconds(croner::parser::Seconds::Optional)
        .year(croner::parser::Year::Disallowed)
        .build()
        .parse(expr)
}

/// Names the first field croner rejects and its allowed values, e.g. "the hour field `25`
/// is not in 0–23". croner's own reason ("Number out of bounds") names neither. Each field
/// is tried alone, the others `*`; `None` when only the combination is wrong.
fn bad_field(expr: &str) -> Option<String> {
    const FIVE: [(&str, &str); 5] = [
        ("minute", "0–59"),
        ("hour", "0–23"),
        ("day-of-month", "1–31, L or W forms"),
        ("month", "1–12 or JAN–DEC"),
        ("day-of-week", "0–7 (0 and 7 are Sunday) or SUN–SAT"),
    ];
    let fields: Vec<&str> = expr.split_whitespace().collect();
    let names: Vec<(&str, &str)> = if fields.len() == 6 {
        std::iter::once(("second", "0–59")).chain(FIVE).collect()
    } else {
        FIVE.to_vec()
    };
    fields.iter().zip(&names).enumerate().find_map(|(i, (field, (name, allowed)))| {
        let alone: Vec<&str> = (0..fields.len()).map(|j| if j == i { *field } else { "*" }).collect();
        croner_parse(&alone.join(" ")).is_err().then(|| format!("the {name} field `{field}` is not valid (allowed: {allowed}, with `*`, `,`, `-` and `/`)"))
    })
}

/// The first field using croner's Quartz extensions (`L`, `W`, `#`, `?`), which neither
/// crontab nor systemd's OnCalendar can say. Month and weekday names (`JUL`, `WED`) may hold
/// those letters and are not extensions.
fn quartz_extension<'a>(fields: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    fields.into_iter().find(|f| {
        let stripped = NAMES
            .iter()
            .fold(f.to_ascii_uppercase(), |acc, n| acc.replace(n, ""));
        stripped.contains(['L', 'W', '#', '?'])
    })
}

fn expand_nickname(expr: &str) -> String {
    match expr.to_ascii_lowercase().as_str() {
        "@yearly" | "@annually" => "0 0 1 1 *".into(),
        "@monthly" => "0 0 1 * *".into(),
        "@weekly" => "0 0 * * 0".into(),
        "@daily" | "@midnight" => "0 0 * * *".into(),
        "@hourly" => "0 * * * *".into(),
        _ => expr.to_string(),
    }
}

/// Single-quotes a word for `sh` (crontab command lines).
fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// A crontab entry that runs `BINARY --repo REPO drain` at each fire time of `expr` in `tz`:
/// a `CRON_TZ=` line (cronie and systemd-cron honour it; Debian's vixie cron does not, which
/// the comment says) and the job line, logging to `REPO/.nightshift/cron.log`. `path_var`,
/// when given, is set as the job's `PATH` (cron's own is `/usr/bin:/bin`). docs/commands.md
/// `schedule --print-crontab`.
///
/// # Errors
/// [`ScheduleError::BadCron`] for an invalid expression; [`ScheduleError::Untranslatable`] for a
/// 6-field expression whose seconds field is not `0` (crontab has minute resolution), or one
/// using `L`, `W`, `#` or `?` (croner reads them, cron daemons do not).
pub fn print_crontab(
    expr: &str,
    binary: &Path,
    repo: &Path,
    tz: Tz,
    path_var: Option<&str>,
) -> Result<String, ScheduleError> {
    CronSchedule::parse(expr)?;
    let expanded = expand_nickname(expr.trim());
    let fields: Vec<&str> = expanded.split_whitespace().collect();
    if let Some(bad) = quartz_extension(fields.iter().copied()) {
        return Err(ScheduleError::Untranslatable {
            expr: expr.to_string(),
            target: "a crontab line",
            reason: format!("field {bad:?} uses L, W, # or ?, which cron daemons do not read"),
        });
    }
    let five = match fields.len() {
        6 if fields[0] == "0" || fields[0] == "00" => fields[1..].join(" "),
        6 => {
            return Err(ScheduleError::Untranslatable {
                expr: expr.to_string(),
                target: "a crontab line",
                reason: format!("crontab has no seconds field (seconds {:?})", fields[0]),
            });
        }
        _ => fields.join(" "),
    };
    // `%` is a newline in a crontab command: escape it. `TZ=` sits right before the binary:
    // an assignment prefix applies to that one command only (not to the `cd`).
    let log = repo.join(".nightshift").join("cron.log");
    let command = format!(
        "cd {} && {}TZ={} {} --repo {} drain >> {} 2>&1",
        sh_quote(&repo.display().to_string()),
        path_var
            .map(|p| format!("PATH={} ", sh_quote(p)))
            .unwrap_or_default(),
        tz.name(),
        sh_quote(&binary.display().to_string()),
        sh_quote(&repo.display().to_string()),
        sh_quote(&log.display().to_string()),
    )
    .replace('%', r"\%");
    Ok(format!(
        "# nightshift drain for {repo} (cron expression {expr:?}, time zone {tz})\n\
         # CRON_TZ needs cronie or systemd-cron; on Debian's cron set the system zone instead.\n\
         CRON_TZ={tz}\n\
         {five} {command}\n",
        repo = repo.display(),
        expr = expr.trim(),
        tz = tz.name(),
    ))
}

/// A systemd `.service` + `.timer` pair, ready for `~/.config/systemd/user/` or
/// `/etc/systemd/system/`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SystemdUnits {
    /// File name of the service, `nightshift-drain.service`.
    pub service_name: String,
    /// The service unit text.
    pub service: String,
    /// File name of the timer, `nightshift-drain.timer`.
    pub timer_name: String,
    /// The timer unit text (its `OnCalendar=` carries the zone).
    pub timer: String,
    /// The `OnCalendar=` value alone, e.g. `*-*-* 22:00:00 Asia/Taipei`.
    pub on_calendar: String,
}

/// Translates `expr` into a systemd timer firing `BINARY --repo REPO drain` in `tz`, with
/// `path_var` (when given) as the service's `PATH`. docs/commands.md#schedule.
///
/// # Errors
/// [`ScheduleError::BadCron`] for an invalid expression; [`ScheduleError::Untranslatable`] for
/// what OnCalendar cannot say: `L`, `W`, `#`, `?`, or a day-of-month *and* a weekday both
/// restricted (cron fires when either matches, systemd only when both do).
pub fn print_systemd(
    expr: &str,
    binary: &Path,
    repo: &Path,
    tz: Tz,
    path_var: Option<&str>,
) -> Result<SystemdUnits, ScheduleError> {
    CronSchedule::parse(expr)?;
    let on_calendar = on_calendar(expr, tz)?;
    // Unit files expand `%` specifiers everywhere; ExecStart also expands `$` and reads
    // C-style escapes inside its double quotes.
    let esc = |s: &str| s.replace('%', "%%");
    let exec_arg = |s: &str| {
        esc(&s
            .replace('\\', "\\\\")
            .replace('"', "\\\"")
            .replace('$', "$$"))
    };
    let repo_s = esc(&repo.display().to_string());
    let repo_arg = exec_arg(&repo.display().to_string());
    let bin_s = exec_arg(&binary.display().to_string());
    let service = format!(
        "# nightshift-drain.service — started by nightshift-drain.timer\n\
         [Unit]\n\
         Description=nightshift drain of {repo_s}\n\
         Wants=network-online.target\n\
         After=network-online.target\n\
         \n\
         [Service]\n\
         Type=oneshot\n\
         WorkingDirectory={repo_s}\n\
         Environment=TZ={tz}\n\
         {path_line}\
         ExecStart=\"{bin_s}\" --repo \"{repo_arg}\" drain\n",
        tz = tz.name(),
        path_line = path_var
            .map(|p| format!(
                "Environment=\"PATH={}\"\n",
                esc(&p.replace('\\', "\\\\").replace('"', "\\\""))
            ))
            .unwrap_or_default(),
    );
    let timer = format!(
        "# nightshift-drain.timer — cron expression {expr:?}\n\
         [Unit]\n\
         Description=nightshift drain on schedule ({expr})\n\
         \n\
         [Timer]\n\
         OnCalendar={on_calendar}\n\
         # A drain missed while the machine was off is not run late: the morning deadline would stop it.\n\
         Persistent=false\n\
         Unit=nightshift-drain.service\n\
         \n\
         [Install]\n\
         WantedBy=timers.target\n",
        expr = expr.trim(),
    );
    Ok(SystemdUnits {
        service_name: "nightshift-drain.service".into(),
        service,
        timer_name: "nightshift-drain.timer".into(),
        timer,
        on_calendar,
    })
}

/// The `OnCalendar=` value for a cron expression: `DOW *-MONTH-DAY HOUR:MINUTE:SECOND ZONE`.
fn on_calendar(expr: &str, tz: Tz) -> Result<String, ScheduleError> {
    let expanded = expand_nickname(expr.trim());
    let mut fields: Vec<&str> = expanded.split_whitespace().collect();
    let second = if fields.len() == 6 {
        fields.remove(0)
    } else {
        "0"
    };
    let untranslatable = |reason: String| ScheduleError::Untranslatable {
        expr: expr.trim().to_string(),
        target: "a systemd OnCalendar",
        reason,
    };
    if let Some(bad) = quartz_extension(fields.iter().copied().chain([second])) {
        return Err(untranslatable(format!("field {bad:?} uses L, W, # or ?")));
    }
    let (minute, hour, dom, month, dow) = (fields[0], fields[1], fields[2], fields[3], fields[4]);
    if dom != "*" && dow != "*" {
        return Err(untranslatable(
            "both day-of-month and weekday are restricted: cron fires when either matches, systemd only when both do".into(),
        ));
    }
    let second = field_values(second, 0, 59, &[]).map_err(&untranslatable)?;
    let minute = field_values(minute, 0, 59, &[]).map_err(&untranslatable)?;
    let hour = field_values(hour, 0, 23, &[]).map_err(&untranslatable)?;
    let dom = field_values(dom, 1, 31, &[]).map_err(&untranslatable)?;
    let month = field_values(month, 1, 12, &MONTH_NAMES).map_err(&untranslatable)?;
    let dow_part = match field_values(dow, 0, 7, &DOW_NAMES).map_err(&untranslatable)? {
        None => String::new(),
        Some(days) => {
            const SYSTEMD_DAYS: [&str; 7] = ["Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"];
            let mut set: Vec<u32> = days.iter().map(|d| d % 7).collect();
            // Monday first, as systemd prints them.
            set.sort_by_key(|d| (d + 6) % 7);
            set.dedup();
            let names: Vec<&str> = set.iter().map(|d| SYSTEMD_DAYS[*d as usize]).collect();
            format!("{} ", names.join(","))
        }
    };
    let list = |v: Option<Vec<u32>>| match v {
        None => "*".to_string(),
        Some(v) => v
            .iter()
            .map(|n| format!("{n:02}"))
            .collect::<Vec<_>>()
            .join(","),
    };
    Ok(format!(
        "{dow_part}*-{}-{} {}:{}:{} {}",
        list(month),
        list(dom),
        list(hour),
        list(minute),
        list(second),
        tz.name()
    ))
}

const MONTH_NAMES: [&str; 12] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC",
];
const DOW_NAMES: [&str; 7] = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"];
const NAMES: [&str; 19] = [
    "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC", "SUN",
    "MON", "TUE", "WED", "THU", "FRI", "SAT",
];

/// Expands one cron field into its values (`None` for `*`): numbers, names, `a-b`, `*/s`,
/// `a-b/s`, `a/s`, comma lists. `names[i]` stands for `lo + i` (weekday names for 0..6).
fn field_values(field: &str, lo: u32, hi: u32, names: &[&str]) -> Result<Option<Vec<u32>>, String> {
    if field == "*" {
        return Ok(None);
    }
    let value = |s: &str| -> Result<u32, String> {
        let up = s.to_ascii_uppercase();
        if let Some(i) = names.iter().position(|n| *n == up) {
            let base = if names.len() == 12 { 1 } else { 0 };
            return Ok(base + i as u32);
        }
        let v: u32 = s.parse().map_err(|_| format!("{s:?} is not a number"))?;
        if v < lo || v > hi {
            return Err(format!("{v} is outside {lo}..{hi}"));
        }
        Ok(v)
    };
    let mut out = Vec::new();
    for part in field.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .map_err(|_| format!("bad step in {part:?}"))?
                    .max(1),
            ),
            None => (part, 1),
        };
        let (a, b) = if range == "*" {
            (lo, hi)
        } else if let Some((a, b)) = range.split_once('-') {
            (value(a)?, value(b)?)
        } else if step > 1 {
            (value(range)?, hi)
        } else {
            let v = value(range)?;
            (v, v)
        };
        if a > b {
            return Err(format!("range {part:?} runs backwards"));
        }
        out.extend((a..=b).step_by(step as usize));
    }
    out.sort_unstable();
    out.dedup();
    Ok(Some(out))
}

/// The binary path to write into a crontab line or systemd unit: the running executable,
/// else `nightshift` (found on PATH by cron/systemd).
pub fn current_binary() -> PathBuf {
    std::env::current_exe().unwrap_or_else(|_| PathBuf::from("nightshift"))
}
