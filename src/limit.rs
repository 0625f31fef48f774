//! limit (placeholder: filled in by its owner)
