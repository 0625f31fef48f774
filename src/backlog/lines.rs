//! Line arithmetic over the backlog's text: offsets to 1-based lines
//! ([`LineIndex`]), display columns and indentation, list markers and block-quote
//! markers taken off a line.
//!
//! Not for markdown structure: that is pulldown-cmark's, walked in `scan`.

use std::ops::Range;

/// Line starts and ends of a text, for offset → line number and line slicing.
/// A line ends at `\n`, `\r\n` or a lone `\r`, as in CommonMark.
pub(super) struct LineIndex {
    pub(super) starts: Vec<usize>,
    /// End of each line's content, before its line ending.
    ends: Vec<usize>,
}

impl LineIndex {
    pub(super) fn new(text: &str) -> Self {
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
    pub(super) fn span(&self, range: &Range<usize>) -> (usize, usize) {
        (
            self.line_of(range.start),
            self.line_of(range.end.saturating_sub(1).max(range.start)),
        )
    }

    /// 1-based line holding byte `offset` (a line ending belongs to its line).
    pub(super) fn line_of(&self, offset: usize) -> usize {
        self.starts.partition_point(|&s| s <= offset)
    }

    /// Byte range of 1-based `line`, without its line ending.
    pub(super) fn range(&self, line: usize) -> Range<usize> {
        self.starts[line - 1]..self.ends[line - 1]
    }

    /// Number of lines (a final line without a line ending counts; the empty
    /// rest after a final line ending does too).
    pub(super) fn count(&self) -> usize {
        self.starts.len()
    }
}

/// Display columns of a line's leading white space ([`columns`]).
pub(super) fn indent_of(line: &str) -> usize {
    columns(&line[..line.len() - line.trim_start().len()])
}

/// Display columns of a line prefix, tabs to the next multiple of 4 (CommonMark).
pub(super) fn columns(prefix: &str) -> usize {
    prefix.chars().fold(0, |col, c| {
        if c == '\t' {
            col + 4 - col % 4
        } else {
            col + 1
        }
    })
}

/// Removes up to `indent` columns of leading spaces/tabs.
pub(super) fn strip_indent(line: &str, indent: usize) -> &str {
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
pub(super) fn strip_bullet(line: &str) -> (&str, bool) {
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

/// Lines of a top-level block quote without their `>` marker (up to 3 spaces,
/// `>`, one optional space or tab). Lazy continuation lines are kept as they are.
pub(super) fn quote_lines(text: &str, lines: &LineIndex, range: &Range<usize>) -> Vec<String> {
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
