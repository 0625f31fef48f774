//! The text patterns: phrases that state a usage limit or throttling (the triggers), and the
//! flags that change a trigger's kind (a per-minute or per-day window, a Google per-day quota
//! id, a window word beside "rate limit"). Not the waits ([`super::wait`]) nor the reset times
//! ([`super::reset`]).

use std::sync::LazyLock;

use regex::Regex;

/// Curly quotes to straight, non-breaking spaces to spaces, ANSI escapes removed.
pub(super) fn normalize(text: &str) -> String {
    static ANSI: LazyLock<Regex> =
        LazyLock::new(|| Regex::new(r"\x1b\[[0-9;?]*[ -/]*[@-~]").unwrap());
    let text = ANSI.replace_all(text, "");
    text.chars()
        .map(|c| match c {
            '\u{2019}' | '\u{2018}' | '\u{02bc}' => '\'',
            '\u{00a0}' | '\u{202f}' => ' ',
            '\u{2212}' => '-',
            c => c,
        })
        .collect()
}

/// A phrase that states a limit: `name` labels the reading's `source`, `re` matches the phrase
/// (case-insensitive).
pub(super) struct Trigger {
    pub(super) name: &'static str,
    pub(super) re: Regex,
}

fn trigger(name: &'static str, pattern: &str) -> Trigger {
    Trigger {
        name,
        re: Regex::new(&format!("(?i){pattern}")).expect("trigger pattern"),
    }
}

/// An error-type identifier as it appears in a JSON or Python error body (`"usage_limit_reached"`,
/// `'insufficient_quota'`, `\"RESOURCE_EXHAUSTED\"`): quoted, so that a test or function named
/// `usage_limit_reached_resets` in a log is not read as the error.
fn quoted(ident: &str) -> String {
    format!(r#"['"]{ident}['"\\]"#)
}

/// Usage-trigger names whose kind depends on what else the message says (Google and OpenAI
/// quota bodies): a per-minute window, or a short stated retry without a per-day quota, makes
/// them transient.
pub(super) const SOFT_QUOTA: [&str; 3] =
    ["quota metric", "quota exceeded", "exceeded current quota"];

/// Phrases that state an account usage limit. Order matters only for the source label.
pub(super) static USAGE_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        // Claude's legacy form, also with words before the pipe ("Claude AI usage limit reached
        // and won't reset|1766502000").
        trigger(
            "claude usage limit |epoch",
            r"claude ai usage limit reached\b[^|\n]{0,40}\|",
        ),
        trigger("claude usage limit", r"claude (?:ai )?usage limit reached"),
        // "5-hour limit reached", "5 hour limit reached", "Session limit reached", "Opus weekly
        // limit reached": any window of hours, written with or without a hyphen.
        trigger(
            "claude limit reached",
            r"\b(?:(?:\d+[- ]?hours?|five[- ]hours?|weekly|session|daily|opus|sonnet)\s+){1,2}limit reached",
        ),
        // claude's bare banner: "Limit reached · resets 3pm (UTC)", also with `•` or `∙`, a
        // date or a 24-hour time: "limit reached", a separator, then its reset.
        trigger(
            "claude limit reached, resets",
            r"\blimit reached\s*[·•∙|\-–—]\s*resets?\b",
        ),
        // claude: "You've hit your {limit|session limit|weekly limit|Opus limit|Sonnet limit|
        // usage limit}"; codex: "You've hit your usage limit[ for <model>]".
        trigger(
            "you've hit your limit",
            r"you(?:'ve| have) hit your\b[^.·∙\n]{0,40}?\blimit\b",
        ),
        // The Codex app: "You have reached the usage limit. Upgrade or add credits …".
        trigger(
            "you've reached the usage limit",
            r"\byou(?:'ve| have) reached (?:the|your)\b[^.·∙\n]{0,30}?\busage limits?\b",
        ),
        // A limit with a window, whatever it is called: Copilot's "You've reached your weekly
        // rate limit", "Sorry, you've exceeded your 5 hour session limits".
        trigger(
            "limit with a window",
            r"\byou(?:'ve| have) (?:hit|reached|exceeded) your\b[^.·∙\n]{0,30}?\b(?:weekly|daily|monthly|session|hourly|\d+[- ]?hours?)\b[^.·∙\n]{0,20}?\blimits?\b",
        ),
        // claude with extra usage on: "You're out of extra usage · resets 9pm".
        trigger(
            "out of extra usage",
            r"\byou(?:'re| are) out of extra usage\b",
        ),
        // codex, a workspace owner's credits: "Your workspace is out of credits."
        trigger(
            "workspace out of credits",
            r"\byour workspace is out of credits\b",
        ),
        trigger(
            "usage limit reached",
            r"\busage limit (?:has been )?(?:reached|exceeded)",
        ),
        trigger(
            "codex 429 usage_limit_reached",
            &quoted("usage_limit_reached"),
        ),
        // Gemini: "You have reached your daily gemini-2.5-pro quota limit.", and its terminal
        // quota error "You have exhausted your daily quota on this model.".
        trigger(
            "daily quota",
            r"\byou(?:'ve| have) (?:reached|exhausted|used up) your daily\b[^\n]{0,60}?\bquota\b",
        ),
        // Gemini / Antigravity: "Individual quota reached. Resets in 157h".
        trigger(
            "quota reached",
            r"\b(?:individual |daily |weekly |monthly )?quota (?:limit )?(?:is |has been )?reached\b",
        ),
        trigger("quota metric", r"quota exceeded for quota metric"),
        // codex's `CodexErr::QuotaExceeded` text; a bare "quota exceeded" is too common
        // (EDQUOT "Disk quota exceeded").
        trigger(
            "quota exceeded",
            &format!(
                r"\bquota exceeded\.\s+check your plan|{}",
                quoted("quota_?exceeded")
            ),
        ),
        trigger(
            "exceeded current quota",
            &format!(
                r"you exceeded your current quota|{}",
                quoted("insufficient_quota")
            ),
        ),
        trigger(
            "usage not included",
            &format!(
                r"to use codex with your chatgpt plan, upgrade|{}",
                quoted("usage_?not_?included")
            ),
        ),
        trigger(
            "gemini plan limits",
            r"to increase your limits, upgrade to a plan with higher limits",
        ),
        // A dumped 429 response of the subscription API (claude's own reading of it).
        trigger(
            "anthropic unified status rejected",
            r"\banthropic-ratelimit-unified-status\W{1,4}rejected\b",
        ),
    ]
});

