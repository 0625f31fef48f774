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
//! the file except through [`tick`].

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Options, Parser, Tag, TagEnd};

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
    /// The backlog's path, as given to [`parse`] / [`read`].
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

/// Failures of [`read`] and [`tick`].
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

/// Reads and parses the backlog at `path` (docs/backlog.md). The hash covers the
/// file's exact bytes.
///
/// # Errors
/// [`BacklogError::Read`] when the file cannot be read, [`BacklogError::Utf16`]
/// or [`BacklogError::NotUtf8`] (with the line of the first bad byte) when it
/// is not UTF-8. Malformed items are not errors: see [`Backlog::problems`].
pub fn read(path: &Path) -> Result<Backlog, BacklogError> {
    let bytes = crate::file::read_regular(path, crate::file::MAX_TEXT_BYTES).map_err(|source| {
        BacklogError::Read {
            path: path.to_path_buf(),
            source,
        }
    })?;
    let text = decode(path, bytes)?;
    Ok(parse(path, &text))
}

/// The backlog's bytes as text, refusing anything but UTF-8 (a BOM is kept;
/// [`parse`] skips it). `path` is only used in the error.
///
/// # Errors
/// [`BacklogError::Utf16`] for a UTF-16 byte-order mark,
/// [`BacklogError::Wide`] for UTF-32 or UTF-16 without a mark, else
/// [`BacklogError::NotUtf8`] naming the line and offset of the first bad byte.
pub fn decode(path: &Path, bytes: Vec<u8>) -> Result<String, BacklogError> {
    let bom = match bytes.get(..2) {
        Some([0xFF, 0xFE]) => Some("FF FE"),
        Some([0xFE, 0xFF]) => Some("FE FF"),
        _ => None,
    };
    // UTF-32LE's mark starts with UTF-16LE's.
    let utf32_bom = matches!(
        bytes.get(..4),
        Some([0xFF, 0xFE, 0, 0] | [0, 0, 0xFE, 0xFF])
    );
    if let Some(bom) = bom.filter(|_| !utf32_bom) {
        return Err(BacklogError::Utf16 {
            path: path.to_path_buf(),
            bom,
        });
    }
    if let Some(encoding) = wide_encoding(&bytes) {
        return Err(BacklogError::Wide {
            path: path.to_path_buf(),
            encoding,
        });
    }
    String::from_utf8(bytes).map_err(|err| {
        let offset = err.utf8_error().valid_up_to();
        let bytes = err.as_bytes();
        // The valid prefix is text: count its line breaks the way LineIndex does.
        let prefix = std::str::from_utf8(&bytes[..offset]).unwrap_or_default();
        BacklogError::NotUtf8 {
            path: path.to_path_buf(),
            offset,
            line: LineIndex::new(prefix).count(),
            byte: bytes[offset],
        }
    })
}

/// UTF-32 (with or without its byte-order mark) or UTF-16 without one, told
/// by where the NUL bytes of ASCII text fall: such a file is valid UTF-8
/// byte for byte, and would read as a NUL on every line and no item.
fn wide_encoding(bytes: &[u8]) -> Option<&'static str> {
    match bytes.get(..4) {
        Some([0xFF, 0xFE, 0, 0]) => return Some("UTF-32LE"),
        Some([0, 0, 0xFE, 0xFF]) => return Some("UTF-32BE"),
        _ => {}
    }
    // A sample is enough. UTF-32 keeps its two high bytes NUL for every
    // character up to U+FFFF; UTF-16 has a NUL high byte for each ASCII
    // character (markup, spaces, line ends), seldom a NUL low byte (U+4E00).
    let sample = &bytes[..bytes.len().min(4096) & !3];
    if sample.len() < 4 {
        return None;
    }
    let mut zeros = [0usize; 4];
    for (i, b) in sample.iter().enumerate() {
        if *b == 0 {
            zeros[i % 4] += 1;
        }
    }
    let quads = sample.len() / 4;
    let nearly_all = |n: usize| n * 10 >= quads * 9;
    if nearly_all(zeros[2]) && nearly_all(zeros[3]) {
        return Some("UTF-32LE");
    }
    if nearly_all(zeros[0]) && nearly_all(zeros[1]) {
        return Some("UTF-32BE");
    }
    let (even, odd) = (zeros[0] + zeros[2], zeros[1] + zeros[3]);
    let pairs = sample.len() / 2;
    if odd * 10 >= pairs && even * 8 <= odd {
        return Some("UTF-16LE");
    }
    if even * 10 >= pairs && odd * 8 <= even {
        return Some("UTF-16BE");
    }
    None
}

/// Parses backlog `text` read from `path` (the path is only used in
/// problems). Never fails; malformed detail lines and lines that look meant
/// for nightshift but would not be read are collected in
/// [`Backlog::problems`] (docs/backlog.md#problems). A leading UTF-8 BOM and front matter are
/// skipped; offsets and line numbers still refer to `text` as given.
pub fn parse(path: &Path, text: &str) -> Backlog {
    let lines = LineIndex::new(text);
    // pulldown-cmark does not skip a BOM: the first line would become a paragraph.
    let bom = if text.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let front = front_matter(text, &lines, bom);
    let base = front.as_ref().map_or(bom, |f| f.end);
    let scan = scan(&text[base..], base);

    let mut problems = Vec::new();
    let context = Context::new(text, &lines, &scan);
    let mut items = Vec::with_capacity(scan.items.len());
    for raw in &scan.items {
        let mut own = Vec::new();
        let item = build_item(path, text, &lines, &scan, &context, raw, &mut own);
        // A done item never runs again: a malformed line under it is history,
        // not a reason to stop tonight's plan.
        if !item.done {
            problems.append(&mut own);
        }
        items.push(item);
    }
    // Once per section, not once per item under it.
    let mut told = std::collections::BTreeSet::new();
    for raw in scan.items.iter().filter(|r| !r.done) {
        if let Some((line, bytes)) = context.oversized[raw.region]
            && told.insert(line)
        {
            problems.push(Problem {
                path: path.to_path_buf(),
                line,
                message: format!(
                    "the block quotes that are context for the items of this section total {} KiB, more than {} KiB; every item's contract carries them all: move the long text into a file in the repository and quote only a pointer to it",
                    bytes / 1024,
                    MAX_CONTEXT_BYTES / 1024
                ),
            });
        }
    }
    let mut problem = |line: usize, message: String| {
        problems.push(Problem {
            path: path.to_path_buf(),
            line,
            message,
        });
    };
    if let Some(front) = &front {
        check_front_matter(text, &lines, front, &mut problem);
    }
    check_stray_lines(text, &lines, base, &scan, &mut problem);
    check_html_blocks(text, &lines, &scan.html_blocks, &mut problem);
    check_unclosed_fences(text, &lines, &scan.fences, &mut problem);
    check_headings(text, &lines, &scan.headings, &mut problem);
    check_lazy_quote_lines(text, &lines, &scan.quotes, &mut problem);
    report_duplicate_keys(path, &items, &mut problems);
    report_hidden_characters(path, text, &lines, &mut problems);
    // Stable: problems of one line keep the order they were found in.
    problems.sort_by_key(|p| p.line);

    Backlog {
        path: path.to_path_buf(),
        sha256: sha256_hex(text.as_bytes()),
        items,
        problems,
    }
}

/// Characters that make a card lie about what is approved: NUL (a binary or
/// corrupted file; the ledger cannot store it), the other C0/C1 control
/// characters (ESC starts terminal escape sequences that can rewrite the card
/// on screen) and the Unicode bidirectional controls that reorder text on
/// screen (CVE-2021-42574, "Trojan Source"). Tab and line endings are fine.
fn report_hidden_characters(
    path: &Path,
    text: &str,
    lines: &LineIndex,
    problems: &mut Vec<Problem>,
) {
    for n in 1..=lines.count() {
        let line = &text[lines.range(n)];
        let bad = line.chars().find(|&c| {
            (c.is_control() && c != '\t')
                || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
        });
        if let Some(c) = bad {
            let what = match c {
                '\0' => "NUL: is the file binary?",
                '\u{1b}' => "ESC: a terminal escape sequence",
                c if c.is_control() => "a control character",
                _ => "a bidirectional text control",
            };
            problems.push(Problem {
                path: path.to_path_buf(),
                line: n,
                message: format!("hidden character U+{:04X} ({what}); remove it — it could make the card show something other than what runs", c as u32),
            });
        }
    }
}

/// Ticks `item` in `text`: replaces its `[ ]` (or `[\t]`) at `marker_offset` with `[x]`
/// and appends `note` (e.g. `" (done: #123)"`) after the title, before any
/// trailing whitespace and the line ending. Every other byte is unchanged
/// (docs/backlog.md#ticks-and-sync, `nightshift sync`). The caller should also compare the file's
/// hash with [`Backlog::sha256`] before writing. The note becomes part of the
/// title, so the ticked item's key changes; done items never run, so nothing
/// looks them up by key again.
///
/// # Errors
/// [`BacklogError::MarkerMismatch`] when the 3 bytes at the offset are not
/// an open box, [`BacklogError::TitleMismatch`] when the rest of that line is not the
/// item's title, [`BacklogError::NoteHasLineBreak`] when `note` holds `\n` or `\r`.
pub fn tick(text: &str, item: &Item, note: &str) -> Result<String, BacklogError> {
    if note.contains(['\n', '\r']) {
        return Err(BacklogError::NoteHasLineBreak {
            note: note.to_string(),
        });
    }
    let offset = item.marker_offset;
    let marker_end = offset.saturating_add(3);
    // GitHub and pulldown-cmark take a tab in the box for a space: `[\t]` is open.
    if !matches!(
        text.as_bytes().get(offset..marker_end),
        Some(b"[ ]" | b"[\t]")
    ) {
        let found = text
            .as_bytes()
            .get(offset..marker_end.min(text.len()))
            .unwrap_or_default();
        return Err(BacklogError::MarkerMismatch {
            line: item.line,
            offset,
            found: String::from_utf8_lossy(found).into_owned(),
        });
    }
    // The marker bytes are ASCII, so marker_end is a char boundary. The line
    // ends at `\n`, `\r\n` or a lone `\r` (old Mac files; CommonMark too).
    let rest = &text[marker_end..];
    let line_rest = &rest[..rest.find(['\n', '\r']).unwrap_or(rest.len())];
    if line_rest.trim() != item.title {
        return Err(BacklogError::TitleMismatch {
            line: item.line,
            expected: item.title.clone(),
            found: line_rest.trim().to_string(),
        });
    }
    let insert_at = marker_end + line_rest.trim_end().len();
    let mut out = String::with_capacity(text.len() + note.len());
    out.push_str(&text[..offset]);
    out.push_str("[x]");
    out.push_str(&text[marker_end..insert_at]);
    out.push_str(note);
    out.push_str(&text[insert_at..]);
    Ok(out)
}

