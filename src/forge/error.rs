//! What can go wrong talking to GitHub, and how far it reaches.

/// How far a failure reaches, for the caller to decide what to do next.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Only this request, for this item (a 422 for its branch, one PR that
    /// cannot be read): the item is `pr_failed`, the next item may go ahead.
    Item,
    /// Every GitHub call of this run would fail the same way (bad token,
    /// SAML SSO, no such repository, GitHub unreachable or rate limited past
    /// the deadline, an API base that is not GitHub's API): stop using
    /// GitHub for the rest of the run; pushed branches are `pr_failed` and
    /// their PRs are opened on resume.
    Run,
}

/// Everything that can go wrong talking to GitHub or deciding which
/// repository to talk to. Each variant carries what a person needs in the
/// morning: the request, the status, GitHub's own message and request id,
/// and the fix where one is known. No variant ever holds the token.
#[derive(Debug, thiserror::Error)]
pub enum ForgeError {
    /// The octocrab client could not be built (bad API base URL, TLS roots).
    #[error("cannot set up the GitHub client for {api_base}: {message}")]
    Client { api_base: String, message: String },

    /// GitHub answered with a status that is not retried (most 4xx).
    /// `hint` says what to fix; `scope` how far the refusal reaches.
    #[error("GitHub {method} {path} answered {status}: {message}{}{}{}",
        if errors.is_empty() { String::new() } else { format!(" ({})", errors.join("; ")) },
        request_id.as_ref().map(|id| format!(" [request id {id}]")).unwrap_or_default(),
        hint.as_ref().map(|h| format!(" — {h}")).unwrap_or_default())]
    Api {
        method: &'static str,
        path: String,
        status: u16,
        message: String,
        errors: Vec<String>,
        request_id: Option<String>,
        hint: Option<String>,
        scope: Scope,
    },

    /// A transient failure persisted through every allowed attempt.
    #[error(
        "GitHub {method} {path} still failing after {attempts} attempts and {waited_secs} s of waiting: {last}"
    )]
    Exhausted {
        method: &'static str,
        path: String,
        attempts: u32,
        waited_secs: u64,
        last: String,
    },

    /// The wait GitHub asked for (or the backoff) would exceed the total wait
    /// budget or pass the deadline, so nightshift stops instead of waiting.
    #[error("GitHub {method} {path}: would have to wait {wait_secs} s ({last}), beyond {limit}")]
    WaitTooLong {
        method: &'static str,
        path: String,
        wait_secs: u64,
        last: String,
        limit: String,
    },

    /// GitHub answered JSON without what nightshift reads (a missing field):
    /// never taken for "nothing found".
    #[error("GitHub {method} {path}: unexpected response body ({message}): {excerpt}")]
    Decode {
        method: &'static str,
        path: String,
        message: String,
        excerpt: String,
    },

    /// The answer was not GitHub's JSON at all (an HTML page, plain text): the
    /// API base is not GitHub's API, or something in between answered.
    #[error(
        "GitHub {method} {path} answered {status} with {what}, not GitHub's JSON — is {api_base} GitHub's API? GITHUB_API_URL must be the API root: https://api.github.com, or https://HOST/api/v3 for GitHub Enterprise (a proxy may also be answering)"
    )]
    NotGitHub {
        method: &'static str,
        path: String,
        status: u16,
        what: String,
        api_base: String,
    },

    /// GitHub said the created object exists but a look-up cannot find it.
    #[error("GitHub {method} {path} said {what} already exists, but looking it up found nothing")]
    Vanished {
        method: &'static str,
        path: String,
        what: String,
    },

    /// Not sent: an earlier call of this run met a refusal every call would
    /// meet (`reason` is that error), so this client leaves GitHub alone.
    #[error("GitHub not asked again this run; earlier: {reason}")]
    Stopped { reason: String },

    /// `GH_REPO` or config `github_repo` is not `OWNER/REPO`.
    #[error("{source_name} is {value:?}; expected OWNER/REPO (or HOST/OWNER/REPO)")]
    BadRepo {
        source_name: &'static str,
        value: String,
    },

    /// No repository could be determined.
    #[error(
        "no GitHub repository: {reason}; set GH_REPO=OWNER/REPO or `github_repo` in .nightshift/config.toml"
    )]
    NoRepo { reason: String },
}

impl ForgeError {
    /// How far this failure reaches (see [`Scope`]). `Exhausted`,
    /// `WaitTooLong`, `Client`, `NotGitHub`, `Stopped`, `BadRepo` and
    /// `NoRepo` reach the run; `Api` carries its own; `Decode` and
    /// `Vanished` concern one object.
    pub fn scope(&self) -> Scope {
        match self {
            ForgeError::Api { scope, .. } => *scope,
            ForgeError::Decode { .. } | ForgeError::Vanished { .. } => Scope::Item,
            ForgeError::Client { .. }
            | ForgeError::Exhausted { .. }
            | ForgeError::WaitTooLong { .. }
            | ForgeError::NotGitHub { .. }
            | ForgeError::Stopped { .. }
            | ForgeError::BadRepo { .. }
            | ForgeError::NoRepo { .. } => Scope::Run,
        }
    }

    /// True for a refusal that every later call would meet, after which the
    /// client stops calling GitHub (transient exhaustion is left to the
    /// caller: GitHub may be back for the next run).
    pub(super) fn stops_client(&self) -> bool {
        matches!(
            self,
            ForgeError::Api {
                scope: Scope::Run,
                ..
            } | ForgeError::NotGitHub { .. }
        )
    }

    /// The same error with `f` applied to every text it carries (redaction).
    pub(super) fn map_text(mut self, f: impl Fn(&str) -> String) -> ForgeError {
        for text in self.texts_mut() {
            *text = f(text);
        }
        self
    }

    /// Every text this error carries, for [`ForgeError::map_text`]. The match
    /// is exhaustive, so a new variant cannot slip past redaction.
    fn texts_mut(&mut self) -> Vec<&mut String> {
        match self {
            ForgeError::Client { api_base, message } => vec![api_base, message],
            ForgeError::Api {
                path,
                message,
                errors,
                request_id,
                hint,
                ..
            } => {
                let mut texts = vec![path, message];
                texts.extend(errors.iter_mut());
                texts.extend(request_id.as_mut());
                texts.extend(hint.as_mut());
                texts
            }
            ForgeError::Exhausted { path, last, .. } => vec![path, last],
            ForgeError::WaitTooLong {
                path, last, limit, ..
            } => vec![path, last, limit],
            ForgeError::Decode {
                path,
                message,
                excerpt,
                ..
            } => vec![path, message, excerpt],
            ForgeError::NotGitHub {
                path,
                what,
                api_base,
                ..
            } => vec![path, what, api_base],
            ForgeError::Vanished { path, what, .. } => vec![path, what],
            ForgeError::Stopped { reason } | ForgeError::NoRepo { reason } => vec![reason],
            ForgeError::BadRepo { value, .. } => vec![value],
        }
    }
}