/// Phrases that say the account cannot run at all: its credit or billing is exhausted
/// (docs/limits.md#no-credit). Read as no credit unless the message states a reset or a wait
/// (then it is a usage limit that lifts then, see `super::text`).
pub(super) static NO_CREDIT_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        // Anthropic's API and claude with an API key: "Credit balance is too low", "Your credit
        // balance is too low to access the Anthropic API."
        trigger("credit balance too low", r"\bcredit balance is too low\b"),
        // OpenAI's billing error: its type, its text, and codex's `CodexErr::QuotaExceeded`. Not
        // Google's same words, which come with its quota ids (see `GOOGLE_QUOTA`).
        trigger(
            "insufficient_quota",
            &format!(
                r"{}|\byou exceeded your current quota,\s+please\s+check your plan and billing details\b|\bquota exceeded\.\s+check your plan and billing details\b",
                quoted("insufficient_quota")
            ),
        ),
        // Credits used up: codex's "Your workspace is out of credits", OpenRouter's "This request
        // requires more credits, … can only afford 1000", "Insufficient credits".
        trigger(
            "out of credits",
            r"\b(?:you(?:'re| are)|your (?:workspace|account|organi[sz]ation|team|balance) is) out of credits?\b|\binsufficient (?:credits?|balance|funds)\b|\bnot enough credits?\b|\brequires more credits\b|\bcan only afford\b",
        ),
        // HTTP 402 and its names; OpenAI's "Billing hard limit has been reached".
        trigger(
            "payment required",
            &format!(
                r"\bpayment required\b|{}|\bbilling hard limit\b|{}",
                quoted("payment_required"),
                quoted("billing_hard_limit_reached")
            ),
        ),
    ]
});

/// Google's quota errors say "You exceeded your current quota, please check your plan and
/// billing details" too, of a per-minute or per-day quota: its status, quota ids and docs mark
/// them, and they are read as throttling or a usage limit, not as no credit.
pub(super) static GOOGLE_QUOTA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)resource_exhausted|googleapis|ai\.google\.dev|generativelanguage|quota_?(?:id|metric|limit|value)|retry_?delay|\bgemini\b|vertex").unwrap()
});

