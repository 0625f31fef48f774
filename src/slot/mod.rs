//! Slots: the reusable checkouts the writer works in (docs/loop.md#checkout).
//!
//! A slot is a separate clone under nightshift's data directory that borrows
//! objects from the user's repository (`git clone --shared --no-checkout`),
//! not a `git worktree` of it: nothing an agent does in the slot's `.git`
//! reaches the user's `.git`, and the user's working tree, index and branches
//! are never read for writing — a dirty or detached user checkout does not
//! matter. Fetch and push go straight to the URL of the user's remote. A slot
//! is reused from item to item: preparing it costs a fetch, a forced checkout
//! and a clean, not a new clone; a broken or tampered slot is removed and
//! cloned again.
//!
//! This module does not judge the writer's work (that is `proof`) and does not
//! talk to GitHub (that is `forge`).

mod branch;
mod error;
mod fingerprint;
mod hand_over;
mod index;
mod lock;
mod model;
mod reset;
mod stragglers;
mod tree;

pub use branch::{branch_name, drop_local_branch};
pub use error::SlotError;
pub use fingerprint::{git_dir_changes, git_dir_fingerprint, remote_moves};
pub use hand_over::hand_over;
pub use lock::{MIN_FREE_BYTES, SlotsLock, lock_slots};
pub use model::{Identity, Lease, NETWORK_TIMEOUT, Slot, slot_path};
pub use reset::{KeptWalk, PrepareAt};
pub use stragglers::kill_stragglers;

#[cfg(test)]
mod tests;
