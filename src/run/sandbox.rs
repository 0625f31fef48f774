//! The sandbox policy of each call of an item (docs/security.md#the-sandbox):
//! which paths a gate, a setup command or a `command` agent sees, and
//! whether it gets a network, from the contract's sealed `[sandbox]`.
//!
//! Not for building the sandbox (`crate::sandbox`, entered by `process`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::agent::Role;
use crate::config::AgentKind;
use crate::contract::Contract;
use crate::sandbox::{Network, Policy};

use super::Night;

/// The home directory inside when the environment names none.
const HOME: &str = "/home/sandbox";

/// The policy of a gate or setup command in `slot`: the slot and its build
/// directory writable, the sealed `write` and `read`; `None` when the
/// item's calls run without a sandbox. `env`'s `HOME` becomes the private
/// home (set when missing).
pub(super) fn for_gate(
    night: &Night,
    c: &Contract,
    slot: &Path,
    env: &mut BTreeMap<String, String>,
) -> Option<Policy> {
    if !wanted(night, c) {
        return None;
    }
    let build = crate::build_output::slot_build_dir(slot);
    let _ = std::fs::create_dir_all(&build);
    let mut write = vec![slot.to_path_buf()];
    if build.is_dir() {
        write.push(build);
    }
    Some(policy(c, write, vec![], env))
}

/// The policy of a call of a `role` agent of `kind` in `slot` whose own
/// files are in `log_dir`: the slot writable for the writer and read-only
/// for the reviewer, the call's directory writable (its prompt, contract
/// and feedback files, its usage report). Only the `command` kind runs in
/// it for now: claude and codex need their API host through the filtering
/// proxy, which does not exist yet (docs/security.md#not-yet).
pub(super) fn for_agent(
    night: &Night,
    c: &Contract,
    (role, kind): (Role, AgentKind),
    (slot, log_dir): (&Path, &Path),
    env: &mut BTreeMap<String, String>,
) -> Option<Policy> {
    if kind != AgentKind::Command || !wanted(night, c) {
        return None;
    }
    let _ = std::fs::create_dir_all(log_dir);
    let (write, read) = match role {
        Role::Writer => (vec![slot.to_path_buf(), log_dir.to_path_buf()], vec![]),
        Role::Reviewer => (vec![log_dir.to_path_buf()], vec![slot.to_path_buf()]),
    };
    Some(policy(c, write, read, env))
}

/// Whether the item's calls get a sandbox: this host builds one and the
/// contract was not sealed with mode `off`.
fn wanted(night: &Night, c: &Contract) -> bool {
    night.sandbox && c.sandbox.mode != crate::sandbox::Mode::Off
}

/// The policy with the contract's sealed paths and network added.
fn policy(
    c: &Contract,
    mut write: Vec<PathBuf>,
    mut read: Vec<PathBuf>,
    env: &mut BTreeMap<String, String>,
) -> Policy {
    write.extend(c.sandbox.write.iter().map(PathBuf::from));
    read.extend(c.sandbox.read.iter().map(PathBuf::from));
    let home = env
        .entry("HOME".into())
        .or_insert_with(|| HOME.into())
        .clone();
    Policy {
        write,
        read,
        home: PathBuf::from(home),
        home_files: vec![],
        network: if c.sandbox.allow_hosts.is_empty() {
            Network::None
        } else {
            Network::Host
        },
    }
}
