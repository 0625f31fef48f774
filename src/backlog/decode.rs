//! Turns a backlog file's bytes into text: UTF-8 with or without a BOM, and
//! UTF-16/UTF-32 or other bytes refused by name with the line of the first bad byte.
//!
//! Not for parsing the text (`parse`) or reading the file from disk.

use super::lines::LineIndex;
use super::model::BacklogError;
use std::path::Path;

/// The backlog's bytes as text, refusing anything but UTF-8 (a BOM is kept;
/// [`super::parse()`] skips it). `path` is only used in the error.
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
