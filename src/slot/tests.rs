//! Unit tests of where a slot and its fingerprint file live.

use super::fingerprint::*;
use super::model::*;
use std::path::Path;

#[test]
fn fingerprint_file_sits_next_to_the_slot() {
    assert_eq!(
        fingerprint_file(Path::new("/d/slots/ab/slot-0")),
        Path::new("/d/slots/ab/slot-0.fingerprint")
    );
}

#[test]
fn slot_path_is_stable_per_repo() {
    let a = slot_path(Path::new("/data"), Path::new("/nonexistent/repo"), 0);
    let b = slot_path(Path::new("/data"), Path::new("/nonexistent/repo"), 0);
    let c = slot_path(Path::new("/data"), Path::new("/nonexistent/other"), 0);
    assert_eq!(a, b);
    assert_ne!(a.parent(), c.parent());
    assert!(a.ends_with("slot-0"));
}