/// Lowercase hex SHA-256 of `bytes` (64 characters): item keys, and the
/// SHAs of contracts and plans (`contract` re-exports it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}

/// normalize() of the key rule: words separated by exactly one space.
fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// An item as found by the markdown scan, before its lines are read.
struct RawItem {
    /// Byte range of the whole list item.
    range: Range<usize>,
    marker_offset: usize,
    done: bool,
    /// Index into `Scan::regions`.
    region: usize,
    /// Code and HTML blocks nested in the item: their lines are never keywords.
    opaque: Vec<Range<usize>>,
}

/// A list item while its events are being read.
struct Frame {
    range: Range<usize>,
    /// Offset and state of its own task marker, if it has one.
    marker: Option<(usize, bool)>,
    opaque: Vec<Range<usize>>,
}

/// A stretch of the document between headings of level 1 or 2 (the outline
/// rule: a `#` heading closes the `##` section above it).
struct Region {
    /// The `##` heading's text; `None` for the start and for `#` regions.
    heading: Option<String>,
    /// Before the first `##` heading: its block quotes are context for all items.
    preamble: bool,
}

/// A block quote outside every list, and the region it sits in.
struct Quote {
    range: Range<usize>,
    region: usize,
}

/// What one pass over the markdown events finds; all ranges index the full text.
struct Scan {
    items: Vec<RawItem>,
    regions: Vec<Region>,
    quotes: Vec<Quote>,
    /// Where lines are owned or deliberately opaque: items, and outside items
    /// code blocks, HTML blocks, block quotes and headings. Every other line
    /// is checked for details and boxes that would not be read.
    claimed: Vec<Range<usize>>,
    /// HTML blocks outside items and block quotes (checked for glued task boxes).
    html_blocks: Vec<Range<usize>>,
    /// Fenced code blocks outside items and block quotes (checked for a
    /// missing closing fence that hides the items below it).
    fences: Vec<Range<usize>>,
    /// Headings outside items and block quotes (checked for a task box).
    headings: Vec<Range<usize>>,
}

/// Walks the markdown events once. `body` is the text after any BOM and
/// front matter, and `base` its offset in the full text.
fn scan(body: &str, base: usize) -> Scan {
    let mut sc = Scanner::new(body, base);
    for (event, range) in Parser::new_ext(body, Options::ENABLE_TASKLISTS).into_offset_iter() {
        sc.event(event, range.start + base..range.end + base);
    }
    sc.out
}

/// The walk of [`scan`] over pulldown-cmark's events: what it found so far
/// and where it is (lists, quotes, the task item being read, the heading).
struct Scanner<'b> {
    body: &'b str,
    base: usize,
    out: Scan,
    lists: usize,
    quotes: usize,
    seen_h2: bool,
    /// Open list items, outermost first.
    stack: Vec<Frame>,
    /// The index in `stack` of the task item being read (nothing nested in
    /// it can be an item).
    owner: Option<usize>,
    /// Inline extent of the `#`/`##` heading being read, and its level.
    heading: Option<(HeadingLevel, Option<Range<usize>>)>,
}

impl<'b> Scanner<'b> {
    fn new(body: &'b str, base: usize) -> Scanner<'b> {
        Scanner {
            body,
            base,
            out: Scan {
                items: Vec::new(),
                regions: vec![Region {
                    heading: None,
                    preamble: true,
                }],
                quotes: Vec::new(),
                claimed: Vec::new(),
                html_blocks: Vec::new(),
                fences: Vec::new(),
                headings: Vec::new(),
            },
            lists: 0,
            quotes: 0,
            seen_h2: false,
            stack: Vec::new(),
            owner: None,
            heading: None,
        }
    }

    /// One event at `range` (offsets in the whole file).
    fn event(&mut self, event: Event<'_>, range: Range<usize>) {
        self.extend_heading(&event, &range);
        match event {
            Event::Start(Tag::List(_)) => self.lists += 1,
            Event::End(TagEnd::List(_)) => self.lists -= 1,
            Event::Start(Tag::Item) => self.stack.push(Frame {
                range,
                marker: None,
                opaque: Vec::new(),
            }),
            // pulldown-cmark sends the marker right after its item starts.
            Event::TaskListMarker(done) => {
                if self.owner.is_none()
                    && self.quotes == 0
                    && let Some(top) = self.stack.last_mut()
                {
                    top.marker = Some((range.start, done));
                    self.owner = Some(self.stack.len() - 1);
                }
            }
            Event::End(TagEnd::Item) => self.item_end(),
            Event::Start(Tag::CodeBlock(_)) | Event::Start(Tag::HtmlBlock) => {
                self.block(&event, range)
            }
            Event::Start(Tag::BlockQuote(_)) => self.quote_start(range),
            Event::End(TagEnd::BlockQuote(_)) => self.quotes -= 1,
            Event::Start(Tag::Heading { level, .. }) => self.heading_start(level, range),
            Event::End(TagEnd::Heading(_)) => self.heading_end(),
            _ => {}
        }
    }

    /// Widens the inline extent of the heading being read to `range`.
    fn extend_heading(&mut self, event: &Event<'_>, range: &Range<usize>) {
        let Some((_, extent)) = self.heading.as_mut() else {
            return;
        };
        if matches!(event, Event::End(TagEnd::Heading(_))) || range.is_empty() {
            return;
        }
        let r = extent.get_or_insert(range.clone());
        r.start = r.start.min(range.start);
        r.end = r.end.max(range.end);
    }

    /// The end of a list item: a task item outside any other is an item.
    fn item_end(&mut self) {
        let Some(frame) = self.stack.pop() else {
            return;
        };
        if self.owner == Some(self.stack.len())
            && let Some((marker_offset, done)) = frame.marker
        {
            self.owner = None;
            self.out.claimed.push(frame.range.clone());
            self.out.items.push(RawItem {
                range: frame.range,
                marker_offset,
                done,
                region: self.out.regions.len() - 1,
                opaque: frame.opaque,
            });
        }
    }

    /// A code or HTML block: opaque inside an item, claimed outside one.
    fn block(&mut self, event: &Event<'_>, range: Range<usize>) {
        if let Some(i) = self.owner {
            self.stack[i].opaque.push(range);
            return;
        }
        if self.quotes == 0 && matches!(event, Event::Start(Tag::HtmlBlock)) {
            self.out.html_blocks.push(range.clone());
        }
        if self.quotes == 0
            && matches!(
                event,
                Event::Start(Tag::CodeBlock(CodeBlockKind::Fenced(_)))
            )
        {
            self.out.fences.push(range.clone());
        }
        self.out.claimed.push(range);
    }

    /// A block quote: a top-level one outside lists is context.
    fn quote_start(&mut self, range: Range<usize>) {
        self.quotes += 1;
        if self.quotes == 1 && self.lists == 0 {
            self.out.quotes.push(Quote {
                range: range.clone(),
                region: self.out.regions.len() - 1,
            });
        }
        if self.owner.is_none() {
            self.out.claimed.push(range);
        }
    }

    /// A heading starts; `#` and `##` outside lists and quotes open a region.
    fn heading_start(&mut self, level: HeadingLevel, range: Range<usize>) {
        if self.owner.is_none() {
            if self.quotes == 0 {
                self.out.headings.push(range.clone());
            }
            self.out.claimed.push(range);
        }
        if self.lists == 0 && self.quotes == 0 && level <= HeadingLevel::H2 {
            self.heading = Some((level, None));
        }
    }

    /// A `#`/`##` heading ended: the region it opens (a `##` section, or
    /// after a `#`, none).
    fn heading_end(&mut self) {
        let Some((level, extent)) = self.heading.take() else {
            return;
        };
        let base = self.base;
        let region = if level == HeadingLevel::H2 {
            self.seen_h2 = true;
            let text = extent.map(|r| heading_text(&self.body[r.start - base..r.end - base]));
            Region {
                heading: Some(text.unwrap_or_default()),
                preamble: false,
            }
        } else {
            Region {
                heading: None,
                preamble: !self.seen_h2,
            }
        };
        self.out.regions.push(region);
    }
}

/// A heading's inline source on one line: a setext heading may span several.
fn heading_text(source: &str) -> String {
    source
        .split(['\n', '\r'])
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Line starts and ends of a text, for offset → line number and line slicing.
/// A line ends at `\n`, `\r\n` or a lone `\r`, as in CommonMark.
struct LineIndex {
    starts: Vec<usize>,
    /// End of each line's content, before its line ending.
    ends: Vec<usize>,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let bytes = text.as_bytes();
        let mut starts = vec![0];
        let mut ends = Vec::new();
        let mut at = 0;
        while let Some(found) = memchr::memchr2(b'\n', b'\r', &bytes[at..]) {
            let end = at + found;
            let next = if bytes[end] == b'\r' && bytes.get(end + 1) == Some(&b'\n') {
                end + 2
            } else {
                end + 1
            };
            ends.push(end);
            starts.push(next);
            at = next;
        }
        ends.push(text.len());
        Self { starts, ends }
    }

    /// 1-based first and last lines of the bytes in `range` (an empty range:
    /// the line it starts on, twice).
    fn span(&self, range: &Range<usize>) -> (usize, usize) {
        (
            self.line_of(range.start),
            self.line_of(range.end.saturating_sub(1).max(range.start)),
        )
    }

    /// 1-based line holding byte `offset` (a line ending belongs to its line).
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset)
    }

    /// Byte range of 1-based `line`, without its line ending.
    fn range(&self, line: usize) -> Range<usize> {
        self.starts[line - 1]..self.ends[line - 1]
    }

    /// Number of lines (a final line without a line ending counts; the empty
    /// rest after a final line ending does too).
    fn count(&self) -> usize {
        self.starts.len()
    }
}

