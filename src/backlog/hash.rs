//! The one hash of the backlog: lowercase hex SHA-256, for the file's bytes,
//! item keys and (re-exported by `contract`) the SHAs of contracts and plans.
//!
//! Not for deciding what is hashed: the callers do.

/// Lowercase hex SHA-256 of `bytes` (64 characters): item keys, and the
/// SHAs of contracts and plans (`contract` re-exports it).
pub fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    hex::encode(Sha256::digest(bytes))
}
