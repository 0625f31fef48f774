//! Zone, deadline, cron and sliced sleep (docs/limits.md, docs/README.md), across midnight and DST in
//! America/New_York, America/Santiago and Australia/Lord_Howe.

use std::path::Path;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use chrono_tz::Tz;
use nightshift::schedule::{
    Clock, CronSchedule, ScheduleError, SleepOutcome, SystemClock, TestClock, ZoneSource,
    next_local_time, parse_deadline, print_crontab, print_systemd, resolve_zone_in, sleep_until,
};
use tokio_util::sync::CancellationToken;

fn at(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const NY: Tz = chrono_tz::America::New_York;
const SANTIAGO: Tz = chrono_tz::America::Santiago;
const LORD_HOWE: Tz = chrono_tz::Australia::Lord_Howe;
const TAIPEI: Tz = chrono_tz::Asia::Taipei;

// --- deadline ---------------------------------------------------------------------------------

#[test]
fn deadline_across_midnight() {
    // Taipei is UTC+8: 23:30 local is 15:30Z.
    assert_eq!(
        parse_deadline("07:00", at("2026-03-04T15:30:00Z"), TAIPEI).unwrap(),
        at("2026-03-04T23:00:00Z")
    );
    // 06:59 → today 07:00.
    assert_eq!(
        parse_deadline("07:00", at("2026-03-04T22:59:00Z"), TAIPEI).unwrap(),
        at("2026-03-04T23:00:00Z")
    );
    // 07:00 exactly → tomorrow.
    assert_eq!(
        parse_deadline("07:00", at("2026-03-04T23:00:00Z"), TAIPEI).unwrap(),
        at("2026-03-05T23:00:00Z")
    );
    assert_eq!(
        parse_deadline("7:05", at("2026-03-04T23:00:00Z"), TAIPEI).unwrap(),
        at("2026-03-04T23:05:00Z")
    );
}

#[test]
fn deadline_across_new_york_spring_forward() {
    // Sat 2026-03-07 23:00 EST → Sun 07:00 EDT: 7 hours of wall clock, 7 real hours.
    assert_eq!(
        next_local_time(at("2026-03-08T04:00:00Z"), NY, 7, 0),
        at("2026-03-08T11:00:00Z")
    );
    // 02:30 does not exist on 2026-03-08: the end of the gap, 03:00 EDT.
    assert_eq!(
        next_local_time(at("2026-03-08T04:00:00Z"), NY, 2, 30),
        at("2026-03-08T07:00:00Z")
    );
    // The day after, 02:30 EDT exists again.
    assert_eq!(
        next_local_time(at("2026-03-08T08:00:00Z"), NY, 2, 30),
        at("2026-03-09T06:30:00Z")
    );
}

#[test]
fn deadline_across_new_york_fall_back() {
    // Sat 2026-10-31 23:00 EDT → Sun 07:00 EST.
    assert_eq!(
        next_local_time(at("2026-11-01T03:00:00Z"), NY, 7, 0),
        at("2026-11-01T12:00:00Z")
    );
    // 01:30 happens twice on 2026-11-01: the earlier (EDT).
    assert_eq!(
        next_local_time(at("2026-11-01T03:00:00Z"), NY, 1, 30),
        at("2026-11-01T05:30:00Z")
    );
    // Steps calendar days, not 24 h: 07:00 Saturday → 07:00 Sunday is 25 hours.
    assert_eq!(
        next_local_time(at("2026-10-31T11:00:00Z"), NY, 7, 0),
        at("2026-11-01T12:00:00Z")
    );
}

#[test]
fn deadline_across_santiago_midnight_gap() {
    // Chile moves 2026-09-06 00:00 (UTC-4) to 01:00 (UTC-3): midnight does not exist.
    let now = at("2026-09-06T02:00:00Z"); // Sat 22:00 -04
    assert_eq!(
        next_local_time(now, SANTIAGO, 0, 0),
        at("2026-09-06T04:00:00Z")
    ); // 01:00 -03
    assert_eq!(
        next_local_time(now, SANTIAGO, 0, 30),
        at("2026-09-06T04:00:00Z")
    );
    assert_eq!(
        next_local_time(now, SANTIAGO, 7, 0),
        at("2026-09-06T10:00:00Z")
    ); // 07:00 -03
    assert_eq!(
        parse_deadline("07:00", now, SANTIAGO).unwrap(),
        at("2026-09-06T10:00:00Z")
    );
}

#[test]
fn deadline_across_lord_howe_half_hour_shift() {
    // 2026-10-04 02:00 LHST (+10:30) → 02:30 LHDT (+11).
    let now = at("2026-10-03T14:30:00Z"); // 01:00 LHST
    assert_eq!(
        next_local_time(now, LORD_HOWE, 2, 15),
        at("2026-10-03T15:30:00Z")
    );
    assert_eq!(
        next_local_time(now, LORD_HOWE, 7, 0),
        at("2026-10-03T20:00:00Z")
    );
    // 2026-04-05 02:00 LHDT → 01:30 LHST: 01:45 happens twice, the earlier is +11.
    let now = at("2026-04-04T13:00:00Z"); // 00:00 LHDT
    assert_eq!(
        next_local_time(now, LORD_HOWE, 1, 45),
        at("2026-04-04T14:45:00Z")
    );
}

#[test]
fn rfc3339_deadlines_and_errors() {
    let now = at("2026-03-04T12:00:00Z");
    assert_eq!(
        parse_deadline("2026-03-05T07:00:00+08:00", now, TAIPEI).unwrap(),
        at("2026-03-04T23:00:00Z")
    );
    let past = parse_deadline("2026-03-04T07:00:00Z", now, TAIPEI).unwrap_err();
    assert!(matches!(past, ScheduleError::DeadlinePast { .. }), "{past}");
    for bad in ["7am", "25:00", "07:60", "0700", "tomorrow", "", "07:00:00"] {
        let err = parse_deadline(bad, now, TAIPEI).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains("HH:MM") && text.contains("RFC 3339"),
            "{bad}: {text}"
        );
    }
}