/// The block-quote lines of the preamble and of each region, read once: a
/// backlog with a quote under every item would otherwise re-read every quote
/// of the section for every item.
struct Context {
    preamble: Vec<String>,
    /// Per region (index into `Scan::regions`); empty for preamble regions.
    regions: Vec<Vec<String>>,
    /// Per region: the first line of its first quote and its context's bytes
    /// (the preamble's included), when over [`MAX_CONTEXT_BYTES`].
    oversized: Vec<Option<(usize, usize)>>,
}

/// The most block-quote context (bytes) an item may carry. Each item's
/// contract holds its section's every quote (docs/backlog.md), so a long one would be
/// copied, hashed and stored once per item: refused above this.
pub const MAX_CONTEXT_BYTES: usize = 64 * 1024;

impl Context {
    fn new(text: &str, lines: &LineIndex, scan: &Scan) -> Self {
        let mut context = Context {
            preamble: Vec::new(),
            regions: vec![Vec::new(); scan.regions.len()],
            oversized: vec![None; scan.regions.len()],
        };
        let mut first_line = vec![None; scan.regions.len()];
        let mut preamble_line = None;
        for q in &scan.quotes {
            let into = if scan.regions[q.region].preamble {
                preamble_line.get_or_insert(lines.line_of(q.range.start));
                &mut context.preamble
            } else {
                first_line[q.region].get_or_insert(lines.line_of(q.range.start));
                &mut context.regions[q.region]
            };
            into.extend(quote_lines(text, lines, &q.range));
        }
        let bytes = |v: &[String]| v.iter().map(|l| l.len() + 1).sum::<usize>();
        let preamble_bytes = bytes(&context.preamble);
        for (r, own) in context.regions.iter().enumerate() {
            let total = preamble_bytes + bytes(own);
            if total > MAX_CONTEXT_BYTES {
                context.oversized[r] = Some((first_line[r].or(preamble_line).unwrap_or(1), total));
            }
        }
        context
    }

    /// Context of an item in `region`: the preamble's quotes, then its region's.
    /// Empty when over [`MAX_CONTEXT_BYTES`] (a problem says so).
    fn of(&self, region: usize) -> Vec<String> {
        if self.oversized[region].is_some() {
            return Vec::new();
        }
        let own = &self.regions[region];
        let mut all = Vec::with_capacity(self.preamble.len() + own.len());
        all.extend_from_slice(&self.preamble);
        all.extend_from_slice(own);
        all
    }
}

/// What is wrong with an item's title, if anything: none at all, only
/// invisible characters, or struck through while the box is open.
fn title_problem(title: &str) -> Option<String> {
    if title.is_empty() {
        return Some("task item without a title — write what to do after the box".to_string());
    }
    if title.chars().all(is_invisible) {
        // A pasted zero-width space looks like an empty line to a person, but
        // would seal a contract, name a branch and open a PR.
        let seen: Vec<String> = title
            .chars()
            .map(|c| format!("U+{:04X}", c as u32))
            .collect();
        return Some(format!(
            "the title is only invisible characters ({}) — write what to do after the box, or delete the line",
            seen.join(" ")
        ));
    }
    // An open box says "run it", the strike says "dropped": ask.
    struck_through(title).then(|| "the whole title is struck through (`~~…~~`) but the box is open — mark it `[-]` (cancelled) or `[x]`, or remove the `~~` to run it".to_string())
}

fn build_item(
    path: &Path,
    text: &str,
    lines: &LineIndex,
    scan: &Scan,
    context: &Context,
    raw: &RawItem,
    problems: &mut Vec<Problem>,
) -> Item {
    let line = lines.line_of(raw.marker_offset);
    let marker_line = lines.range(line);
    let title = text[raw.marker_offset + 3..marker_line.end]
        .trim()
        .to_string();
    if let Some(message) = title_problem(&title) {
        problems.push(Problem {
            path: path.to_path_buf(),
            line,
            message,
        });
    }
    // Nested lines are indented at least as far as the text after the
    // marker; a line indented less continues the title paragraph (lazily).
    let content = columns(&text[marker_line.start..raw.marker_offset]);
    let nested = nested_lines(text, lines, raw, line);
    // Notes lose the indentation the nested lines share, not the marker's
    // width: renumbering `9.` to `10.` (an item above added or removed) must
    // not change an item's notes, hence its contract SHA (docs/contract.md#contract).
    let common = nested
        .iter()
        .map(|(_, r, _)| indent_of(&text[r.clone()]))
        .min()
        .unwrap_or(0);
    let mut details = Details::default();
    for (n, r, opaque) in nested {
        let verbatim = &text[r];
        let indented = indent_of(verbatim);
        if !opaque
            && indented < content
            && let Some(message) = lost_box(verbatim)
        {
            // Markdown reads the line as more of the title's paragraph: the
            // item it was meant to be would end up as a note of this one.
            problems.push(Problem {
                path: path.to_path_buf(),
                line: n,
                message: format!(
                    "{message} (markdown reads this line as more text of the item on line {line})"
                ),
            });
        }
        read_detail(path, n, verbatim, common, opaque, &mut details, problems);
    }

    let section = scan.regions[raw.region].heading.clone();
    let context = context.of(raw.region);
    let key = sha256_hex(
        format!(
            "{}\n{}",
            normalize(section.as_deref().unwrap_or("")),
            normalize(&title)
        )
        .as_bytes(),
    );
    Item {
        line,
        marker_offset: raw.marker_offset,
        done: raw.done,
        title,
        section,
        context,
        details,
        key,
    }
}

/// The non-blank lines of `raw` after its marker line `line`: (1-based
/// line, byte range in `text`, inside an opaque block such as a fence).
fn nested_lines(
    text: &str,
    lines: &LineIndex,
    raw: &RawItem,
    line: usize,
) -> Vec<(usize, std::ops::Range<usize>, bool)> {
    let mut nested = Vec::new();
    let mut n = line + 1;
    while n <= lines.count() && lines.starts[n - 1] < raw.range.end {
        let r = lines.range(n);
        if !text[r.clone()].trim().is_empty() {
            let opaque = raw
                .opaque
                .iter()
                .any(|o| o.start <= r.start && r.start < o.end);
            nested.push((n, r, opaque));
        }
        n += 1;
    }
    nested
}

/// Display columns of a line's leading white space ([`columns`]).
fn indent_of(line: &str) -> usize {
    columns(&line[..line.len() - line.trim_start().len()])
}

/// True when the whole title is one GFM strikethrough (`~~old idea~~`).
fn struck_through(title: &str) -> bool {
    title.len() > 4
        && title.starts_with("~~")
        && title.ends_with("~~")
        && !title[2..title.len() - 2].contains("~~")
}

/// Display columns of a line prefix, tabs to the next multiple of 4 (CommonMark).
fn columns(prefix: &str) -> usize {
    prefix.chars().fold(0, |col, c| {
        if c == '\t' {
            col + 4 - col % 4
        } else {
            col + 1
        }
    })
}

/// Removes up to `indent` columns of leading spaces/tabs.
fn strip_indent(line: &str, indent: usize) -> &str {
    let mut col = 0;
    for (i, c) in line.char_indices() {
        if col >= indent {
            return &line[i..];
        }
        match c {
            ' ' => col += 1,
            '\t' => col += 4 - col % 4,
            _ => return &line[i..],
        }
    }
    ""
}

/// The text of a line after its indentation and one list marker (`-`, `*`,
/// `+`, `1.`, `1)` followed by a space or tab, or alone on the line), and
/// whether there was a marker.
fn strip_bullet(line: &str) -> (&str, bool) {
    let s = line.trim_start();
    let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let marker = match s.as_bytes().first() {
        Some(b'-' | b'*' | b'+') => 1,
        _ if (1..=9).contains(&digits) && matches!(s.as_bytes().get(digits), Some(b'.' | b')')) => {
            digits + 1
        }
        _ => 0,
    };
    if marker == 0 {
        return (s, false);
    }
    match s[marker..].chars().next() {
        None => ("", true),
        Some(' ' | '\t') => (s[marker..].trim_start(), true),
        Some(_) => (s, false),
    }
}