/// Phrases that state throttling that clears in seconds or minutes. The first entry negates a
/// usage limit ("not your usage limit") and must stay first.
pub(super) static TRANSIENT_TRIGGERS: LazyLock<Vec<Trigger>> = LazyLock::new(|| {
    vec![
        trigger(
            "not your usage limit",
            r"not your usage limit|server is temporarily limiting requests",
        ),
        // "529 Overloaded", "Repeated 529 Overloaded errors", "(529 {…overloaded_error…})", the
        // API's `overloaded_error`; not a compiler's "call of overloaded".
        trigger(
            "overloaded",
            &format!(
                r#"\b(?:repeated\s+)?529\b[^\n]{{0,20}}?\boverloaded\b|^\(?529\s*(?:\{{|\)|:)|{}|"message":\s*"overloaded\b|\b(?:api|server|model|service)\s+(?:is\s+)?(?:currently\s+)?overloaded\b|^overloaded\b"#,
                quoted("overloaded_error")
            ),
        ),
        trigger(
            "http 429",
            r#"^\(?429\s*(?:\{|\)|:|too many|rate limit)|(?:\bstatus(?: code)?[:\s]+|\berror(?: code)?:?\s+|\bapi error:?\s*\(|\bhttp\s+|\b(?:request\s+)?rejected\s+\(|\breturned\s+|"code":\s*)429\b|\b429 too many requests\b"#,
        ),
        // The API's error type, quoted in a JSON body or bare as an error's label
        // (`rate_limit_error: …`); JSON codes of routers and providers: `"rate_limited"`,
        // `"server_is_overloaded"`. Not a test named `rate_limit_error_is_transient`.
        trigger(
            "rate_limit_error",
            &format!(
                r"{}|\bratelimiterror\s*:|{}|\brate_limit_error\b|{}|{}",
                quoted("rate_limit_error"),
                quoted("rate_limit_exceeded"),
                quoted("rate_?limited"),
                quoted("server_is_overloaded"),
            ),
        ),
        // "Too many requests" in any case, with or without its status: throttling.
        trigger("too many requests", r"\btoo many requests\b"),
        // A router or proxy passing on its provider's 429: "Upstream error from OpenAI: 429",
        // "upstream returned 429", "429 from upstream".
        trigger(
            "upstream 429",
            r"\bupstream\b[^\n]{0,60}?\b429\b|\b429\b[^\n]{0,40}?\bupstream\b",
        ),
        // Asked to wait a number of seconds or minutes, in any of several languages ("Bitte
        // warten Sie 70 Sekunden", "Veuillez patienter 70 secondes", "请等待70秒", "70秒後に再試行
        // してください"); the wait itself is read by `super::wait`.
        trigger("asked to wait", &super::wait::asked_to_wait_pattern()),
        // "Try again in less than a minute": nothing but a limit words a retry so; a minute.
        trigger(
            "less than a minute",
            r"\btry again in (?:less than|under) (?:a|one) minute\b",
        ),
        trigger(
            "rate limit reached for",
            r"\brate limit (?:is |has been |was )?(?:reached|exceeded) for\b",
        ),
        // "Rate limit exceeded. Please try again in 20s.", codex on Azure: "Rate limit is
        // exceeded. Try again in 11 seconds."
        // "Rate limit exceeded. Please try again later", "Provider rate limit reached. Please
        // retry shortly."
        trigger(
            "rate limit exceeded",
            r"^\W*rate limit (?:is |has been )?exceeded\b|\brate limit (?:is |has been |was )?(?:reached|exceeded)(?:\s*[.!;]\s*(?:please\s+)?|\W+please\s+)(?:try again|retry)\b",
        ),
        // GitHub Copilot: "Sorry, your request was rate-limited. Please wait 17 seconds …",
        // "Sorry, you've hit a rate limit that restricts …", "You've hit your global rate limit.";
        // a long stated wait makes them a usage limit (see `scan_line`).
        trigger(
            "copilot rate limited",
            r"\bsorry, (?:your request was (?:rate|speed)[- ]limited|you(?:'ve| have) (?:been rate[- ]limited|hit a rate limit))|\byou(?:'ve| have) hit your (?:\w+ )?rate limit\b",
        ),
        // aider: "The API provider has rate limited you."; claude: "… (429) · Rate limited."
        trigger(
            "rate limited",
            r"\b(?:the\s+)?(?:api\s+)?(?:provider|server|service)\s+has\s+rate[- ]limited\s+you\b|^\W*rate[- ]limited\b",
        ),
        trigger(
            "per-minute limit",
            r"\b(?:tokens|requests|input tokens|output tokens) per min(?:ute)?\b",
        ),
        trigger(
            "gemini capacity",
            r"you have exhausted your capacity on this model",
        ),
        trigger(
            "quota reset after",
            r"\byour quota will reset (?:after|in)\b",
        ),
        // Google's status alone, or its text ("Resource has been exhausted (e.g. check quota).",
        // Vertex's "Resource exhausted. Please try again later."): shared capacity, retried
        // shortly; a per-day quota makes it a usage limit.
        trigger(
            "resource exhausted",
            &format!(
                r"{}|\bresource_exhausted:|\bresource (?:has been )?exhausted(?: \(e\.g\. check quota\)|\. please try again later\b)",
                quoted("resource_exhausted")
            ),
        ),
        // Codex after its provider's 5xx retries: "We’re currently experiencing
        // high demand, which may cause temporary errors."
        trigger(
            "high demand",
            r"\bexperiencing (?:high|heavy|unusually high) demand\b",
        ),
        // No trigger for a bare "Retrying in 5s": network errors print it too, and they are
        // failures, not limits; the wait is read only once another trigger matched.
    ]
});