// --- zone -------------------------------------------------------------------------------------

#[test]
fn zone_resolution_order() {
    let empty = tempfile::tempdir().unwrap();
    let etc = empty.path();
    // flag/config first, even with $TZ set.
    assert_eq!(
        resolve_zone_in(Some("Asia/Taipei"), Some("Europe/Rome"), etc, false).unwrap(),
        (TAIPEI, ZoneSource::Flag)
    );
    // an explicit bad zone is an error naming it.
    let err = resolve_zone_in(Some("Mars/Olympus"), None, etc, false).unwrap_err();
    assert!(err.to_string().contains("Mars/Olympus"), "{err}");
    // $TZ, plain and glibc ":Area/City".
    assert_eq!(
        resolve_zone_in(None, Some("Europe/Rome"), etc, false).unwrap(),
        (chrono_tz::Europe::Rome, ZoneSource::Env)
    );
    assert_eq!(
        resolve_zone_in(None, Some(":America/Santiago"), etc, false).unwrap(),
        (SANTIAGO, ZoneSource::Env)
    );
    // nothing at all: UTC with a warning.
    let (tz, source) = resolve_zone_in(None, Some("CST-8"), etc, false).unwrap();
    assert_eq!((tz, &source), (Tz::UTC, &ZoneSource::UtcFallback));
    assert!(source.warning().unwrap().contains("using UTC"));
    assert_eq!(ZoneSource::Env.warning(), None);
}

#[test]
fn zone_from_system_files() {
    let dir = tempfile::tempdir().unwrap();
    let etc = dir.path();
    std::os::unix::fs::symlink(
        "/usr/share/zoneinfo/Australia/Lord_Howe",
        etc.join("localtime"),
    )
    .unwrap();
    let (tz, source) = resolve_zone_in(None, None, etc, false).unwrap();
    assert_eq!(tz, LORD_HOWE);
    assert!(
        matches!(&source, ZoneSource::System { how } if how.contains("Lord_Howe")),
        "{source:?}"
    );
    // /etc/timezone wins over the symlink (Debian keeps both).
    std::fs::write(etc.join("timezone"), "Pacific/Chatham\n").unwrap();
    assert_eq!(
        resolve_zone_in(None, None, etc, false).unwrap().0,
        chrono_tz::Pacific::Chatham
    );
}