/// Classifies one non-blank nested line into `details`, recording problems.
fn read_detail(
    path: &Path,
    line: usize,
    verbatim: &str,
    indent: usize,
    opaque: bool,
    details: &mut Details,
    problems: &mut Vec<Problem>,
) {
    let mut problem = |message: String| {
        problems.push(Problem {
            path: path.to_path_buf(),
            line,
            message,
        });
    };
    // `-    rounds: 2` is a valid list item too (up to 4 spaces after the marker).
    let (body, _) = strip_bullet(verbatim);
    let keyword = if opaque {
        None
    } else {
        keyword(body.trim_end())
    };
    let kind = match keyword {
        None => {
            if !opaque && let Some(message) = note_problem(body.trim_end()) {
                problem(message);
            }
            details
                .notes
                .push(strip_indent(verbatim, indent).trim_end().to_string());
            DetailKind::Note
        }
        Some((kind, value)) => {
            read_keyword(kind, value, line, details, &mut problem);
            kind
        }
    };
    details.lines.push(DetailLine {
        line,
        text: verbatim.to_string(),
        relative: strip_indent(verbatim, indent).to_string(),
        kind,
    });
}

/// Why a line read as a note (`body`, its bullet stripped) is likely a
/// mistake: `round: 2` or `acceptance: …` would silently become a note, and
/// the limit or condition it meant would not hold; so would a keyword
/// inside markup (`` `verify: make` ``, `**accept: x`).
fn note_problem(body: &str) -> Option<String> {
    if let Some((typed, meant)) = near_keyword(body) {
        return Some(format!(
            "`{typed}:` is not a detail keyword — did you mean `{meant}:`? (to keep it as a note, drop the colon)"
        ));
    }
    unread_keyword(body).map(|word| {
        format!(
            "`{word}:` is written inside markup nightshift does not read ({body:?}) — write it plain at the start of the line, e.g. `{word}: …` (to keep it as a note, drop the colon)"
        )
    })
}

/// Records the value of one keyword line (`kind`, its trimmed `value`, at
/// `line`) in `details`; a malformed value goes to `problem` instead.
fn read_keyword(
    kind: DetailKind,
    value: &str,
    line: usize,
    details: &mut Details,
    problem: &mut dyn FnMut(String),
) {
    match kind {
        DetailKind::Accept if value.is_empty() => {
            problem("empty `accept:` — write the condition after the colon".to_string())
        }
        DetailKind::Accept => details.accept.push(value.to_string()),
        DetailKind::Question if value.is_empty() => problem(
            "empty `question:` — write the question after the colon, or delete the line"
                .to_string(),
        ),
        DetailKind::Question => details.questions.push(value.to_string()),
        DetailKind::Verify => match verify_command(value) {
            Ok(cmd) => details.verify.push(cmd),
            Err(message) => problem(message),
        },
        DetailKind::Scope => read_scope(value, details, problem),
        DetailKind::Rounds => match item_rounds(value) {
            Ok(n) => {
                if let Some((_, first)) = details.rounds {
                    problem(format!(
                        "`rounds:` given again (first on line {first}) — keep one"
                    ));
                }
                details.rounds = Some((n, line));
            }
            Err(message) => problem(message),
        },
        DetailKind::Timeout => match item_timeout(value) {
            Ok(d) => {
                if let Some((_, first)) = details.timeout {
                    problem(format!(
                        "`timeout:` given again (first on line {first}) — keep one"
                    ));
                }
                details.timeout = Some((d, line));
            }
            Err(message) => problem(message),
        },
        DetailKind::MaxChangedFiles | DetailKind::MaxDiffLines => {
            let word = kind_word(kind);
            let slot = if kind == DetailKind::MaxChangedFiles {
                &mut details.max_changed_files
            } else {
                &mut details.max_diff_lines
            };
            match item_count(word, value) {
                Ok(n) => {
                    if let Some((_, first)) = *slot {
                        problem(format!(
                            "`{word}:` given again (first on line {first}) — keep one"
                        ));
                    }
                    *slot = Some((n, line));
                }
                Err(message) => problem(message),
            }
        }
        // keyword() yields only the keywords of KEYWORDS.
        DetailKind::Note => {}
    }
}

/// The globs of a `scope:` value, each checked to compile.
fn read_scope(value: &str, details: &mut Details, problem: &mut dyn FnMut(String)) {
    match scope_globs(value) {
        Err(message) => problem(message),
        Ok(globs) if globs.is_empty() => problem(
            "empty `scope:` — write the paths the writer may change, e.g. `scope: src/**`"
                .to_string(),
        ),
        Ok(globs) => {
            for glob in globs {
                match globset::Glob::new(&glob) {
                    Ok(_) => details.scope.push(glob),
                    Err(err) => problem(format!(
                        "bad glob `{glob}` in `scope:`: {} — fix the pattern",
                        err.kind()
                    )),
                }
            }
        }
    }
}

/// The eight detail keywords of docs/backlog.md#details and their kinds.
const KEYWORDS: [(&str, DetailKind); 8] = [
    ("accept", DetailKind::Accept),
    ("verify", DetailKind::Verify),
    ("scope", DetailKind::Scope),
    ("question", DetailKind::Question),
    ("rounds", DetailKind::Rounds),
    ("timeout", DetailKind::Timeout),
    ("max_changed_files", DetailKind::MaxChangedFiles),
    ("max_diff_lines", DetailKind::MaxDiffLines),
];

/// Splits `keyword: value` for the detail keywords (ASCII case-insensitive,
/// `:` or full-width `：`, optionally wrapped in emphasis: `**accept:** x`,
/// `**accept**: x`, `_accept_: x`, or the whole line `**accept: x**`).
/// Returns the kind and the trimmed value.
fn keyword(body: &str) -> Option<(DetailKind, &str)> {
    labelled_keyword(body).or_else(|| {
        // The whole line in emphasis: the label rule does not see the close.
        ["**", "__", "*", "_"].iter().find_map(|&delim| {
            let inner = body.strip_prefix(delim)?.strip_suffix(delim)?;
            if inner.starts_with(['*', '_']) || inner.ends_with(['*', '_']) {
                return None;
            }
            labelled_keyword(inner).filter(|(_, value)| !value.is_empty())
        })
    })
}

/// A keyword line whose keyword is ordinary text or a label in emphasis.
fn labelled_keyword(body: &str) -> Option<(DetailKind, &str)> {
    let colon = |s: &str| -> Option<usize> {
        s.strip_prefix(':')
            .or_else(|| s.strip_prefix('：'))
            .map(|rest| s.len() - rest.len())
    };
    // Longest delimiter first: `**` before `*`.
    ["**", "__", "*", "_", ""].iter().find_map(|&delim| {
        let inner = body.strip_prefix(delim)?;
        KEYWORDS.iter().find_map(|&(word, kind)| {
            let head = inner.get(..word.len())?;
            if !head.eq_ignore_ascii_case(word) {
                return None;
            }
            let rest = inner[word.len()..].trim_start_matches([' ', '\t']);
            let value = if delim.is_empty() {
                &rest[colon(rest)?..]
            } else if let Some(after) = rest.strip_prefix(delim) {
                // **accept**: value
                let after = after.trim_start_matches([' ', '\t']);
                &after[colon(after)?..]
            } else {
                // **accept:** value
                rest[colon(rest)?..].strip_prefix(delim)?
            };
            Some((kind, value.trim()))
        })
    })
}

/// A `word:` line whose word is a near miss of a detail keyword (one edit
/// away, or two for the long ones, same first letter; or the keyword with a
/// suffix such as `acceptance`, `verification`, `questions`): the word as
/// typed and the keyword meant. Prose (several words before the colon) and
/// real keywords are `None`.
fn near_keyword(body: &str) -> Option<(String, &'static str)> {
    let body = body.trim_start_matches(['*', '_']);
    let colon = body.find([':', '：'])?;
    let typed = body[..colon].trim_end_matches(['*', '_', ' ', '\t']);
    if typed.is_empty()
        || typed.len() > 20
        || !typed
            .chars()
            .all(|c| c.is_ascii_alphabetic() || c == '_' || c == '-')
    {
        return None;
    }
    let lower = typed.to_ascii_lowercase();
    if KEYWORDS.iter().any(|(w, _)| *w == lower) {
        return None;
    }
    // Whole words people write for these keywords.
    const ALIASES: [(&str, &str); 10] = [
        ("acceptance", "accept"),
        ("accepts", "accept"),
        ("verification", "verify"),
        ("verifies", "verify"),
        ("questions", "question"),
        ("round", "rounds"),
        ("time-out", "timeout"),
        ("time_out", "timeout"),
        ("max_files", "max_changed_files"),
        ("max_lines", "max_diff_lines"),
    ];
    if let Some((_, meant)) = ALIASES.iter().find(|(a, _)| *a == lower) {
        return Some((typed.to_string(), meant));
    }
    KEYWORDS
        .iter()
        .map(|(w, _)| w)
        .filter(|w| w.as_bytes()[0] == lower.as_bytes()[0])
        .map(|w| (strsim::damerau_levenshtein(&lower, w), *w))
        .filter(|(d, w)| *d >= 1 && *d <= if w.len() >= 7 { 2 } else { 1 })
        .min()
        .map(|(_, w)| (typed.to_string(), w))
}

/// The keyword of a line that starts with one and its colon behind markup
/// [`keyword`] does not read: a code span (`` `verify: make` ``,
/// `` `scope:` src/** ``) or unbalanced emphasis (`**accept: x`).
fn unread_keyword(body: &str) -> Option<&'static str> {
    let inner = body.trim_start_matches(['*', '_', '`']);
    if inner.len() == body.len() {
        return None;
    }
    let (word, _) = KEYWORDS.iter().find(|(word, _)| {
        inner
            .get(..word.len())
            .is_some_and(|head| head.eq_ignore_ascii_case(word))
    })?;
    let rest = inner[word.len()..].trim_start_matches(['*', '_', '`', ' ', '\t']);
    (rest.starts_with(':') || rest.starts_with('：')).then_some(*word)
}

