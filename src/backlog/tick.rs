//! The one edit nightshift ever makes to a backlog: the byte-exact tick
//! (`[ ]` → `[x]`, an optional note after the title), in text or in a checkout.
//!
//! Not for anything else that writes the file: nothing else does.

use super::model::{BacklogError, Item};
use super::parse::parse;
use std::path::Path;

/// Ticks `item` in `text`: replaces its `[ ]` (or `[\t]`) at `marker_offset` with `[x]`
/// and appends `note` (e.g. `" (done: #123)"`) after the title, before any
/// trailing whitespace and the line ending. Every other byte is unchanged
/// (docs/backlog.md#ticks-and-sync, `nightshift sync`). The caller should also compare the file's
/// hash with [`super::Backlog::sha256`] before writing. The note becomes part of the
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
