//! The backlog's values: the parsed [`Backlog`], its [`Item`]s with their
//! [`Details`], the [`Problem`]s found on the way and [`BacklogError`].
//!
//! For what is read and returned; not for reading (`parse`), checking (`lints`)
//! or editing (`tick`) a backlog.

use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

/// A parsed backlog file: the snapshot a plan is made from (docs/backlog.md#snapshot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    /// The path the text was read from, as given (used in problem messages).
    pub path: PathBuf,
    /// Lowercase hex SHA-256 (64 chars) of the file's bytes, BOM included.
    pub sha256: String,
    /// Every task item, open and done, in document order.
    pub items: Vec<Item>,
    /// Every problem, in line order: malformed detail lines of open items
    /// (done items never run, so theirs are not problems), duplicate open
    /// items, and lines that look meant for nightshift but would not be read
    /// (see the module doc). Empty when the backlog is well formed.
    pub problems: Vec<Problem>,
}

/// One task-list item of the backlog (docs/backlog.md#items): a list item that starts with
/// `[ ]`, `[x]` or `[X]`, is not nested in another task item (those are its
/// details) and is not inside a block quote, code or HTML block. Task items
/// grouped under a plain bullet (`- Frontend` / `  - [ ] fix …`) are items.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// 1-based line of the task marker.
    pub line: usize,
    /// Byte offset in the file text of the 3-byte marker `[ ]` / `[x]` / `[X]`
    /// (or `[\t]`, an open box to GitHub and pulldown-cmark too).
    pub marker_offset: usize,
    /// `true` for `[x]` and `[X]`.
    pub done: bool,
    /// The rest of the marker's line, trimmed, otherwise verbatim (markdown
    /// markup, full-width punctuation and notes like `(done: 39/70)` kept).
    pub title: String,
    /// Text of the `##` heading the item is under: its inline source verbatim
    /// (closing `#`s and setext underline removed, the lines of a multi-line
    /// heading joined by one space). `None` before the first `##`, and after a
    /// later `#` heading, which closes the `##` section above it (outline
    /// rule); `###` and deeper headings do not start sections.
    pub section: Option<String>,
    /// Block-quote lines without their `> ` prefix: the document preamble's
    /// (everything before the first `##`) first, then those anywhere in the
    /// item's own section (up to the next `#` or `##` heading).
    pub context: Vec<String>,
    /// The lines nested under the item, classified.
    pub details: Details,
    /// Lowercase hex SHA-256 of `normalize(section or "") + "\n" + normalize(title)`,
    /// where normalize joins the whitespace-separated words with one space.
    /// Identifies the item across nights, config edits and crashes (docs/backlog.md#keys).
    pub key: String,
}

/// The lines nested under an item, verbatim and classified (docs/backlog.md).
///
/// A nested line is recognised after removing its indentation and one leading
/// bullet (`- `, `* `, `+ `, `1. `, `1) `). Keywords are ASCII
/// case-insensitive, take `:` or the full-width `：` (spaces allowed before
/// it), and may be wrapped in emphasis like a label: `**accept:** x`,
/// `**accept**: x`, `_accept_: x`. Lines inside a code block or HTML block
/// nested in the item are always notes; so are nested block quotes and nested
/// task items (`- [ ] accept: …` is a checklist line, not a keyword).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Details {
    /// Every non-blank nested line, verbatim (indentation kept, line ending
    /// dropped), with its 1-based line number and what it was read as.
    pub lines: Vec<DetailLine>,
    /// One acceptance condition per `accept:` line, in order.
    pub accept: Vec<String>,
    /// One gate command per `verify:` line. `` verify: `CMD` `` gives `CMD`
    /// (any run of backticks, like a markdown code span); without backticks
    /// the rest of the line.
    pub verify: Vec<String>,
    /// Globs from `scope:` lines. One line may hold several globs separated by
    /// whitespace, commas or semicolons (ASCII or full-width, and `、`), so a
    /// glob cannot contain spaces. When the line holds backticks, only the
    /// code spans are globs and anything else but separators is a problem.
    pub scope: Vec<String>,
    /// Globs from `allow:` lines, in `scope:`'s grammar: the protected paths
    /// (nightshift's defaults and the config's `protected`) this item may
    /// change anyway (docs/backlog.md#details). Sealed in the contract and
    /// shown on the card; never widens `scope:`.
    pub allow: Vec<String>,
    /// Open questions (`question:` lines); any makes the item blocked.
    pub questions: Vec<String>,
    /// `rounds: N` (N ≥ 1, full-width digits accepted) and its line; the last
    /// valid one wins if repeated (a repeat is also a problem).
    pub rounds: Option<(u32, usize)>,
    /// `timeout: 45m` and its line, in the grammar the config's durations use
    /// too ([`crate::duration`]): one or more number–unit pairs, e.g. `2h`,
    /// `90s`, `1h30m`, `1h 30m`, `45 min`, `2 hours`, `45分鐘`. Units: d/day(s),
    /// h/hr(s)/hour(s), m/min(s)/minute(s), s/sec(s)/second(s) and 天, 小時
    /// (小时, 時), 分鐘 (分钟, 分), 秒; full-width letters and digits accepted.
    /// A bare number is a problem (minutes or seconds?).
    pub timeout: Option<(Duration, usize)>,
    /// `max_changed_files: N` (N ≥ 1) and its line: at most N files in the
    /// item's change; the contract checks it against `[limits]`.
    pub max_changed_files: Option<(u64, usize)>,
    /// `max_diff_lines: N` (N ≥ 1) and its line: at most N lines added and
    /// removed together.
    pub max_diff_lines: Option<(u64, usize)>,
    /// Every other nested line: the indentation all the item's nested lines
    /// share and trailing whitespace removed, otherwise verbatim (context for
    /// the writer). Not the marker's width: `9. [ ]` renumbered `10. [ ]`
    /// keeps its notes.
    pub notes: Vec<String>,
}

