//! The backlog: reading `NEXT.md` into items (SPEC §3), and the one edit
//! nightshift ever makes to it, the byte-exact tick used by `nightshift sync`.
//!
//! An item is a task-list item at the top level of a list; its first line is
//! the title, the lines nested under it are its details (`accept:`, `verify:`,
//! `scope:`, `question:`, `rounds:`, `timeout:`, anything else is a note).
//! Block quotes in the document preamble and in the item's `##` section are
//! its context. Parsing never fails: malformed detail lines become
//! [`Problem`]s with file:line so `plan` can list them all at once.
//!
//! This module is not the judge of limits: it exposes `rounds:`/`timeout:`
//! values with their line numbers, and the contract module checks them
//! against the policy's caps. It does not render markdown and never rewrites
//! the file except through [`tick`].

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pulldown_cmark::{Event, HeadingLevel, Options, Parser, Tag, TagEnd};

/// A parsed backlog file: the snapshot a plan is made from (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backlog {
    /// The path the text was read from, as given (used in problem messages).
    pub path: PathBuf,
    /// Lowercase hex SHA-256 (64 chars) of the file's bytes, BOM included.
    pub sha256: String,
    /// Every task item, open and done, in document order.
    pub items: Vec<Item>,
    /// Every malformed detail line, in document order. Empty when the backlog is well formed.
    pub problems: Vec<Problem>,
}

/// One task-list item at the top level of a list (SPEC §3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Item {
    /// 1-based line of the task marker.
    pub line: usize,
    /// Byte offset in the file text of the 3-byte marker `[ ]` / `[x]` / `[X]`.
    pub marker_offset: usize,
    /// `true` for `[x]` and `[X]`.
    pub done: bool,
    /// The rest of the marker's line, trimmed, otherwise verbatim (markdown
    /// markup, full-width punctuation and notes like `(done: 39/70)` kept).
    pub title: String,
    /// Text of the nearest preceding `##` heading, verbatim inline source
    /// (closing `#`s and setext underline removed); `None` before the first one.
    pub section: Option<String>,
    /// Block-quote lines without their `> ` prefix: the document preamble's
    /// (before the first `##`) first, then those anywhere in the item's `##` section.
    pub context: Vec<String>,
    /// The lines nested under the item, classified.
    pub details: Details,
    /// Lowercase hex SHA-256 of `normalize(section or "") + "\n" + normalize(title)`,
    /// where normalize joins the whitespace-separated words with one space.
    /// Identifies the item across nights, config edits and crashes (SPEC §3).
    pub key: String,
}

/// The lines nested under an item, verbatim and classified (SPEC §3).
///
/// A nested line is recognised after removing its indentation and one leading
/// bullet (`- `, `* `, `+ `). Keywords are ASCII case-insensitive and take
/// `:` or the full-width `：`. Lines inside a code block or HTML block nested
/// in the item are always notes.
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
    /// commas (`,` or `，`) and/or whitespace, so a glob cannot contain spaces;
    /// each may be wrapped in backticks.
    pub scope: Vec<String>,
    /// Open questions (`question:` lines); any makes the item blocked.
    pub questions: Vec<String>,
    /// `rounds: N` (N ≥ 1) and its line; the last valid one wins if repeated
    /// (a repeat is also a problem).
    pub rounds: Option<(u32, usize)>,
    /// `timeout: 45m` (units h, m, s; e.g. `2h`, `90s`, `1h30m`) and its line.
    pub timeout: Option<(Duration, usize)>,
    /// Every other nested line: the item's content indentation and trailing
    /// whitespace removed, otherwise verbatim (context for the writer).
    pub notes: Vec<String>,
}

/// One nested line of an item.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DetailLine {
    /// 1-based line number in the file.
    pub line: usize,
    /// The line exactly as in the file, without `\n` / `\r\n`.
    pub text: String,
    /// What the line was read as.
    pub kind: DetailKind,
}

/// The role of a nested line (SPEC §3 detail prefixes).
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
    /// Anything else (context for the writer).
    Note,
}

