//! Builds an [`Item`] from what the scan found: its title, key (`##` section
//! plus title), nested detail lines and block-quote [`Context`].
//!
//! Not for the meaning of each detail line (`details`) or problems outside items
//! (`lints`).

use super::details::{is_invisible, read_detail};
use super::hash::sha256_hex;
use super::lines::{LineIndex, columns, indent_of, quote_lines};
use super::lints::lost_box;
use super::model::{Details, Item, Problem};
use super::scan::{RawItem, Scan};
use std::path::Path;

/// normalize() of the key rule: words separated by exactly one space.
fn normalize(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// The block-quote lines of the preamble and of each region, read once: a
/// backlog with a quote under every item would otherwise re-read every quote
/// of the section for every item.
pub(super) struct Context {
    preamble: Vec<String>,
    /// Per region (index into `Scan::regions`); empty for preamble regions.
    pub(super) regions: Vec<Vec<String>>,
    /// Per region: the first line of its first quote and its context's bytes
    /// (the preamble's included), when over [`MAX_CONTEXT_BYTES`].
    pub(super) oversized: Vec<Option<(usize, usize)>>,
}

/// The most block-quote context (bytes) an item may carry. Each item's
/// contract holds its section's every quote (docs/backlog.md), so a long one would be
/// copied, hashed and stored once per item: refused above this.
pub const MAX_CONTEXT_BYTES: usize = 64 * 1024;

impl Context {
    pub(super) fn new(text: &str, lines: &LineIndex, scan: &Scan) -> Self {
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

pub(super) fn build_item(
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

/// True when the whole title is one GFM strikethrough (`~~old idea~~`).
fn struck_through(title: &str) -> bool {
    title.len() > 4
        && title.starts_with("~~")
        && title.ends_with("~~")
        && !title[2..title.len() - 2].contains("~~")
}