/// The command of a `verify:` value: the inside of a code span if it starts
/// with backticks, else the whole value.
fn verify_command(value: &str) -> Result<String, String> {
    let ticks = value.len() - value.trim_start_matches('`').len();
    if ticks == 0 {
        if value.is_empty() {
            return Err(
                "empty `verify:` — write the command after the colon, e.g. verify: `cargo test`"
                    .to_string(),
            );
        }
        if let Some(bare) = value.strip_prefix("$ ") {
            return Err(format!(
                "shell prompt `$ ` before the command in `verify:` — write verify: `{}`",
                bare.trim_start()
            ));
        }
        if value.contains('`') {
            // `run `make check` first` would reach `sh -c` as a command substitution.
            return Err(format!(
                "prose around the command in `verify:` ({value:?}) — write the command alone, in backticks: verify: `CMD`"
            ));
        }
        return Ok(value.to_string());
    }
    let fence = &value[..ticks];
    let inner_and_rest = &value[ticks..];
    let Some(close) = inner_and_rest.find(fence) else {
        return Err(format!(
            "unclosed {fence} in `verify:` — write verify: `CMD`"
        ));
    };
    let command = inner_and_rest[..close].trim();
    let after = inner_and_rest[close + ticks..].trim();
    if command.is_empty() {
        return Err("empty `verify:` — write the command between the backticks".to_string());
    }
    if let Some(bare) = command.strip_prefix("$ ") {
        // Copied from a terminal or a README: `sh -c` would run `$`.
        return Err(format!(
            "shell prompt `$ ` before the command in `verify:` — write verify: `{}`",
            bare.trim_start()
        ));
    }
    if !after.is_empty() {
        return Err(format!(
            "text after the command in `verify:` ({after:?}) — one command per `verify:` line, in backticks"
        ));
    }
    Ok(command.to_string())
}

/// Separators between globs on one `scope:` line.
fn is_scope_separator(c: char) -> bool {
    matches!(c, ',' | '，' | '、' | ';' | '；') || c.is_whitespace()
}

/// Globs of a `scope:` value, split on separators. When the line holds
/// backticks, each code span is one or more globs, and a word outside them
/// must look like a path (hold `/`, `.`, `*`, `?`, `[` or `{`): there the
/// writer is clearly quoting paths, so `scope: \`src/**\` only the parser`
/// is prose that would turn into globs no change could satisfy.
fn scope_globs(value: &str) -> Result<Vec<String>, String> {
    let globs = scope_words(value)?;
    // Scope globs match paths inside the checkout: an absolute or `..` glob
    // matches nothing, and reads as a promise nightshift cannot keep.
    if let Some(g) = globs
        .iter()
        .find(|g| g.starts_with('/') || g.split('/').any(|part| part == ".."))
    {
        return Err(format!(
            "scope {g:?} leaves the repository — scope globs are paths inside it, e.g. `src/**`"
        ));
    }
    Ok(globs)
}

fn scope_words(value: &str) -> Result<Vec<String>, String> {
    let words = |s: &str| -> Vec<String> {
        s.split(is_scope_separator)
            .filter(|g| !g.is_empty())
            .map(str::to_string)
            .collect()
    };
    if !value.contains('`') {
        return Ok(words(value));
    }
    let mut globs = Vec::new();
    let mut rest = value;
    loop {
        let open = rest.find('`').unwrap_or(rest.len());
        let prose: Vec<String> = words(&rest[..open])
            .into_iter()
            .filter(|w| !w.contains(['/', '.', '*', '?', '[', '{']))
            .collect();
        if !prose.is_empty() {
            return Err(format!(
                "prose in `scope:` ({:?}) — list only paths: each in backticks, separated by commas or spaces",
                prose.join(" ")
            ));
        }
        globs.extend(words(&rest[..open]));
        if open == rest.len() {
            return Ok(globs);
        }
        let after = &rest[open..];
        let ticks = after.len() - after.trim_start_matches('`').len();
        let fence = &after[..ticks];
        let inner = &after[ticks..];
        let Some(close) = inner.find(fence) else {
            return Err(format!(
                "unclosed {fence} in `scope:` — write scope: `GLOB`, `GLOB`"
            ));
        };
        globs.extend(words(&inner[..close]));
        rest = &inner[close + ticks..];
    }
}

/// Full-width ASCII variants (`３`, `ｍ`, IME full-width mode) and the
/// ideographic space to their ASCII forms.
fn narrow(value: &str) -> String {
    value
        .chars()
        .map(|c| match c {
            '\u{FF01}'..='\u{FF5E}' => char::from_u32(c as u32 - 0xFEE0).unwrap_or(c),
            '\u{3000}' => ' ',
            c => c,
        })
        .collect()
}

/// Whether `c` shows nothing on its own: white space, a Unicode format
/// character (category Cf: zero-width space and joiners, bidi marks, the BOM,
/// soft hyphen, tags), a variation selector or combining grapheme joiner, or a
/// blank filler (Hangul fillers, braille blank). Such a title is no title.
fn is_invisible(c: char) -> bool {
    c.is_whitespace()
        || matches!(c,
            '\u{00AD}' | '\u{034F}' | '\u{061C}' | '\u{115F}' | '\u{1160}' | '\u{17B4}' | '\u{17B5}'
            | '\u{180B}'..='\u{180F}' | '\u{200B}'..='\u{200F}' | '\u{202A}'..='\u{202E}'
            | '\u{2060}'..='\u{206F}' | '\u{2800}' | '\u{3164}' | '\u{FE00}'..='\u{FE0F}'
            | '\u{FEFF}' | '\u{FFA0}' | '\u{FFF9}'..='\u{FFFB}' | '\u{1BCA0}'..='\u{1BCA3}'
            | '\u{1D173}'..='\u{1D17A}' | '\u{E0000}'..='\u{E0FFF}')
}

/// The value of `rounds:`: a whole number of at least 1.
fn item_rounds(value: &str) -> Result<u32, String> {
    let narrowed = narrow(value);
    let digits = narrowed.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`rounds: {value}` is not a whole number — write e.g. `rounds: 2`"
        ));
    }
    match digits.parse::<u32>() {
        Ok(0) => Err(format!(
            "`rounds: {value}`: an item needs at least 1 round — write e.g. `rounds: 2`, or delete the line to use the policy's limit"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`rounds: {value}` is far above any policy cap — write e.g. `rounds: 2`"
        )),
    }
}

/// The value of `max_changed_files:` or `max_diff_lines:` (`word`): a whole
/// number of at least 1 (full-width digits accepted).
fn item_count(word: &str, value: &str) -> Result<u64, String> {
    let narrowed = narrow(value);
    let digits = narrowed.trim();
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!(
            "`{word}: {value}` is not a whole number — write e.g. `{word}: 20`"
        ));
    }
    match digits.parse::<u64>() {
        Ok(0) => Err(format!(
            "`{word}: {value}`: a change touches at least 1 — write e.g. `{word}: 20`, or delete the line to use the policy's limit"
        )),
        Ok(n) => Ok(n),
        Err(_) => Err(format!(
            "`{word}: {value}` is far above any policy cap — write e.g. `{word}: 20`"
        )),
    }
}

/// The value of `timeout:`: the one duration grammar of [`crate::duration`]
/// (see [`Details::timeout`]).
fn item_timeout(value: &str) -> Result<Duration, String> {
    use crate::duration::DurationError as E;
    let example = "write e.g. `timeout: 45m`, `2h`, `90s` or `1h30m`";
    crate::duration::parse(value).map_err(|e| match e {
        E::Empty => format!("empty `timeout:` — {example}"),
        E::NoUnit { number, .. } => format!(
            "`timeout: {value}` has no unit — write `timeout: {number}m` for minutes, `{number}s` for seconds"
        ),
        E::Zero { .. } => format!(
            "`timeout: {value}` must be longer than zero — {example}, or delete the line to use the policy's limit"
        ),
        E::TooLong { .. } => {
            format!("`timeout: {value}` is longer than a year — {example}")
        }
        E::Malformed { .. } | E::Fractional { .. } => {
            format!("`timeout: {value}` is not a duration — {example}")
        }
    })
}

/// Lines of a top-level block quote without their `>` marker (up to 3 spaces,
/// `>`, one optional space or tab). Lazy continuation lines are kept as they are.
fn quote_lines(text: &str, lines: &LineIndex, range: &Range<usize>) -> Vec<String> {
    let (first, last) = lines.span(range);
    (first..=last)
        .map(|n| {
            let line = &text[lines.range(n)];
            let unindented = line.trim_start_matches(' ');
            let content = if line.len() - unindented.len() <= 3 {
                unindented.strip_prefix('>').map_or(line, |after| {
                    after.strip_prefix([' ', '\t']).unwrap_or(after)
                })
            } else {
                line
            };
            content.trim_end().to_string()
        })
        .collect()
}

/// Two open items with the same key would share one branch, one PR and one
/// ledger row; done items never run, so only open duplicates are problems.
/// Items without a title are already a problem of their own.
fn report_duplicate_keys(path: &Path, items: &[Item], problems: &mut Vec<Problem>) {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for item in items.iter().filter(|i| !i.done && !i.title.is_empty()) {
        if let Some(first) = seen.insert(&item.key, item.line) {
            problems.push(Problem {
                path: path.to_path_buf(),
                line: item.line,
                message: format!(
                    "same `##` section and title as the open item on line {first} — reword one title (the key is the `##` heading plus the title, whitespace aside; `###` headings do not count)"
                ),
            });
            seen.insert(&item.key, first);
        }
    }
}

// ---- what would not be read ---------------------------------------------------