/// Flags a per-minute quota (so `RESOURCE_EXHAUSTED` / `Quota exceeded` is transient).
pub(super) static PER_MINUTE: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bper[- ]?min(?:ute)?\b|perminute|\(tpm\)|\(rpm\)|limit_[rt]pm\b").unwrap()
});

/// Flags a per-day quota (Gemini's `…PerDay…` quota ids, Groq's "tokens per day (TPD)",
/// OpenRouter's `free-models-per-day`).
pub(super) static PER_DAY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bper[- ]?day\b|perday|\(tpd\)|\(rpd\)|limit_[rt]pd\b").unwrap()
});

/// A Google quota id or limit that is per day (`"quotaId": "GenerateRequestsPerDayPerProject…"`,
/// `"quota_limit": "Gemini25ProRequestsPerDay"`). Gemini CLI's own rule (`classifyGoogleError`):
/// such a violation is terminal whatever else the body says (a per-minute violation beside it,
/// a `retryDelay` of seconds): it lasts until the day's reset.
pub(super) static GOOGLE_DAILY_QUOTA: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\bquota_?(?:id|limit)\W{1,12}[\w-]*(?:per_?day|daily)").unwrap()
});

/// A context-window, prompt-length or output-length limit: claude's "Context limit reached",
/// the API's "prompt is too long: 216327 tokens > 200000 maximum" and "input length and
/// `max_tokens` exceed context limit", codex's "ran out of room in the model's context window",
/// "max_tokens: 128001 > 64000, which is the maximum allowed number of output tokens". The
/// request is too big for the model, not the account out of usage: waiting does not help, so the
/// round fails with this reason (docs/limits.md). A usage trigger whose own words name one of
/// these ("You've hit your context limit") is not a usage limit.
pub(super) static CONTEXT_WINDOW: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r"(?i)\bcontext[ _](?:window|length|limit|size)\b|\bcontext_length_exceeded\b|\bprompt (?:is )?too long\b|\bmaximum (?:context|prompt) length\b|\binput length and `?max_tokens`? exceed\b|\bmaximum allowed number of output tokens\b|\boutput token maximum\b|\binput token count\b[^.\n]{0,40}\bexceeds the maximum number of tokens\b",
    )
    .unwrap()
});

/// Names a window ("weekly", "5 hour", "session"): a rate limit with a window is the account's
/// limit, not throttling.
pub(super) static WINDOW_WORD: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"(?i)\b(?:weekly|daily|monthly|session|hourly|\d+[- ]?hours?|five[- ]hours?)\b")
        .unwrap()
});
