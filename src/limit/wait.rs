//! Waits a message states: `try again in 2h 4m`, `Your quota will reset after 12h22m45s`,
//! `Please wait 17 seconds`, `"retryDelay": "34.07s"`, `Retry-After: 20`, and the agent's own
//! `Retrying in 26 seconds…` (told apart: it is not the account's reset).

use std::sync::LazyLock;
use std::time::Duration;

use regex::Regex;

const DURATION: &str = r"(?:\d+(?:\.\d+)?\s*(?:milliseconds?|ms|days?|d|hours?|hrs?|hr|h|minutes?|mins?|min|m|seconds?|secs?|sec|s)\b[\s,]*(?:and\s+)?)+";

/// "try again in 2h 4m", "Your quota will reset after 12h22m45s", "resets in about 2 hours",
/// "Please wait 17 seconds before trying again" (Copilot), "Retrying in 4 seconds" (the `kw`
/// group tells the agent's own retry from a stated wait).
static RETRY_DURATION: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(&format!(
        r"(?i)\b(?:(?P<kw>try again|retrying|retry|resets?|wait)\s+(?:in|after)|wait(?:\s+for)?)\s+(?:about\s+|approximately\s+|roughly\s+|~\s*)?(?P<d>{DURATION})"
    ))
    .unwrap()
});

/// Words that ask to wait (or to retry after a wait), in several languages: English, German,
/// French, Spanish, Portuguese, Italian, Dutch, Polish, Czech, Russian, Turkish, Chinese,
/// Japanese, Korean.
const WAIT_VERBS: &str = r"(?:\b(?:please wait|wait(?:\s+for)?|warten\s+sie|bitte\s+warten|warte|attendez|attendre|patientez|patienter|espere|esperar|espera|aguarde|aguardar|attendi|attendere|aspetta|aspettare|wacht|wachten|poczekaj|odczekaj|počkejte|počkat|подождите|подожди|ждите|подождать|bekleyin|bekle)\b|请等待|請等待|请稍候|請稍候|等待|稍等|お待ちください|待って|기다려)";

/// Time units of those languages: seconds or minutes, written out (never a bare `s` or `m`).
const WAIT_UNITS: &str = r"(?:seconds?|secs?|minutes?|mins?|sekunden|sekunde|sek|minuten|secondes?|segundos?|minutos?|secondi|minuti|seconden|sekund[ya]?|minut[ya]?|секунд[аы]?|сек|минут[аы]?|мин|saniye|dakika|秒钟|秒鐘|秒|分钟|分鐘|分|초|분)";

/// Words after a number and its unit that make it a wait ("70秒後に再試行", "70 秒后重试",
/// "70초 후에", "70 Sekunden warten", "70 saniye sonra").
const AFTER_UNIT: &str =
    r"(?:後に|后重试|後重試|后再试|後再試|お待ち|후에|후\s*다시|sonra|warten|abwarten|später)";

/// The regex of a wait asked for in words: a wait verb then (within a few words) a number and
/// a unit, or a number and a unit then a word that makes it a wait. Shared by the "asked to
/// wait" trigger (`super::patterns`) and [`stated_wait`].
pub(super) fn asked_to_wait_pattern() -> String {
    format!(
        r"{WAIT_VERBS}[^\d\n.!?]{{0,24}}?(?P<n>\d+(?:[.,]\d+)?)\s*(?P<u>{WAIT_UNITS})(?:\b|[^\p{{L}}]|$)|(?P<n2>\d+(?:[.,]\d+)?)\s*(?P<u2>{WAIT_UNITS})\s*[^\d\n.!?]{{0,6}}?{AFTER_UNIT}"
    )
}

static ASKED_TO_WAIT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(&format!("(?i){}", asked_to_wait_pattern())).unwrap());

/// "Try again in less than a minute", "resets in under a minute", "retry in a minute": a
/// minute.
static ABOUT_A_MINUTE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:try again|retry|resets?|wait)\s+(?:in|after)\s+(?:less than|under|about|around)?\s*(?:a|one|1)\s+minute\b").unwrap()
});

/// A wait asked for in words of any language of [`WAIT_VERBS`], or "less than a minute".
fn worded_wait(text: &str) -> Option<StatedWait> {
    if let Some(c) = ASKED_TO_WAIT.captures(text) {
        let n = c.name("n").or(c.name("n2"))?.as_str().replace(',', ".");
        let unit = c.name("u").or(c.name("u2"))?.as_str().to_lowercase();
        let n: f64 = n.parse().ok()?;
        let minutes = unit.starts_with("mi")
            || unit.starts_with("мин")
            || unit.starts_with('分')
            || unit.starts_with('분')
            || unit == "dakika";
        let secs = if minutes { n * 60.0 } else { n };
        let text = c.get(0)?.as_str().trim().to_string();
        return (secs.is_finite() && secs < 1e9).then(|| StatedWait {
            duration: Duration::from_secs_f64(secs),
            text,
            own_retry: false,
        });
    }
    let m = ABOUT_A_MINUTE.find(text)?;
    Some(StatedWait {
        duration: Duration::from_secs(60),
        text: m.as_str().to_string(),
        own_retry: false,
    })
}