/// A front matter block at the top of the file (after any BOM).
struct FrontMatter {
    /// 1-based lines of the opening and the closing delimiter.
    first: usize,
    last: usize,
    /// Byte offset just after the closing delimiter's line ending.
    end: usize,
}

/// YAML (`---` … `---` or `...`) or TOML (`+++` … `+++`) front matter, as
/// Jekyll, Hugo and GitHub's renderer take it: the opening delimiter alone on
/// the first line, a non-blank line after it (else it is a thematic break),
/// and a closing delimiter somewhere below.
fn front_matter(text: &str, lines: &LineIndex, bom: usize) -> Option<FrontMatter> {
    let opening = text[bom..lines.range(1).end].trim_end();
    let closings: &[&str] = match opening {
        "---" => &["---", "..."],
        "+++" => &["+++"],
        _ => return None,
    };
    if lines.count() < 3 || text[lines.range(2)].trim().is_empty() {
        return None;
    }
    let last =
        (3..=lines.count()).find(|&n| closings.contains(&text[lines.range(n)].trim_end()))?;
    Some(FrontMatter {
        first: 1,
        last,
        end: lines.starts.get(last).copied().unwrap_or(text.len()),
    })
}

/// Front matter is not read: an open task box in it is an item lost, a
/// detail keyword in it a setting that does nothing.
fn check_front_matter(
    text: &str,
    lines: &LineIndex,
    front: &FrontMatter,
    problem: &mut impl FnMut(usize, String),
) {
    let span = format!("lines {}–{}", front.first, front.last);
    for n in front.first + 1..front.last {
        let line = &text[lines.range(n)];
        let (body, bullet) = strip_bullet(line);
        if bullet && open_box(body) {
            problem(
                n,
                format!(
                    "task item inside the front matter ({span}, between the `---` lines) is not read — move it below the closing `---`, or delete the opening `---` if it is meant as a rule"
                ),
            );
        } else if let Some((kind, _)) = keyword(line.trim()) {
            problem(
                n,
                format!(
                    "`{}:` in the front matter ({span}) is not read — nest it under the item it belongs to, or set it in .nightshift/config.toml",
                    kind_word(kind)
                ),
            );
        }
    }
}

/// True when `body` starts with a task box `[ ]`, `[x]` or `[X]` that a
/// renderer would take for one (followed by whitespace or the end).
fn open_box(body: &str) -> bool {
    matches!(body.get(..3), Some("[ ]" | "[\t]"))
        && body[3..].chars().next().is_none_or(char::is_whitespace)
}

/// The keyword as written in the backlog.
fn kind_word(kind: DetailKind) -> &'static str {
    match kind {
        DetailKind::Accept => "accept",
        DetailKind::Verify => "verify",
        DetailKind::Scope => "scope",
        DetailKind::Question => "question",
        DetailKind::Rounds => "rounds",
        DetailKind::Timeout => "timeout",
        DetailKind::MaxChangedFiles => "max_changed_files",
        DetailKind::MaxDiffLines => "max_diff_lines",
        DetailKind::Note => "note",
    }
}

/// Skip states: marks of Obsidian Tasks and bullet journals that can only
/// mean "do not run this" (cancelled, in progress, deferred, scheduled).
const SKIP_STATES: [char; 5] = ['-', '/', '~', '>', '<'];

/// Marks that can only mean "done" (a check mark, `v`, a spaced or full-width x).
fn done_like(inner: &str) -> bool {
    matches!(
        inner.trim(),
        "x" | "X" | "v" | "V" | "ｘ" | "Ｘ" | "✓" | "✔" | "✅" | "☑" | "✗" | "✘" | "☒" | "❌"
    )
}

/// Why a line that starts like a task box is not read as an open item, if it
/// might have been meant as one. `body` is the line after its indentation and
/// list marker; `bullet` says whether there was a marker.
fn stray_box(body: &str, bullet: bool) -> Option<String> {
    let after_open = body.strip_prefix('[')?;
    // A box is short: `[ ]`, `[]`, `[　]`, `[!]`; links and references are not boxes.
    let close = after_open
        .char_indices()
        .take(4)
        .find(|&(_, c)| c == ']')?
        .0;
    let inner = &after_open[..close];
    let after = &after_open[close + 1..];
    if matches!(after.chars().next(), Some('(' | '[' | ':')) || inner.contains('[') {
        return None;
    }
    let fix = "write `- [ ] title` for an open item";
    if inner == " " {
        return match (bullet, after.chars().next()) {
            // A list marker and a box, yet no task item: the line continues a
            // paragraph (an ordered list interrupts one only from `1.`).
            (true, None | Some(' ' | '\t')) => Some(format!(
                "this line continues the paragraph above it, so it is not a task item — leave a blank line before it; {fix}"
            )),
            (false, next) if next.is_none_or(char::is_whitespace) => Some(format!(
                "`[ ]` without a list marker is not a task item — {fix}"
            )),
            (true, Some(c)) if c.is_whitespace() => Some(format!(
                "the box is followed by U+{:04X}, not an ASCII space, so this is not a task item — {fix}",
                c as u32
            )),
            (true, Some(_)) => Some(format!(
                "no space after the box, so this is not a task item — {fix}"
            )),
            (false, _) => None,
        };
    }
    if inner.chars().all(char::is_whitespace) {
        let shown: Vec<String> = inner
            .chars()
            .map(|c| format!("U+{:04X}", c as u32))
            .collect();
        let what = if inner.is_empty() {
            "empty brackets `[]` are".to_string()
        } else {
            format!("`[{inner}]` (brackets around {}) is", shown.join(" "))
        };
        return bullet.then(|| {
            format!("{what} not a task box — the box is `[ ]` with one ASCII space; {fix}")
        });
    }
    let mut chars = inner.chars();
    let (Some(c), None) = (chars.next(), chars.next()) else {
        return None;
    };
    if !bullet || SKIP_STATES.contains(&c) || done_like(inner) || c.is_alphanumeric() {
        return None;
    }
    Some(format!(
        "`[{c}]` is not a task state nightshift knows, so this line is not an item — write `[ ]` to run it, `[x]` when done, or `[-]` (cancelled), `[/]` (in progress), `[>]` (deferred), `[~]` to keep it out of the run"
    ))
}

/// Why `line` (a whole line, indentation included) looks like an open item
/// that markdown does not read as one, if it does: a box that is no task box,
/// a list marker glued to the box, or a marker typed in typographic or
/// full-width characters.
fn lost_box(line: &str) -> Option<String> {
    let (body, bullet) = strip_bullet(line);
    let s = line.trim_start();
    let gap = &s[..s.len() - body.len()];
    let gap = gap.trim_start_matches(|c: char| !c.is_whitespace());
    if bullet && open_box(body) && columns(gap) >= 5 {
        // CommonMark: five or more spaces after the marker start indented
        // code inside the list item.
        return Some(format!(
            "{} spaces after the list marker make the rest of the line code, not a task item — write `- [ ] title` with one space",
            columns(gap)
        ));
    }
    stray_box(body, bullet)
        .or_else(|| glued_box(line))
        .or_else(|| typographic_box(line))
}

/// An open box glued to its list marker (`-[ ] x`, `*[ ]`, `1.[ ]`): no list
/// item without a space after the marker, so no task item either.
fn glued_box(line: &str) -> Option<String> {
    let s = line.trim_start();
    let digits = s.len() - s.trim_start_matches(|c: char| c.is_ascii_digit()).len();
    let marker = match s.as_bytes().first() {
        Some(b'-' | b'*' | b'+') => 1,
        _ if (1..=9).contains(&digits) && matches!(s.as_bytes().get(digits), Some(b'.' | b')')) => {
            digits + 1
        }
        _ => return None,
    };
    let rest = &s[marker..];
    if !open_box(rest) {
        return None;
    }
    Some(format!(
        "no space between the list marker and the box (`{}`), so this is not a task item — write `{} [ ] title`",
        &s[..marker + 3],
        &s[..marker]
    ))
}

/// Bullets that word processors, note apps and CJK input methods put where
/// markdown needs `-`, `*` or `+`.
const TYPOGRAPHIC_BULLETS: [char; 13] = [
    '•', '·', '・', '‧', '∙', '◦', '▪', '●', '○', '–', '—', '‐', '‑',
];

/// An open box written with full-width or typographic characters
/// (`• [ ]`, `－ [ ]`, `- ［ ］`, `１. [ ]`): markdown reads no task item there.
fn typographic_box(line: &str) -> Option<String> {
    let content = line.trim_start();
    let ascii: String = narrow(content)
        .chars()
        .enumerate()
        .map(|(i, c)| {
            if i == 0 && TYPOGRAPHIC_BULLETS.contains(&c) {
                '-'
            } else {
                c
            }
        })
        .collect();
    if ascii == content {
        return None;
    }
    let (body, bullet) = strip_bullet(&ascii);
    let inner = body.strip_prefix('[')?.split(']').next()?;
    if !bullet || inner.chars().count() > 3 || !inner.chars().all(char::is_whitespace) {
        return None;
    }
    // Show the marker as written: as many characters as the ASCII form used.
    let used = ascii.chars().count() - body.chars().count() + inner.chars().count() + 2;
    let shown: String = content.chars().take(used).collect();
    Some(format!(
        "`{}` is written with full-width or typographic characters, so markdown reads no task item here — write `- [ ] title` in ASCII",
        shown.trim_end()
    ))
}

