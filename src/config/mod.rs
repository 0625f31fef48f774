//! The project's `.nightshift/config.toml` (docs/config.md).
//!
//! Every key is optional; a missing file means all defaults. Unknown keys and
//! bad values are errors that name the file, the line and the key, so a typo
//! made at 23:00 is caught by `plan`, not discovered at 03:00. This module
//! only reads and validates; how a limit is finally resolved for one item
//! (flag › item › recipe › policy caps › default) is the contract's business.
//!
//! The files: `types` (the tables and their defaults), `forms` (how durations, sizes and times
//! are written), `load` (where the file is, reading it), `validate` (what serde cannot check),
//! `error` (a refusal's wording: file, line, key and what to write), `template` (what `init`
//! writes), `protected` (the paths protected by default), `fallback` (`[agents.NAME]` and the
//! `fallback` keys).

mod error;
mod fallback;
mod forms;
mod load;
mod protected;
mod quota;
mod serve;
mod template;
#[cfg(test)]
mod tests;
mod types;
mod validate;

pub use error::{ConfigError, line_of, refusal};
pub use forms::{MAX_DURATION_SECS, format_duration, format_size, parse_duration, parse_hhmm};
pub use load::{DIR, FILE, Loaded, load, parse, secret_names_hint};
pub use protected::{DEFAULT_PROTECTED, protected_paths};
pub use quota::{DEFAULT_RESERVE, Overage, Quota, parse_percent};
pub use serve::{DEFAULT_RETENTION, Serve};
pub use template::{PLACEHOLDER_GATE, TEMPLATE, sandbox_read_table, template_with_gate};
pub use types::{
    AgentConfig, AgentKind, Config, DEFAULT_CI_LOG_LINES, DEFAULT_CI_ROUNDS, DEFAULT_CI_WAIT,
    DEFAULT_MAX_AGENT_OUTPUT, DEFAULT_MAX_CHANGED_FILES, DEFAULT_MAX_DIFF_LINES, Limits, Recipe,
    SandboxConfig, Targets,
};
pub use validate::{MAX_CI_LOG_LINES, MAX_CI_WAIT, MAX_COST_USD, MAX_JOBS, MAX_ROUNDS};
