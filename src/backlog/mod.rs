//! The backlog: reading `NEXT.md` into items (docs/backlog.md), and the one edit
//! nightshift ever makes to it, the byte-exact tick used by `nightshift sync`.
//!
//! An item is a task-list item (`- [ ]`, `* [x]`, `1. [ ]` …) that is not
//! nested in another task item and not inside a block quote, code or HTML;
//! its first line is the title, the lines nested under it are its details
//! (`accept:`, `verify:`, `scope:`, `question:`, `rounds:`, `timeout:`,
//! `max_changed_files:`, `max_diff_lines:`, anything else is a note). Block quotes in the document preamble and in the
//! item's `##` section are its context. Parsing never fails: malformed detail
//! lines become [`Problem`]s with file:line so `plan` can list them all at once.
//! Boxes in block quotes (docs/backlog.md#items), HTML comments, code, tables (GitHub shows
//! them as text) and footnotes are not items.
//!
//! The reader loses nothing silently. Whatever looks meant for nightshift but
//! would not be read — a detail keyword outside every item or inside a code
//! span, a box that is not a task box (`[]`, a full-width space, `[!]`), a
//! list marker glued to its box (`-[ ]`), such a box continuing an item's
//! title paragraph or a block quote, a heading with a box, an open box glued into an HTML
//! block, inside the front matter or below a comment or code fence that is
//! never closed — is a problem naming its line and the fix; so is an open
//! item whose whole title is struck through. Marks
//! that can only mean "do not run" are left alone: done boxes and the skip
//! states `[-]` (cancelled), `[/]` (in progress), `[~]`, `[>]` (deferred) and
//! `[<]` (scheduled) of Obsidian Tasks and bullet journals. Done items never
//! run again, so malformed lines under them are not problems.
//!
//! Refused by name: UTF-16 and UTF-32 (with or without a byte-order mark)
//! and other non-UTF-8 bytes.
//!
//! Accepted around the grammar, as real files are written: a UTF-8 BOM, YAML
//! (`---`) or TOML (`+++`) front matter (skipped), `\n`, `\r\n` and lone `\r`
//! line endings, tabs, setext headings, loose lists, ordered lists starting
//! anywhere, task items grouped under plain bullets, keywords in any ASCII
//! case with `:` or `：`, wrapped in emphasis (`**accept:**`) or after a
//! bullet (`- `, `1. `).
//!
//! This module is not the judge of limits: it exposes `rounds:`/`timeout:`
//! and the change-size values with their line numbers, and the contract module checks them
//! against the policy's caps. It does not render markdown and never rewrites
//! the file except through [`tick()`].

mod decode;
mod details;
mod hash;
mod item;
mod lines;
mod lints;
mod model;
mod parse;
mod scan;
mod tick;

pub use decode::decode;
pub use hash::sha256_hex;
pub use item::MAX_CONTEXT_BYTES;
pub use model::{Backlog, BacklogError, DetailKind, DetailLine, Details, Item, Problem};
pub use parse::{parse, read};
pub use tick::{TickError, tick, tick_in_checkout};

#[cfg(test)]
mod tests;
