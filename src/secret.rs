//! secret (placeholder: filled in by its owner)