/// A malformed line of the backlog, with a fix hint (SPEC §3: `plan` stops
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
    /// The backlog file could not be read.
    #[error("cannot read backlog {}: {source}", path.display())]
    Read {
        /// The file that was being read.
        path: PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The backlog file is not UTF-8.
    #[error("backlog {} is not UTF-8 (first bad byte at offset {offset}) — save it as UTF-8", path.display())]
    NotUtf8 {
        /// The file that was being read.
        path: PathBuf,
        /// Byte offset of the first invalid byte.
        offset: usize,
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
    /// The items not yet ticked, in backlog order (the order `plan` numbers them, SPEC §2).
    pub fn open_items(&self) -> impl Iterator<Item = &Item> {
        self.items.iter().filter(|item| !item.done)
    }
}

/// Reads and parses the backlog at `path` (SPEC §3). The hash covers the
/// file's exact bytes.
///
/// # Errors
/// [`BacklogError::Read`] when the file cannot be read, [`BacklogError::NotUtf8`]
/// when it is not UTF-8. Malformed items are not errors: see [`Backlog::problems`].
pub fn read(path: &Path) -> Result<Backlog, BacklogError> {
    let bytes = std::fs::read(path).map_err(|source| BacklogError::Read {
        path: path.to_path_buf(),
        source,
    })?;
    let text = String::from_utf8(bytes).map_err(|err| BacklogError::NotUtf8 {
        path: path.to_path_buf(),
        offset: err.utf8_error().valid_up_to(),
    })?;
    Ok(parse(path, &text))
}

/// Parses backlog `text` read from `path` (the path is only used in
/// problems). Never fails; malformed detail lines are collected in
/// [`Backlog::problems`] (SPEC §3). A leading UTF-8 BOM is skipped; offsets
/// and line numbers still refer to `text` as given.
pub fn parse(path: &Path, text: &str) -> Backlog {
    // pulldown-cmark does not skip a BOM: the first line would become a paragraph.
    let base = if text.starts_with('\u{feff}') {
        '\u{feff}'.len_utf8()
    } else {
        0
    };
    let scan = scan(&text[base..], base);
    let lines = LineIndex::new(text);

    let mut problems = Vec::new();
    let mut items = Vec::with_capacity(scan.items.len());
    for raw in &scan.items {
        let item = build_item(path, text, &lines, &scan, raw, &mut problems);
        items.push(item);
    }
    report_duplicate_keys(path, &items, &mut problems);
    report_hidden_characters(path, text, &mut problems);
    problems.sort_by_key(|p| p.line);

    Backlog {
        path: path.to_path_buf(),
        sha256: sha256_hex(text.as_bytes()),
        items,
        problems,
    }
}

/// Characters that make a card lie about what is approved: NUL (a binary or
/// corrupted file; the ledger cannot store it) and the Unicode bidirectional
/// controls that reorder text on screen (CVE-2021-42574, "Trojan Source").
fn report_hidden_characters(path: &Path, text: &str, problems: &mut Vec<Problem>) {
    for (i, line) in text.lines().enumerate() {
        let bad: Vec<char> = line.chars().filter(|c| *c == '\0' || matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')).collect();
        if let Some(c) = bad.first() {
            problems.push(Problem {
                path: path.to_path_buf(),
                line: i + 1,
                message: format!("hidden character U+{:04X} ({}); remove it — it could make the card show something other than what runs", *c as u32, if *c == '\0' { "NUL: is the file binary?" } else { "a bidirectional text control" }),
            });
        }
    }
}

/// Ticks `item` in `text`: replaces its `[ ]` at `marker_offset` with `[x]`
/// and appends `note` (e.g. `" (done: #123)"`) after the title, before any
/// trailing whitespace and the line ending. Every other byte is unchanged
/// (SPEC §3, `nightshift sync`). The caller should also compare the file's
/// hash with [`Backlog::sha256`] before writing. The note becomes part of the
/// title, so the ticked item's key changes; done items never run, so nothing
/// looks them up by key again.
///
/// # Errors
/// [`BacklogError::MarkerMismatch`] when the 3 bytes at the offset are not
/// `[ ]`, [`BacklogError::TitleMismatch`] when the rest of that line is not the
/// item's title, [`BacklogError::NoteHasLineBreak`] when `note` holds `\n` or `\r`.
pub fn tick(text: &str, item: &Item, note: &str) -> Result<String, BacklogError> {
    if note.contains(['\n', '\r']) {
        return Err(BacklogError::NoteHasLineBreak {
            note: note.to_string(),
        });
    }
    let offset = item.marker_offset;
    let marker_end = offset.saturating_add(3);
    if text.as_bytes().get(offset..marker_end) != Some(b"[ ]".as_slice()) {
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
    // The marker bytes are ASCII, so marker_end is a char boundary.
    let rest = &text[marker_end..];
    let line_len = rest.find('\n').unwrap_or(rest.len());
    let line_rest = rest[..line_len]
        .strip_suffix('\r')
        .unwrap_or(&rest[..line_len]);
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

use crate::config::parse_duration;
use crate::contract::sha256_hex;

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
    /// Index into `Scan::sections`, `None` before the first `##`.
    section: Option<usize>,
    /// Code and HTML blocks nested in the item: their lines are never keywords.
    opaque: Vec<Range<usize>>,
}

/// A top-level list item while its events are being read.
struct OpenItem {
    range: Range<usize>,
    /// Offset and state of its own task marker, if it has one.
    marker: Option<(usize, bool)>,
    opaque: Vec<Range<usize>>,
}

/// A top-level block quote and the section it sits in.
struct Quote {
    range: Range<usize>,
    section: Option<usize>,
}

/// What one pass over the markdown events finds; all ranges index the full text.
struct Scan {
    items: Vec<RawItem>,
    sections: Vec<String>,
    quotes: Vec<Quote>,
}

/// Walks the markdown events once. `body` is the text after any BOM and
/// `base` its offset in the full text.
fn scan(body: &str, base: usize) -> Scan {
    let shift = |r: Range<usize>| r.start + base..r.end + base;
    let mut out = Scan {
        items: Vec::new(),
        sections: Vec::new(),
        quotes: Vec::new(),
    };
    let mut lists = 0usize;
    let mut list_items = 0usize;
    let mut quotes = 0usize;
    let mut section: Option<usize> = None;
    // The top-level item being read (only outside block quotes).
    let mut current: Option<OpenItem> = None;
    // Inline extent of the `##` heading being read.
    let mut heading: Option<Option<Range<usize>>> = None;

    for (event, range) in Parser::new_ext(body, Options::ENABLE_TASKLISTS).into_offset_iter() {
        let range = shift(range);
        if let Some(extent) = heading.as_mut() {
            match &event {
                Event::End(TagEnd::Heading(_)) => {}
                _ if range.is_empty() => {}
                _ => {
                    let r = extent.get_or_insert(range.clone());
                    r.start = r.start.min(range.start);
                    r.end = r.end.max(range.end);
                }
            }
        }
        match event {
            Event::Start(Tag::List(_)) => lists += 1,
            Event::End(TagEnd::List(_)) => lists -= 1,
            Event::Start(Tag::Item) => {
                list_items += 1;
                if list_items == 1 && lists == 1 && quotes == 0 {
                    current = Some(OpenItem {
                        range,
                        marker: None,
                        opaque: Vec::new(),
                    });
                }
            }
            // Nested task items (list_items > 1) are details of their parent.
            Event::TaskListMarker(done) if list_items == 1 => {
                if let Some(open) = current.as_mut() {
                    open.marker.get_or_insert((range.start, done));
                }
            }
            Event::End(TagEnd::Item) => {
                if list_items == 1
                    && let Some(OpenItem {
                        range,
                        marker: Some((marker_offset, done)),
                        opaque,
                    }) = current.take()
                {
                    out.items.push(RawItem {
                        range,
                        marker_offset,
                        done,
                        section,
                        opaque,
                    });
                }
                list_items -= 1;
            }
            Event::Start(Tag::CodeBlock(_)) | Event::Start(Tag::HtmlBlock) => {
                if let Some(open) = current.as_mut() {
                    open.opaque.push(range);
                }
            }
            Event::Start(Tag::BlockQuote(_)) => {
                quotes += 1;
                if quotes == 1 && lists == 0 {
                    out.quotes.push(Quote { range, section });
                }
            }
            Event::End(TagEnd::BlockQuote(_)) => quotes -= 1,
            Event::Start(Tag::Heading {
                level: HeadingLevel::H2,
                ..
            }) if lists == 0 && quotes == 0 => {
                heading = Some(None);
            }
            Event::End(TagEnd::Heading(HeadingLevel::H2)) => {
                if let Some(extent) = heading.take() {
                    let text =
                        extent.map(|r| body[r.start - base..r.end - base].trim().to_string());
                    out.sections.push(text.unwrap_or_default());
                    section = Some(out.sections.len() - 1);
                }
            }
            _ => {}
        }
    }
    out
}

/// Line starts of a text, for offset → line number and line slicing.
struct LineIndex {
    starts: Vec<usize>,
    len: usize,
}

impl LineIndex {
    fn new(text: &str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Self {
            starts,
            len: text.len(),
        }
    }

    /// 1-based line holding byte `offset`.
    fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset)
    }

    /// Byte range of 1-based `line`, without `\n` / `\r\n`.
    fn range(&self, text: &str, line: usize) -> Range<usize> {
        let start = self.starts[line - 1];
        let mut end = self.starts.get(line).map_or(self.len, |next| next - 1);
        if text[start..end].ends_with('\r') {
            end -= 1;
        }
        start..end
    }

    /// Number of lines (a final line without `\n` counts; the empty rest after a final `\n` does too).
    fn count(&self) -> usize {
        self.starts.len()
    }
}

fn build_item(
    path: &Path,
    text: &str,
    lines: &LineIndex,
    scan: &Scan,
    raw: &RawItem,
    problems: &mut Vec<Problem>,
) -> Item {
    let line = lines.line_of(raw.marker_offset);
    let marker_line = lines.range(text, line);
    let title = text[raw.marker_offset + 3..marker_line.end]
        .trim()
        .to_string();
    if title.is_empty() {
        problems.push(Problem {
            path: path.to_path_buf(),
            line,
            message: "task item without a title — write what to do after the box".to_string(),
        });
    }
    // Nested lines are indented at least as far as the text after the marker.
    let indent = columns(&text[marker_line.start..raw.marker_offset]);

    let mut details = Details::default();
    let mut n = line + 1;
    while n <= lines.count() && lines.starts[n - 1] < raw.range.end {
        let r = lines.range(text, n);
        let verbatim = &text[r.clone()];
        if !verbatim.trim().is_empty() {
            let opaque = raw
                .opaque
                .iter()
                .any(|o| o.start <= r.start && r.start < o.end);
            read_detail(path, n, verbatim, indent, opaque, &mut details, problems);
        }
        n += 1;
    }

    let section = raw.section.map(|i| scan.sections[i].clone());
    let context = scan
        .quotes
        .iter()
        .filter(|q| q.section.is_none() || (raw.section.is_some() && q.section == raw.section))
        .flat_map(|q| quote_lines(text, lines, &q.range))
        .collect();
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
    let stripped = verbatim.trim_start();
    let body = ["- ", "* ", "+ ", "-\t", "*\t", "+\t"]
        .iter()
        .find_map(|bullet| stripped.strip_prefix(bullet))
        .unwrap_or(stripped)
        // `-    rounds: 2` is a valid list item too (up to 4 spaces after the marker).
        .trim();
    let keyword = if opaque { None } else { keyword(body) };
    let kind = match keyword {
        None => {
            details
                .notes
                .push(strip_indent(verbatim, indent).trim_end().to_string());
            DetailKind::Note
        }
        Some((kind, value)) => {
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
                DetailKind::Scope => {
                    let globs = scope_globs(value);
                    if globs.is_empty() {
                        problem("empty `scope:` — write the paths the writer may change, e.g. `scope: src/**`".to_string());
                    }
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
                DetailKind::Rounds => match value.parse::<u32>() {
                    Ok(n) if n >= 1 => {
                        if let Some((_, first)) = details.rounds {
                            problem(format!(
                                "`rounds:` given again (first on line {first}) — keep one"
                            ));
                        }
                        details.rounds = Some((n, line));
                    }
                    _ => problem(format!(
                        "`rounds: {value}` is not a whole number of at least 1 — write e.g. `rounds: 2`"
                    )),
                },
                DetailKind::Timeout => match parse_duration(value) {
                    Ok(d) => {
                        if let Some((_, first)) = details.timeout {
                            problem(format!(
                                "`timeout:` given again (first on line {first}) — keep one"
                            ));
                        }
                        details.timeout = Some((d, line));
                    }
                    Err(why) => problem(format!(
                        "`timeout: {value}`: {why} — write e.g. `timeout: 45m`, `2h`, `90s` or `1h30m`"
                    )),
                },
                // keyword() yields only the six keywords above.
                DetailKind::Note => {}
            }
            kind
        }
    };
    details.lines.push(DetailLine {
        line,
        text: verbatim.to_string(),
        kind,
    });
}

/// Splits `keyword: value` for the six detail keywords (ASCII case-insensitive,
/// `:` or full-width `：`). Returns the kind and the trimmed value.
fn keyword(body: &str) -> Option<(DetailKind, &str)> {
    const KEYWORDS: [(&str, DetailKind); 6] = [
        ("accept", DetailKind::Accept),
        ("verify", DetailKind::Verify),
        ("scope", DetailKind::Scope),
        ("question", DetailKind::Question),
        ("rounds", DetailKind::Rounds),
        ("timeout", DetailKind::Timeout),
    ];
    KEYWORDS.iter().find_map(|&(word, kind)| {
        let head = body.get(..word.len())?;
        if !head.eq_ignore_ascii_case(word) {
            return None;
        }
        let rest = body[word.len()..].trim_start_matches([' ', '\t']);
        let value = rest.strip_prefix(':').or_else(|| rest.strip_prefix('：'))?;
        Some((kind, value.trim()))
    })
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
    if !after.is_empty() {
        return Err(format!(
            "text after the command in `verify:` ({after:?}) — one command per `verify:` line, in backticks"
        ));
    }
    Ok(command.to_string())
}

/// Globs of a `scope:` value: split on commas (`,` `，`) and whitespace, backticks around each removed.
fn scope_globs(value: &str) -> Vec<String> {
    value
        .split(|c: char| c == ',' || c == '，' || c.is_whitespace())
        .map(|g| g.trim_matches('`'))
        .filter(|g| !g.is_empty())
        .map(str::to_string)
        .collect()
}


/// Lines of a top-level block quote without their `>` marker (up to 3 spaces,
/// `>`, one optional space or tab). Lazy continuation lines are kept as they are.
fn quote_lines(text: &str, lines: &LineIndex, range: &Range<usize>) -> Vec<String> {
    let first = lines.line_of(range.start);
    let last = lines.line_of(range.end.saturating_sub(1).max(range.start));
    (first..=last)
        .map(|n| {
            let line = &text[lines.range(text, n)];
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
fn report_duplicate_keys(path: &Path, items: &[Item], problems: &mut Vec<Problem>) {
    let mut seen: std::collections::HashMap<&str, usize> = std::collections::HashMap::new();
    for item in items.iter().filter(|i| !i.done) {
        if let Some(first) = seen.insert(&item.key, item.line) {
            problems.push(Problem {
                path: path.to_path_buf(),
                line: item.line,
                message: format!(
                    "same section and title as the open item on line {first} — make the titles differ (the key must be unique)"
                ),
            });
            seen.insert(&item.key, first);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("45m"), Ok(Duration::from_secs(2700)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("90s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1h 30m"), Ok(Duration::from_secs(5400)));
        for bad in [
            "",
            "45",
            "m",
            "4 5m",
            "1x",
            "0m",
            "99999999999999999999h",
            "1.5h",
            "-1h",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?} should be refused");
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
    }

    #[test]
    fn scope_splitting() {
        assert_eq!(
            scope_globs("src/**, tests/*.rs  `docs/**`，a"),
            vec!["src/**", "tests/*.rs", "docs/**", "a"]
        );
        assert!(scope_globs(" , ``").is_empty());
    }

    #[test]
    fn indentation() {
        assert_eq!(columns("- "), 2);
        assert_eq!(columns("-\t"), 4);
        assert_eq!(columns("10. "), 4);
        assert_eq!(strip_indent("    - x", 2), "  - x");
        assert_eq!(strip_indent("\t- x", 2), "- x");
        assert_eq!(strip_indent(" x", 4), "x");
    }

    #[test]
    fn line_index_handles_crlf_and_missing_final_newline() {
        let text = "a\r\nbb\nccc";
        let idx = LineIndex::new(text);
        assert_eq!(idx.count(), 3);
        assert_eq!(&text[idx.range(text, 1)], "a");
        assert_eq!(&text[idx.range(text, 2)], "bb");
        assert_eq!(&text[idx.range(text, 3)], "ccc");
        assert_eq!(idx.line_of(0), 1);
        assert_eq!(idx.line_of(3), 2);
        assert_eq!(idx.line_of(7), 3);
    }
}