/// Checks every line not owned by an item nor inside code, HTML, a block
/// quote or a heading: a detail keyword there belongs to no item (a
/// `question:` there would not block anything), and a box there might be an
/// open item that is not read. Both are problems: nothing is lost silently.
fn check_stray_lines(
    text: &str,
    lines: &LineIndex,
    base: usize,
    scan: &Scan,
    problem: &mut impl FnMut(usize, String),
) {
    let mut claimed: Vec<&Range<usize>> = scan.claimed.iter().collect();
    claimed.sort_by_key(|r| r.start);
    let mut next = 0;
    let mut covered_to = 0;
    for n in lines.line_of(base)..=lines.count() {
        let r = lines.range(n);
        if r.start < base {
            continue;
        }
        let line = &text[r.clone()];
        let content = line.trim_start();
        if content.is_empty() {
            continue;
        }
        // Where the line's text starts: a nested item's range starts at its
        // marker, after the indentation.
        let at = r.start + (line.len() - content.len());
        while next < claimed.len() && claimed[next].start <= at {
            covered_to = covered_to.max(claimed[next].end);
            next += 1;
        }
        if at < covered_to {
            continue;
        }
        let (body, bullet) = strip_bullet(line);
        let after_bare_marker = n > 1 && strip_bullet(&text[lines.range(n - 1)]) == ("", true);
        if !bullet && after_bare_marker && open_box(body) {
            // `-` alone, then the box on the next line: GitHub shows a task
            // there, pulldown-cmark reads a list item without one.
            problem(
                n,
                format!(
                    "the box is on the line after its list marker (line {}), so nightshift reads no task item here — write `- [ ] title` on one line",
                    n - 1
                ),
            );
        } else if let Some(message) = lost_box(line) {
            problem(n, message);
        } else if let Some((kind, _)) = keyword(body.trim_end()) {
            problem(
                n,
                format!(
                    "`{}:` is not nested under any task item, so nothing reads it — indent it under its item as far as the item's text (2 spaces under `- `, 3 under `1. `, 4 under `10. `; a blank line before it is fine; there are no section-wide details), or reword it if it is prose",
                    kind_word(kind)
                ),
            );
        }
    }
}

/// An open task box glued into an HTML block (`<details>` and the list
/// without a blank line between) is shown as raw text, not read as an item.
/// Comments, `<pre>`, `<script>`, `<style>` and `<textarea>` are raw on
/// purpose (docs/backlog.md#items: tasks in HTML comments are not items), but only up to
/// their end marker: one never closed hides every box below it.
fn check_html_blocks(
    text: &str,
    lines: &LineIndex,
    blocks: &[Range<usize>],
    problem: &mut impl FnMut(usize, String),
) {
    for block in blocks {
        let (first, last) = lines.span(block);
        let source = &text[block.clone()];
        if let Some(close) = raw_html_end(source) {
            // Raw on purpose, but only up to its end marker: a comment never
            // closed hides every line below it, and a box after the marker
            // on its last line is shown as raw text.
            let lower = source.to_ascii_lowercase();
            // After the opener's `<` and first character: `<!-->` is a whole comment.
            let after_open = lower.len() - lower.trim_start().len() + 2;
            let closed = lower
                .get(after_open..)
                .is_some_and(|rest| rest.contains(close));
            if !closed {
                for n in first + 1..=last {
                    let (body, bullet) = strip_bullet(&text[lines.range(n)]);
                    if (bullet && open_box(body)) || glued_box(&text[lines.range(n)]).is_some() {
                        problem(
                            n,
                            format!(
                                "task item hidden by the HTML block opened on line {first}, which is never closed with `{close}` — close it before the list"
                            ),
                        );
                    }
                }
            } else {
                let end_line = &text[lines.range(last)];
                let lower = end_line.to_ascii_lowercase();
                if let Some(at) = lower.rfind(close) {
                    let (body, bullet) = strip_bullet(&end_line[at + close.len()..]);
                    if bullet && open_box(body) {
                        problem(
                            last,
                            format!(
                                "task item after `{close}` on the same line is shown as raw text, not read as an item — put it on a line of its own"
                            ),
                        );
                    }
                }
            }
            continue;
        }
        for n in first..=last {
            let (body, bullet) = strip_bullet(&text[lines.range(n)]);
            if bullet && open_box(body) {
                problem(
                    n,
                    format!(
                        "task item inside the HTML block that starts on line {first} is shown as raw text, not read as an item — leave a blank line between the HTML tag and the list"
                    ),
                );
            }
        }
    }
}

/// The end marker of an HTML block that is raw until that marker rather
/// than until a blank line (CommonMark HTML blocks 1–5): comments,
/// `<pre>`, `<script>`, `<style>`, `<textarea>`, `<?…?>`, `<![CDATA[…]]>`
/// and declarations. Markers are lowercase (compare with lowercased text).
fn raw_html_end(source: &str) -> Option<&'static str> {
    let head = source.trim_start().to_ascii_lowercase();
    if head.starts_with("<!--") {
        return Some("-->");
    }
    if head.starts_with("<![cdata[") {
        return Some("]]>");
    }
    if head.starts_with("<?") {
        return Some("?>");
    }
    if head.starts_with("<!") {
        return Some(">");
    }
    for (tag, close) in [
        ("<pre", "</pre>"),
        ("<script", "</script>"),
        ("<style", "</style>"),
        ("<textarea", "</textarea>"),
    ] {
        if let Some(after) = head.strip_prefix(tag)
            && after
                .chars()
                .next()
                .is_none_or(|c| c.is_whitespace() || c == '>')
        {
            return Some(close);
        }
    }
    None
}

/// A line without `>` right after a block quote's text continues the quote
/// (lazily): a box meant as an item there would end up as quoted context.
/// Boxes behind `>` are quoted on purpose (docs/backlog.md#items) and stay silent.
fn check_lazy_quote_lines(
    text: &str,
    lines: &LineIndex,
    quotes: &[Quote],
    problem: &mut impl FnMut(usize, String),
) {
    for q in quotes {
        let (first, last) = lines.span(&q.range);
        for n in first + 1..=last {
            let line = &text[lines.range(n)];
            let unindented = line.trim_start_matches(' ');
            if line.len() - unindented.len() <= 3 && unindented.starts_with('>') {
                continue;
            }
            if let Some(message) = lost_box(line) {
                problem(
                    n,
                    format!(
                        "{message} (markdown reads this line as more of the block quote on line {first})"
                    ),
                );
            }
        }
    }
}

/// A heading written as a task (`## [ ] Add login`, or a setext heading
/// whose text starts with a box) is a heading, not an item: nothing runs it.
fn check_headings(
    text: &str,
    lines: &LineIndex,
    headings: &[Range<usize>],
    problem: &mut impl FnMut(usize, String),
) {
    for heading in headings {
        let n = lines.line_of(heading.start);
        let line = text[lines.range(n)].trim_start();
        let content = line.trim_start_matches('#').trim_start_matches([' ', '\t']);
        if open_box(content) {
            problem(
                n,
                "a heading with a box is not a task item, so nothing runs it — write it as a list item, `- [ ] title`, with its details nested under it".to_string(),
            );
        }
    }
}

/// A code fence never closed makes the rest of the file (or of its list
/// item) code: the open boxes below it are items lost. A closed fence is an
/// example on purpose (docs/backlog.md#items: tasks in code are not items).
fn check_unclosed_fences(
    text: &str,
    lines: &LineIndex,
    fences: &[Range<usize>],
    problem: &mut impl FnMut(usize, String),
) {
    for fence in fences {
        let (first, last) = lines.span(fence);
        let opening = text[lines.range(first)].trim_start();
        let Some(c) = opening.chars().next().filter(|c| matches!(c, '`' | '~')) else {
            continue;
        };
        let width = opening.len() - opening.trim_start_matches(c).len();
        let closing = text[lines.range(last)].trim();
        let closed = last > first && closing.len() >= width && closing.chars().all(|x| x == c);
        if closed {
            continue;
        }
        for n in first + 1..=last {
            let (body, bullet) = strip_bullet(&text[lines.range(n)]);
            if bullet && open_box(body) {
                problem(
                    n,
                    format!(
                        "task item hidden by the code fence opened on line {first}, which is never closed, so markdown reads the lines below it as code — end the code with a line of {width} {}",
                        if c == '`' { "backticks" } else { "tildes" }
                    ),
                );
            }
        }
    }
}

/// Why [`tick_in_checkout`] did not tick.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TickError {
    /// The backlog (or a directory on its path) is a symbolic link or not a
    /// regular file in the checkout: the writer broke a rule.
    Unsafe(String),
    /// The backlog could not be read, ticked or written.
    Io(String),
}

