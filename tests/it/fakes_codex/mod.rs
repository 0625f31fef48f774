//! The Codex side of the fakes: where the real Codex CLI is installed and
//! the replaying stand-in lives ([`cli`]), and the fake Responses API the
//! real CLI is pointed at ([`responses`]).

pub mod cli;
pub mod responses;