// --- cron -------------------------------------------------------------------------------------

fn fires(expr: &str, tz: Tz, from: &str, n: usize) -> Vec<DateTime<Utc>> {
    let cron = CronSchedule::parse(expr).unwrap();
    let mut t = at(from);
    (0..n)
        .map(|_| {
            t = cron.next_after(t, tz).unwrap();
            t
        })
        .collect()
}

#[test]
fn cron_accepts_five_and_six_fields() {
    assert_eq!(
        fires("0 7 * * *", TAIPEI, "2026-03-04T12:00:00Z", 1),
        vec![at("2026-03-04T23:00:00Z")]
    );
    assert_eq!(
        fires("30 0 7 * * *", TAIPEI, "2026-03-04T12:00:00Z", 1),
        vec![at("2026-03-04T23:00:30Z")]
    );
    assert_eq!(
        fires("@daily", Tz::UTC, "2026-03-04T12:00:00Z", 1),
        vec![at("2026-03-05T00:00:00Z")]
    );
    for bad in ["", "0 7 * *", "61 7 * * *", "0 7 * * * * * *", "every day"] {
        let err = CronSchedule::parse(bad).unwrap_err();
        assert!(matches!(err, ScheduleError::BadCron { .. }), "{bad}: {err}");
    }
    // An out-of-range or misspelt value names its field and the values it allows.
    for (bad, field, allowed) in [
        ("61 7 * * *", "the minute field `61`", "0–59"),
        ("0 25 * * *", "the hour field `25`", "0–23"),
        ("0 7 32 * *", "the day-of-month field `32`", "1–31"),
        ("0 7 * 13 *", "the month field `13`", "JAN–DEC"),
        (
            "0 7 * * MON-FOO",
            "the day-of-week field `MON-FOO`",
            "SUN–SAT",
        ),
        ("75 0 7 * * *", "the second field `75`", "0–59"),
        ("0 7 * JANUAR *", "the month field `JANUAR`", "1–12"),
    ] {
        let err = CronSchedule::parse(bad).unwrap_err().to_string();
        assert!(err.contains(field) && err.contains(allowed), "{bad}: {err}");
    }
}

#[test]
fn cron_fires_once_across_new_york_spring_forward() {
    // 02:30 does not exist on Sun 2026-03-08: the job still runs that day, once.
    let got = fires("30 2 * * *", NY, "2026-03-07T00:00:00Z", 3);
    assert_eq!(got[0], at("2026-03-07T07:30:00Z")); // Sat 02:30 EST
    assert_eq!(got[1], at("2026-03-08T07:00:00Z")); // Sun 03:00 EDT, the end of the gap
    assert_eq!(got[2], at("2026-03-09T06:30:00Z")); // Mon 02:30 EDT
    // A night job at 07:00 is simply an hour earlier in UTC.
    assert_eq!(
        fires("0 7 * * *", NY, "2026-03-07T00:00:00Z", 2),
        vec![at("2026-03-07T12:00:00Z"), at("2026-03-08T11:00:00Z")]
    );
}

#[test]
fn cron_fires_once_across_new_york_fall_back() {
    // 01:30 happens twice on Sun 2026-11-01: one fire, on the first pass (EDT).
    let got = fires("30 1 * * *", NY, "2026-10-31T00:00:00Z", 3);
    assert_eq!(
        got,
        vec![
            at("2026-10-31T05:30:00Z"),
            at("2026-11-01T05:30:00Z"),
            at("2026-11-02T06:30:00Z")
        ]
    );
}