/// A wait stated as a field: Google's `"retryDelay": "34.07s"`, a `Retry-After: 20` header.
static RETRY_FIELD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"(?i)\bretry_?delay\\?"?\s*:\s*\\?"(?P<delay>\d+(?:\.\d+)?)s\b|\bretry[-_]after\\?"?\s*[:=]\s*\\?"?(?P<after>\d+(?:\.\d+)?)\b"#,
    )
    .unwrap()
});

static DURATION_PART: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)(\d+(?:\.\d+)?)\s*(milliseconds?|ms|days?|d|hours?|hrs?|hr|h|minutes?|mins?|min|m|seconds?|secs?|sec|s)\b").unwrap()
});

/// Splits compact durations so their parts have word boundaries: `12h22m45s` → `12h 22m 45s`,
/// `2m12.19s` → `2m 12.19s` (Gemini and Groq print them so).
fn spaced_durations(text: &str) -> String {
    static JOINED: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"(?i)(\d(?:ms|h|m|s|d))(\d)").unwrap());
    let once = JOINED.replace_all(text, "$1 $2");
    JOINED.replace_all(&once, "$1 $2").into_owned()
}

/// A wait a message states, with its text and whether it is the agent's own retry loop
/// ("Retrying in 4 seconds…": claude keeps retrying by itself; not the account's reset).
pub(super) struct StatedWait {
    pub(super) duration: Duration,
    pub(super) text: String,
    pub(super) own_retry: bool,
}

/// The first wait `text` states ("try again in …", "reset after …", "Retrying in …",
/// `retryDelay`, `Retry-After`); `stated_only` skips the agent's own retry loop.
pub(super) fn stated_wait(text: &str, stated_only: bool) -> Option<StatedWait> {
    let spaced = spaced_durations(text);
    let from_words = RETRY_DURATION.captures_iter(&spaced).find_map(|c| {
        let own_retry = c
            .name("kw")
            .is_some_and(|k| k.as_str().eq_ignore_ascii_case("retrying"));
        if stated_only && own_retry {
            return None;
        }
        let d = c["d"].trim().trim_end_matches(',').trim();
        let whole = c.get(0)?.as_str().trim().trim_end_matches(',').trim();
        Some(StatedWait {
            duration: parse_duration(d)?,
            text: whole.to_string(),
            own_retry,
        })
    });
    from_words
        .or_else(|| worded_wait(text))
        .or_else(|| field_wait(text))
}

/// A wait stated as a field (`"retryDelay": "34.07s"`, `Retry-After: 20`).
pub(super) fn field_wait(text: &str) -> Option<StatedWait> {
    let c = RETRY_FIELD.captures(text)?;
    let (secs, text) = match (c.name("delay"), c.name("after")) {
        (Some(d), _) => (d.as_str(), format!("retryDelay {}s", d.as_str())),
        (None, Some(a)) => (a.as_str(), format!("retry-after {}", a.as_str())),
        (None, None) => return None,
    };
    let secs: f64 = secs.parse().ok()?;
    (secs.is_finite() && secs < 1e9).then(|| StatedWait {
        duration: Duration::from_secs_f64(secs),
        text,
        own_retry: false,
    })
}

/// Parses `2 days 17 hours 14 minutes`, `21s`, `2892 seconds`, `9.816s`, `174ms`, `2h 4m`,
/// `12h22m45s`, `2m12.19s`.
fn parse_duration(text: &str) -> Option<Duration> {
    let text = spaced_durations(text);
    let mut total = 0f64;
    let mut any = false;
    for c in DURATION_PART.captures_iter(&text) {
        let n: f64 = c[1].parse().ok()?;
        let unit = c[2].to_ascii_lowercase();
        let secs = match unit.as_str() {
            "ms" | "millisecond" | "milliseconds" => n / 1000.0,
            u if u.starts_with('d') => n * 86_400.0,
            u if u.starts_with('h') => n * 3600.0,
            u if u.starts_with("mi") || u == "m" => n * 60.0,
            _ => n,
        };
        total += secs;
        any = true;
    }
    (any && total.is_finite() && total < 1e9).then(|| Duration::from_secs_f64(total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_every_unit() {
        assert_eq!(
            parse_duration("2 days 17 hours 14 minutes"),
            Some(Duration::from_secs(2 * 86400 + 17 * 3600 + 14 * 60))
        );
        assert_eq!(parse_duration("174ms"), Some(Duration::from_millis(174)));
        assert_eq!(parse_duration("9.816s"), Some(Duration::from_millis(9816)));
        assert_eq!(
            parse_duration("2h 4m"),
            Some(Duration::from_secs(2 * 3600 + 4 * 60))
        );
        assert_eq!(
            parse_duration("2892 seconds"),
            Some(Duration::from_secs(2892))
        );
        assert_eq!(parse_duration("soon"), None);
    }
    #[test]
    fn copilot_waits_are_read_without_in() {
        let w = stated_wait(
            "Please wait 587 hours 33 minutes before trying again.",
            true,
        )
        .unwrap();
        assert_eq!(w.duration, Duration::from_secs(587 * 3600 + 33 * 60));
        assert!(!w.own_retry);
        let w = stated_wait("Retrying in 26 seconds… (attempt 5/10)", false).unwrap();
        assert!(w.own_retry);
        assert!(stated_wait("Please wait and try sending again later.", false).is_none());
    }
}
