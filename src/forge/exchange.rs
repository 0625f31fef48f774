//! What one exchange with GitHub is made of: the verbs this module can send ([`Verb`]) and a
//! final answer ([`Reply`]). Not the sending (see [`super::client`]) nor the judging of an
//! answer (see [`super::transient`], [`super::refusal`]).

use http::{HeaderMap, StatusCode};

/// The only HTTP methods this module can send. Merging (`PUT .../merge`) is
/// unrepresentable here; approving (`POST .../reviews`) is never built; the
/// one `PATCH` ([`crate::forge::Forge::update_pr_body`]) sends a body and nothing else, so
/// it cannot close a PR (docs/github.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verb {
    Get,
    Post,
    Patch,
}

impl Verb {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Verb::Get => "GET",
            Verb::Post => "POST",
            Verb::Patch => "PATCH",
        }
    }
}

/// A response GitHub gave that is final (2xx or a non-retried 4xx).
#[derive(Debug)]
pub(super) struct Reply {
    pub(super) status: StatusCode,
    pub(super) headers: HeaderMap,
    pub(super) body: String,
}