/// Ticks the item `key` in the checkout's backlog, byte-exactly (`[ ]` →
/// `[x]`; the PR number is not known before the PR exists, so no note). A
/// backlog not on the base branch, or an item not open there (edited on the
/// base since), is left alone: the work is not lost for want of a tick.
pub fn tick_in_checkout(checkout: &Path, backlog_rel: &str, key: &str) -> Result<(), TickError> {
    let file = checkout.join(backlog_rel);
    // The writer may have swapped the backlog (or a directory on its path)
    // for a symbolic link: writing through it would edit a file outside the
    // checkout, with nightshift's rights.
    let mut at = checkout.to_path_buf();
    for part in Path::new(backlog_rel).components() {
        at.push(part);
        match std::fs::symlink_metadata(&at) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(TickError::Unsafe(format!(
                    "{} is a symbolic link in the checkout; nightshift does not tick the backlog through it",
                    at.strip_prefix(checkout).unwrap_or(&at).display()
                )));
            }
            Ok(m) if at == file && !m.is_file() => {
                return Err(TickError::Unsafe(format!(
                    "{backlog_rel} is not a regular file in the checkout"
                )));
            }
            _ => {}
        }
    }
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::warn!(
                backlog = backlog_rel,
                "tick_in_pr: the backlog is not on the base branch; nothing to tick"
            );
            return Ok(());
        }
        Err(e) => return Err(TickError::Io(format!("{}: {e}", file.display()))),
    };
    let bl = parse(Path::new(backlog_rel), &text);
    let Some(item) = bl.items.iter().find(|i| i.key == key && !i.done) else {
        return Ok(());
    };
    let new = tick(&text, item, "").map_err(|e| TickError::Io(e.to_string()))?;
    std::fs::write(&file, new).map_err(|e| TickError::Io(format!("{}: {e}", file.display())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        let secs = |s: &str| item_timeout(s).map(|d| d.as_secs());
        for (text, want) in [
            ("45m", 2700),
            ("2h", 7200),
            ("90s", 90),
            ("1h30m", 5400),
            ("1h 30m", 5400),
            ("1H30M", 5400),
            ("45 min", 2700),
            ("45mins", 2700),
            ("2 hours", 7200),
            ("1 hour 30 minutes", 5400),
            ("1d", 86_400),
            ("45分鐘", 2700),
            ("2小時", 7200),
            ("１ｈ３０ｍ", 5400),
            ("30 秒", 30),
            ("1.5h", 5400),
            ("10 minutes", 600),
        ] {
            assert_eq!(secs(text), Ok(want), "{text:?}");
        }
        for bad in [
            "",
            "45",
            "m",
            "4 5m",
            "1x",
            "0m",
            "99999999999999999999h",
            "-1h",
            "abc",
            "45 furlongs",
            "m45",
        ] {
            assert!(item_timeout(bad).is_err(), "{bad:?} should be refused");
        }
        assert!(item_timeout("90").unwrap_err().contains("`timeout: 90m`"));
    }

    #[test]
    fn rounds() {
        assert_eq!(item_rounds("3"), Ok(3));
        assert_eq!(item_rounds("３"), Ok(3));
        assert_eq!(item_rounds("007"), Ok(7));
        for bad in [
            "",
            "0",
            "three",
            "+3",
            "-1",
            "2 rounds",
            "1.5",
            "99999999999",
        ] {
            assert!(item_rounds(bad).is_err(), "{bad:?} should be refused");
        }
    }

    #[test]
    fn keywords() {
        assert_eq!(
            keyword("accept: it works"),
            Some((DetailKind::Accept, "it works"))
        );
        assert_eq!(keyword("Accept : x"), Some((DetailKind::Accept, "x")));
        assert_eq!(
            keyword("scope：src/**"),
            Some((DetailKind::Scope, "src/**"))
        );
        assert_eq!(keyword("accepted: no"), None);
        assert_eq!(keyword("timeout"), None);
        assert_eq!(keyword("note: rounds: 2"), None);
        for bold in [
            "**accept:** x",
            "**Accept**: x",
            "__accept__ : x",
            "*accept:* x",
            "_accept_: x",
            "**accept**：x",
        ] {
            assert_eq!(keyword(bold), Some((DetailKind::Accept, "x")), "{bold:?}");
        }
        // Emphasis must close around the keyword or its colon.
        assert_eq!(keyword("**accept: x"), None);
        assert_eq!(keyword("**accepted**: x"), None);
    }

    #[test]
    fn change_limits_are_detail_lines() {
        let b = parse(
            Path::new("NEXT.md"),
            "- [ ] Add sub
  - max_changed_files: 3
  - **MAX_DIFF_LINES:** ４０
  - max-changed-files: 2
  - max_diff_lines: 0
  - max_files: 9
  - max_changed_files: 5
",
        );
        let d = &b.items[0].details;
        assert_eq!(d.max_changed_files, Some((5, 7)));
        assert_eq!(d.max_diff_lines, Some((40, 3)));
        assert_eq!(d.lines[0].kind, DetailKind::MaxChangedFiles);
        let problems: Vec<(usize, &str)> = b
            .problems
            .iter()
            .map(|p| (p.line, p.message.as_str()))
            .collect();
        assert_eq!(problems.len(), 4, "{problems:?}");
        assert!(
            problems[0].1.contains("did you mean `max_changed_files:`"),
            "{problems:?}"
        );
        assert!(
            problems[1]
                .1
                .contains("`max_diff_lines: 0`: a change touches at least 1")
        );
        assert!(problems[2].1.contains("did you mean `max_changed_files:`"));
        assert!(
            problems[3]
                .1
                .contains("`max_changed_files:` given again (first on line 2)")
        );
        assert!(item_count("max_diff_lines", "lots").is_err());
    }

    #[test]
    fn verify_values() {
        assert_eq!(verify_command("`cargo test`"), Ok("cargo test".to_string()));
        assert_eq!(verify_command("``echo `x` ``"), Ok("echo `x`".to_string()));
        assert_eq!(
            verify_command("npm test -- --ci"),
            Ok("npm test -- --ci".to_string())
        );
        assert!(verify_command("`cargo test").is_err());
        assert!(verify_command("``").is_err());
        assert!(verify_command("`a` and `b`").is_err());
        assert!(
            verify_command("`$ cargo test`")
                .unwrap_err()
                .contains("verify: `cargo test`")
        );
        assert!(
            verify_command("$ make")
                .unwrap_err()
                .contains("verify: `make`")
        );
        assert_eq!(
            verify_command("`$HOME/bin/check`"),
            Ok("$HOME/bin/check".to_string())
        );
    }

    #[test]
    fn scope_splitting() {
        assert_eq!(
            scope_globs("src/**, tests/*.rs  `docs/**`，a.md"),
            Ok(vec![
                "src/**".to_string(),
                "tests/*.rs".into(),
                "docs/**".into(),
                "a.md".into()
            ])
        );
        assert_eq!(
            scope_globs("src/a.rs、src/b.rs；docs ;c"),
            Ok(vec![
                "src/a.rs".to_string(),
                "src/b.rs".into(),
                "docs".into(),
                "c".into()
            ])
        );
        assert_eq!(scope_globs(" , ，"), Ok(vec![]));
        assert_eq!(scope_globs("` `"), Ok(vec![]));
        assert!(
            scope_globs("`src/**` only the parser")
                .unwrap_err()
                .contains("\"only the parser\"")
        );
        assert!(scope_globs("`src/**").unwrap_err().contains("unclosed"));
        assert!(
            scope_globs("/etc/**")
                .unwrap_err()
                .contains("leaves the repository")
        );
        assert!(
            scope_globs("src/**, ../**")
                .unwrap_err()
                .contains("\"../**\" leaves the repository")
        );
        assert_eq!(scope_globs("src/..rs"), Ok(vec!["src/..rs".to_string()]));
    }

    #[test]
    fn indentation() {
        assert_eq!(columns("- "), 2);
        assert_eq!(columns("-\t"), 4);
        assert_eq!(columns("10. "), 4);
        assert_eq!(strip_indent("    - x", 2), "  - x");
        assert_eq!(strip_indent("\t- x", 2), "- x");
        assert_eq!(strip_indent(" x", 4), "x");
        assert_eq!(strip_bullet("  - accept: x"), ("accept: x", true));
        assert_eq!(strip_bullet("12) accept: x"), ("accept: x", true));
        assert_eq!(strip_bullet("-accept"), ("-accept", false));
        assert_eq!(strip_bullet("1234567890. x"), ("1234567890. x", false));
        assert_eq!(strip_bullet("*"), ("", true));
        assert_eq!(strip_bullet("**accept:** x"), ("**accept:** x", false));
    }

    #[test]
    fn stray_boxes() {
        let flagged = |body: &str, bullet: bool| stray_box(body, bullet).is_some();
        for (body, bullet) in [
            ("[] x", true),
            ("[\u{3000}] x", true),
            ("[\u{a0}] x", true),
            ("[  ] x", true),
            ("[ ]\u{3000}x", true),
            ("[ ]x", true),
            ("[ ] x", false),
            ("[ ] x", true),
            ("[ ]", true),
            ("[!] x", true),
            ("[?] x", true),
            ("[*] x", true),
        ] {
            assert!(flagged(body, bullet), "{body:?} bullet={bullet}");
        }
        for (body, bullet) in [
            ("[-] cancelled", true),
            ("[/] in progress", true),
            ("[~] x", true),
            ("[>] deferred", true),
            ("[ x] done", true),
            ("[✓] done", true),
            ("[ｘ] done", true),
            ("[a] option", true),
            ("[1] reference", true),
            ("[WIP] title", true),
            ("[x](http://e.com) link", true),
            ("[1]: http://e.com", false),
            ("[!] x", false),
            ("[]", false),
            ("[ ]x", false),
            ("[ ]x", false),
            ("plain", true),
        ] {
            assert!(!flagged(body, bullet), "{body:?} bullet={bullet}");
        }
    }

    #[test]
    fn line_index_handles_lone_cr() {
        let text = "a\rbb\r\rc\r\nd\n";
        let idx = LineIndex::new(text);
        assert_eq!(idx.count(), 6);
        let lines: Vec<&str> = (1..=6).map(|n| &text[idx.range(n)]).collect();
        assert_eq!(lines, ["a", "bb", "", "c", "d", ""]);
        assert_eq!(idx.line_of(1), 1);
        assert_eq!(idx.line_of(2), 2);
        assert_eq!(idx.line_of(8), 4);
    }

    #[test]
    fn line_index_handles_crlf_and_missing_final_newline() {
        let text = "a\r\nbb\nccc";
        let idx = LineIndex::new(text);
        assert_eq!(idx.count(), 3);
        assert_eq!(&text[idx.range(1)], "a");
        assert_eq!(&text[idx.range(2)], "bb");
        assert_eq!(&text[idx.range(3)], "ccc");
        assert_eq!(idx.line_of(0), 1);
        assert_eq!(idx.line_of(3), 2);
        assert_eq!(idx.line_of(7), 3);
    }
}
