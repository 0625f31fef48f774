//! The whole pass over a backlog: [`read`] a file, [`parse`] its text into
//! items and problems (scan, items, lints, in that order).
//!
//! Not for the pieces themselves: each has its own file beside this one.

use super::decode::decode;
use super::hash::sha256_hex;
use super::item::{Context, MAX_CONTEXT_BYTES, build_item};
use super::lines::LineIndex;
use super::lints::{
    check_front_matter, check_headings, check_html_blocks, check_lazy_quote_lines,
    check_stray_lines, check_unclosed_fences, front_matter, report_duplicate_keys,
    report_hidden_characters,
};
use super::model::{Backlog, BacklogError, Problem};
use super::scan::scan;
use std::path::Path;

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