#[test]
fn cron_across_santiago_midnight_gap() {
    // Midnight does not exist on 2026-09-06 in Santiago; a midnight job runs once that day.
    let got = fires("0 0 * * *", SANTIAGO, "2026-09-04T12:00:00Z", 3);
    assert_eq!(got[0], at("2026-09-05T04:00:00Z")); // Sat 00:00 -04
    assert_eq!(got[1], at("2026-09-06T04:00:00Z")); // Sun 01:00 -03, the end of the gap
    assert_eq!(got[2], at("2026-09-07T03:00:00Z")); // Mon 00:00 -03
}

#[test]
fn cron_across_lord_howe_half_hour_shift() {
    // 2026-10-04 02:00 → 02:30: a 02:15 job runs once that day; on 2026-04-05 01:45 repeats.
    let got = fires("15 2 * * *", LORD_HOWE, "2026-10-02T00:00:00Z", 3);
    assert_eq!(got[0], at("2026-10-02T15:45:00Z")); // Sat 02:15 +10:30
    assert_eq!(got[1], at("2026-10-03T15:30:00Z")); // Sun 02:30 +11, the end of the gap
    assert_eq!(got[2], at("2026-10-04T15:15:00Z")); // Mon 02:15 +11
    let got = fires("45 1 * * *", LORD_HOWE, "2026-04-03T12:00:00Z", 3);
    assert_eq!(
        got,
        vec![
            at("2026-04-03T14:45:00Z"),
            at("2026-04-04T14:45:00Z"),
            at("2026-04-05T15:15:00Z")
        ]
    );
}

#[test]
fn crontab_line_names_the_zone() {
    let text = print_crontab(
        "0 22 * * 1-5",
        Path::new("/usr/local/bin/nightshift"),
        Path::new("/srv/my repo"),
        TAIPEI,
        None,
    )
    .unwrap();
    assert!(text.contains("\nCRON_TZ=Asia/Taipei\n"), "{text}");
    assert!(
        text.contains("0 22 * * 1-5 cd '/srv/my repo' && TZ=Asia/Taipei '/usr/local/bin/nightshift' --repo '/srv/my repo' drain >> '/srv/my repo/.nightshift/cron.log' 2>&1"),
        "{text}"
    );
    assert!(
        print_crontab(
            "0 0 22 * * *",
            Path::new("/b"),
            Path::new("/r"),
            TAIPEI,
            None
        )
        .unwrap()
        .contains("\n0 22 * * * ")
    );
    let err = print_crontab(
        "30 0 22 * * *",
        Path::new("/b"),
        Path::new("/r"),
        TAIPEI,
        None,
    )
    .unwrap_err();
    assert!(matches!(err, ScheduleError::Untranslatable { .. }), "{err}");
    // croner's Quartz extensions fire under `schedule`, but no cron daemon reads them.
    for quartz in [
        "0 7 L * *",
        "0 7 * * 5#3",
        "0 7 ? * MON",
        "0 7 15W * *",
        "0 7 * * 5L",
    ] {
        let err =
            print_crontab(quartz, Path::new("/b"), Path::new("/r"), TAIPEI, None).unwrap_err();
        assert!(
            matches!(err, ScheduleError::Untranslatable { .. })
                && err.to_string().contains("L, W, # or ?"),
            "{quartz}: {err}"
        );
    }
    // Names that hold those letters are plain crontab.
    assert!(
        print_crontab(
            "0 7 * JUL WED",
            Path::new("/b"),
            Path::new("/r"),
            TAIPEI,
            None
        )
        .is_ok()
    );
    // cron's own PATH is minimal: the job carries the one `schedule` ran with.
    let with_path = print_crontab(
        "0 22 * * *",
        Path::new("/b"),
        Path::new("/r"),
        TAIPEI,
        Some("/root/.npm/bin:/usr/bin:/bin"),
    )
    .unwrap();
    assert!(
        with_path.contains(
            "cd '/r' && PATH='/root/.npm/bin:/usr/bin:/bin' TZ=Asia/Taipei '/b' --repo '/r' drain"
        ),
        "{with_path}"
    );
    let pct = print_crontab(
        "0 22 * * *",
        Path::new("/b"),
        Path::new("/r/100%"),
        TAIPEI,
        None,
    )
    .unwrap();
    assert!(pct.contains(r"'/r/100\%'"), "{pct}");
}

