//! error (placeholder: filled in by its owner)