/// One nested line of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetailLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// The line exactly as in the file, without `\n` / `\r\n`.
    pub text: String,
    /// The line without the indentation all the item's nested lines share
    /// (what the contract seals, docs/contract.md#contract): the same when the item moves into
    /// or out of a group, or its list is renumbered from `9.` to `10.` and
    /// re-indented (as Prettier does), or tabs become spaces.
    pub relative: String,
    /// What the line was read as.
    pub kind: DetailKind,
}

/// The role of a nested line (docs/backlog.md#details).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DetailKind {
    /// `accept:`
    Accept,
    /// `verify:`
    Verify,
    /// `scope:`
    Scope,
    /// `allow:`
    Allow,
    /// `question:`
    Question,
    /// `rounds:`
    Rounds,
    /// `timeout:`
    Timeout,
    /// `max_changed_files:`
    MaxChangedFiles,
    /// `max_diff_lines:`
    MaxDiffLines,
    /// Anything else (context for the writer).
    Note,
}

/// A malformed line of the backlog, with a fix hint (docs/backlog.md#problems: `plan` stops
/// before any card and lists every problem).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The backlog's path, as given to [`super::parse()`] / [`super::read`].
    pub path: PathBuf,
    /// 1-based line number.
    pub line: usize,
    /// What is wrong and how to fix it, e.g. "empty `accept:` — write the condition after the colon".
    pub message: String,
}

impl fmt::Display for Problem {
    /// `NEXT.md:12: empty `accept:` — write the condition after the colon`
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}: {}", self.path.display(), self.line, self.message)
    }
}

/// Failures of [`super::read`] and [`super::tick()`].
#[derive(Debug, thiserror::Error)]
pub enum BacklogError {
    /// The backlog file could not be read: missing, not a regular file,
    /// too large (over [`crate::file::MAX_TEXT_BYTES`]) or an I/O error.
    #[error("cannot read the backlog: {source}")]
    Read {
        /// The file that was being read.
        path: PathBuf,
        /// Why (its message names the file).
        source: crate::file::FileError,
    },
    /// The backlog file is not UTF-8 (a legacy encoding such as Big5 or
    /// Latin-1, or a binary file).
    #[error("{}:{line}: not UTF-8 (byte 0x{byte:02X} at offset {offset}) — save the backlog as UTF-8", path.display())]
    NotUtf8 {
        /// The file that was being read.
        path: PathBuf,
        /// Byte offset of the first invalid byte.
        offset: usize,
        /// 1-based line of that byte.
        line: usize,
        /// The invalid byte.
        byte: u8,
    },
    /// The backlog file is UTF-16 (it starts with a UTF-16 byte-order mark,
    /// as Windows Notepad's "Unicode" and PowerShell's `>` write it).
    #[error("{}: UTF-16 text (byte-order mark {bom}) — save the backlog as UTF-8", path.display())]
    Utf16 {
        /// The file that was being read.
        path: PathBuf,
        /// `FF FE` (little-endian) or `FE FF` (big-endian).
        bom: &'static str,
    },
    /// The backlog file is UTF-32, or UTF-16 without a byte-order mark: its
    /// ASCII characters come with NUL bytes between them.
    #[error("{}: {encoding} text (NUL bytes between the characters) — save the backlog as UTF-8", path.display())]
    Wide {
        /// The file that was being read.
        path: PathBuf,
        /// `UTF-16LE`, `UTF-16BE`, `UTF-32LE` or `UTF-32BE`.
        encoding: &'static str,
    },
    /// The bytes at the item's marker offset are not an open box `[ ]`: the
    /// file changed since it was parsed, or the item is already ticked.
    #[error(
        "line {line}: expected `[ ]` at byte {offset}, found {found:?} — the backlog changed since it was read; re-read it"
    )]
    MarkerMismatch {
        /// The item's 1-based line.
        line: usize,
        /// The item's marker offset in bytes.
        offset: usize,
        /// What is there instead (up to 3 bytes, lossy).
        found: String,
    },
    /// The marker is in place but the title on its line is not the item's.
    #[error(
        "line {line}: expected title {expected:?}, found {found:?} — the backlog changed since it was read; re-read it"
    )]
    TitleMismatch {
        /// The item's 1-based line.
        line: usize,
        /// The item's title.
        expected: String,
        /// The trimmed text after the marker now.
        found: String,
    },
    /// The note to append would break the line.
    #[error("tick note {note:?} contains a line break; it must stay on the title line")]
    NoteHasLineBreak {
        /// The rejected note.
        note: String,
    },
}

impl Backlog {
    /// The items not yet ticked, in backlog order (the order `plan` numbers them, docs/commands.md).
    pub fn open_items(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|item| !item.done)
    }
}