#[test]
fn systemd_units_translate_the_expression() {
    let bin = Path::new("/usr/local/bin/nightshift");
    let repo = Path::new("/srv/repo");
    let cases = [
        ("0 22 * * *", "*-*-* 22:00:00 Asia/Taipei"),
        (
            "30 1 * * 1-5",
            "Mon,Tue,Wed,Thu,Fri *-*-* 01:30:00 Asia/Taipei",
        ),
        (
            "*/15 22-23 * * SUN,sat",
            "Sat,Sun *-*-* 22,23:00,15,30,45:00 Asia/Taipei",
        ),
        ("0 3 1,15 * *", "*-*-01,15 03:00:00 Asia/Taipei"),
        ("10 0 4 * * 0", "Sun *-*-* 04:00:10 Asia/Taipei"),
        ("0 2 * JAN-MAR 7", "Sun *-01,02,03-* 02:00:00 Asia/Taipei"),
    ];
    for (expr, want) in cases {
        let units = print_systemd(expr, bin, repo, TAIPEI, None).unwrap();
        assert_eq!(units.on_calendar, want, "{expr}");
        assert!(
            units.timer.contains(&format!("OnCalendar={want}\n")),
            "{}",
            units.timer
        );
    }
    let units = print_systemd("0 22 * * *", bin, repo, TAIPEI, None).unwrap();
    assert!(
        units
            .service
            .contains("ExecStart=\"/usr/local/bin/nightshift\" --repo \"/srv/repo\" drain\n"),
        "{}",
        units.service
    );
    let with_path = print_systemd(
        "0 22 * * *",
        bin,
        repo,
        TAIPEI,
        Some("/opt/node 20/bin:/usr/bin"),
    )
    .unwrap();
    assert!(
        with_path.service.contains(
            "Environment=TZ=Asia/Taipei\nEnvironment=\"PATH=/opt/node 20/bin:/usr/bin\"\nExecStart="
        ),
        "{}",
        with_path.service
    );
    let odd = print_systemd(
        "0 22 * * *",
        bin,
        Path::new("/srv/a$b \"c\" 5%"),
        TAIPEI,
        None,
    )
    .unwrap();
    assert!(
        odd.service
            .contains(r#"--repo "/srv/a$$b \"c\" 5%%" drain"#),
        "{}",
        odd.service
    );
    assert!(
        odd.service
            .contains("WorkingDirectory=/srv/a$b \"c\" 5%%\n"),
        "{}",
        odd.service
    );
    assert!(
        units.service.contains("Environment=TZ=Asia/Taipei\n")
            && units.service.contains("Type=oneshot\n")
    );
    assert!(
        units.timer.contains("Unit=nightshift-drain.service\n")
            && units.timer.contains("WantedBy=timers.target\n")
    );
    for bad in ["0 22 1 * MON", "0 22 L * *", "0 22 * * 5#2", "0 22 15W * *"] {
        let err = print_systemd(bad, bin, repo, TAIPEI, None).unwrap_err();
        assert!(
            matches!(
                err,
                ScheduleError::Untranslatable { .. } | ScheduleError::BadCron { .. }
            ),
            "{bad}: {err}"
        );
    }
}

#[test]
fn systemd_agrees_on_the_next_fire_time() {
    // Cross-check with systemd's own calendar parser when it is installed.
    let Ok(probe) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze not installed: cross-check skipped");
        return;
    };
    assert!(probe.status.success());
    for (expr, tz) in [
        ("0 22 * * *", TAIPEI),
        ("30 1 * * 1-5", NY),
        ("*/15 22-23 * * SUN,sat", SANTIAGO),
        ("0 3 1,15 * *", LORD_HOWE),
    ] {
        let units = print_systemd(expr, Path::new("/b"), Path::new("/r"), tz, None).unwrap();
        let out = std::process::Command::new("systemd-analyze")
            .args(["calendar", &units.on_calendar])
            .env("TZ", "UTC")
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success(),
            "{}: {}",
            units.on_calendar,
            String::from_utf8_lossy(&out.stderr)
        );
        let next = stdout
            .lines()
            .find_map(|l| l.trim().strip_prefix("Next elapse:"))
            .unwrap()
            .trim();
        // "Thu 2026-12-03 23:00:00 UTC"
        let next = chrono::NaiveDateTime::parse_from_str(&next[4..23], "%Y-%m-%d %H:%M:%S")
            .unwrap()
            .and_utc();
        let ours = CronSchedule::parse(expr)
            .unwrap()
            .next_after(Utc::now(), tz)
            .unwrap();
        assert_eq!(
            ours, next,
            "{expr} in {tz}: systemd says {next}, croner {ours}"
        );
    }
}

