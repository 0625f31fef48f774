//! What would not be read: lines that look meant for nightshift but are not
//! items or details (stray and glued boxes, keywords in front matter, HTML or
//! headings, unclosed fences, lazy quote lines), duplicate keys and hidden
//! characters, each a [`Problem`] naming its line and the fix.
//!
//! Not for reading items: a lint only reports, it never changes what is parsed.

use super::details::{keyword, kind_word, narrow};
use super::lines::{LineIndex, columns, strip_bullet};
use super::model::{Item, Problem};
use super::scan::{Quote, Scan};
use std::ops::Range;
use std::path::Path;

/// Characters that make a card lie about what is approved: NUL (a binary or
/// corrupted file; the ledger cannot store it), the other C0/C1 control
/// characters (ESC starts terminal escape sequences that can rewrite the card
/// on screen) and the Unicode bidirectional controls that reorder text on
/// screen (CVE-2021-42574, "Trojan Source"). Tab and line endings are fine.
pub(super) fn report_hidden_characters(
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

/// Two open items with the same key would share one branch, one PR and one
/// ledger row; done items never run, so only open duplicates are problems.
/// Items without a title are already a problem of their own.
pub(super) fn report_duplicate_keys(path: &Path, items: &[Item], problems: &mut Vec<Problem>) {
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
pub(super) struct FrontMatter {
    /// 1-based lines of the opening and the closing delimiter.
    pub(super) first: usize,
    last: usize,
    /// Byte offset just after the closing delimiter's line ending.
    pub(super) end: usize,
}

/// YAML (`---` … `---` or `...`) or TOML (`+++` … `+++`) front matter, as
/// Jekyll, Hugo and GitHub's renderer take it: the opening delimiter alone on
/// the first line, a non-blank line after it (else it is a thematic break),
/// and a closing delimiter somewhere below.
pub(super) fn front_matter(text: &str, lines: &LineIndex, bom: usize) -> Option<FrontMatter> {
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
pub(super) fn check_front_matter(
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
pub(super) fn stray_box(body: &str, bullet: bool) -> Option<String> {
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
pub(super) fn lost_box(line: &str) -> Option<String> {
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
pub(super) fn check_stray_lines(
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
pub(super) fn check_html_blocks(
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
pub(super) fn check_lazy_quote_lines(
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
pub(super) fn check_headings(
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
pub(super) fn check_unclosed_fences(
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