// --- sliced sleep -----------------------------------------------------------------------------

/// `sleep_until` on the test clock in slices of 30 s, not cancelled.
async fn sleep_in_slices_of_30_s(clock: &TestClock, until: DateTime<Utc>) -> SleepOutcome {
    sleep_until(
        clock,
        until,
        &CancellationToken::new(),
        Duration::from_secs(30),
    )
    .await
}

#[tokio::test]
async fn sliced_sleep_reaches_the_deadline_in_slices() {
    let clock = TestClock::new(at("2026-03-04T12:00:00Z"));
    let until = at("2026-03-04T12:01:40Z");
    let out = sleep_in_slices_of_30_s(&clock, until).await;
    assert_eq!(out, SleepOutcome::Reached);
    assert_eq!(clock.now(), until);
    let secs: Vec<u64> = clock.sleeps().iter().map(Duration::as_secs).collect();
    assert_eq!(secs, vec![30, 30, 30, 10]);
}

#[tokio::test]
async fn sliced_sleep_wakes_at_once_after_a_suspend() {
    let clock = TestClock::new(at("2026-03-04T12:00:00Z"));
    // The machine sleeps through most of the night during the second slice.
    clock.jump_on_sleep(2, Duration::from_secs(6 * 3600));
    let until = at("2026-03-04T18:00:00Z");
    let out = sleep_in_slices_of_30_s(&clock, until).await;
    assert_eq!(out, SleepOutcome::Reached);
    assert_eq!(
        clock.sleeps().len(),
        2,
        "no slice after the wall clock passed the deadline"
    );
    // Woken by the end of the suspended slice: 12:00 + 30 s + 30 s + 6 h.
    assert_eq!(clock.now(), at("2026-03-04T18:01:00Z"));
}

#[tokio::test]
async fn sliced_sleep_is_cancellable() {
    let cancel = CancellationToken::new();
    let trigger = cancel.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        trigger.cancel();
    });
    let started = Instant::now();
    let out = sleep_until(
        &SystemClock,
        Utc::now() + chrono::TimeDelta::hours(1),
        &cancel,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!(out, SleepOutcome::Cancelled);
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    // Already cancelled: no sleep at all.
    let clock = TestClock::new(at("2026-03-04T12:00:00Z"));
    let out = sleep_until(
        &clock,
        at("2026-03-04T13:00:00Z"),
        &cancel,
        Duration::from_secs(30),
    )
    .await;
    assert_eq!((out, clock.sleeps().len()), (SleepOutcome::Cancelled, 0));
}

#[tokio::test]
async fn sliced_sleep_with_the_real_clock_ends_on_time() {
    let started = Instant::now();
    let until = Utc::now() + chrono::TimeDelta::milliseconds(120);
    let out = sleep_until(
        &SystemClock,
        until,
        &CancellationToken::new(),
        Duration::from_millis(50),
    )
    .await;
    assert_eq!(out, SleepOutcome::Reached);
    assert!(Utc::now() >= until);
    assert!(started.elapsed() < Duration::from_secs(2));
}
