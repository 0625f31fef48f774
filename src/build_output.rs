//! Build output per slot: what in the agents' and gates' environment can
//! point slots that run side by side at one mutable build directory, and
//! how each slot gets its own (docs/loop.md#build-output-per-slot).
//!
//! A shared `CARGO_TARGET_DIR` once let the gate of one slot run the test
//! binaries another slot had just built: a failing item was pushed green
//! (issue 21, point 1). So every slot builds into its own directory beside
//! its checkout, and a variable that points all slots at one mutable
//! directory nightshift cannot split (a virtualenv, a `node_modules`) stops
//! a run of several workers before it starts.
//!
//! Not here: caches that are safe to share because their entries are
//! content-addressed and their writers take locks (`CARGO_HOME`, `GOCACHE`,
//! `GOMODCACHE`, npm's and pip's caches, `CCACHE_DIR`, `SCCACHE_DIR`,
//! `GRADLE_USER_HOME`): they are passed on unchanged. The checkout itself is
//! `slot`'s.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};

/// The variables nightshift points at the slot's own build directory, and
/// why each one matters. Cargo reads `CARGO_TARGET_DIR` before any
/// `build.target-dir` of a config file, so setting it also covers a shared
/// target directory named in `~/.cargo/config.toml`; `build-dir` (cargo's
/// intermediate artifacts, default the target directory) is set with it.
pub const PER_SLOT: &[&str] = &[
    "CARGO_TARGET_DIR",
    "CARGO_BUILD_TARGET_DIR",
    "CARGO_BUILD_BUILD_DIR",
];

/// Variables that name a mutable directory (an environment packages are
/// installed into, or a module path read at run time) nightshift cannot give
/// each slot a copy of. An absolute value is one directory for every slot;
/// `NODE_PATH` is a `:`-separated list.
pub const SHARED: &[(&str, &str)] = &[
    ("VIRTUAL_ENV", "a Python virtualenv"),
    ("CONDA_PREFIX", "a conda environment"),
    ("UV_PROJECT_ENVIRONMENT", "uv's project environment"),
    ("PIP_TARGET", "pip's install target"),
    ("PIP_PREFIX", "pip's install prefix"),
    ("PYTHONUSERBASE", "Python's user site"),
    ("NODE_PATH", "a node_modules search path"),
    ("NPM_CONFIG_PREFIX", "npm's global prefix"),
    ("npm_config_prefix", "npm's global prefix"),
    ("GOBIN", "Go's install directory"),
];

/// A slot's own build directory: `slot-<n>.build/` beside the checkout
/// `slot-<n>/` (outside it, so nothing built there is ever seen as the
/// writer's change, committed or walked by the checkout's reset).
pub fn slot_build_dir(slot: &Path) -> PathBuf {
    let mut name = slot.file_name().unwrap_or_default().to_os_string();
    name.push(".build");
    slot.with_file_name(name)
}

/// Cargo's target directory for the slot at `slot`.
fn cargo_dir(slot: &Path) -> PathBuf {
    slot_build_dir(slot).join("cargo-target")
}

/// `env` as the agents and gates of the slot checked out at `slot` get it:
/// each [`PER_SLOT`] variable points at the slot's own build directory,
/// unless its value is a relative path that stays inside the checkout (the
/// working directory of every call is the checkout, so it is the slot's
/// already).
pub fn for_slot(env: &BTreeMap<String, String>, slot: &Path) -> BTreeMap<String, String> {
    let mut env = env.clone();
    let own = cargo_dir(slot).to_string_lossy().into_owned();
    for var in PER_SLOT {
        match env.get(*var) {
            Some(v) if stays_inside(v) => {}
            // build-dir is set only when asked for: cargo before 1.91 knows
            // no such setting.
            None if *var == "CARGO_BUILD_BUILD_DIR" => {}
            _ => {
                env.insert((*var).to_string(), own.clone());
            }
        }
    }
    env
}

/// What [`check`] found: the variables of the environment that [`for_slot`]
/// replaces, with the value each had (shown in the run's header).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Isolation {
    /// `(variable, value the environment gave it)`, in [`PER_SLOT`] order.
    pub replaced: Vec<(String, String)>,
}

impl Isolation {
    /// The run's header line: where each slot builds, and what it replaced.
    /// `slots` is the directory holding the slots (e.g. `…/slots/<hash>`).
    pub fn header(&self, slots: &Path) -> String {
        // The layout of `slot_build_dir`, with the slot number as `N`.
        let own = cargo_dir(&slots.join("slot-N")).display().to_string();
        if self.replaced.is_empty() {
            return format!("build output: each slot builds in its own directory ({own})");
        }
        let was: Vec<String> = self
            .replaced
            .iter()
            .map(|(var, val)| format!("{var}={val}"))
            .collect();
        format!(
            "build output: each slot builds in its own directory ({own}), not in the shared {} of this environment",
            was.join(", ")
        )
    }
}

/// A variable that would point the slots of a run at one mutable directory
/// nightshift cannot split (docs/loop.md#build-output-per-slot).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shared {
    /// The variable, e.g. `VIRTUAL_ENV`.
    pub var: String,
    /// Its value.
    pub value: String,
    /// What it names, e.g. `a Python virtualenv`.
    pub what: &'static str,
}

impl std::fmt::Display for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}={} points every worker's gate at one {} outside its checkout: with jobs > 1 the slots would install into and test against each other's files. Unset {} for the drain (deactivate the environment) and let the gate make its own inside the checkout (e.g. `setup = [\"python -m venv .venv\", …]` or `npm ci`), or run with --jobs 1",
            self.var, self.value, self.what, self.var
        )
    }
}

/// Checks the environment agents and gates get (`env`, the gates' one: it
/// holds the agents' plus `gate_env`) for a run of `jobs` workers on this
/// host.
///
/// # Errors
/// [`Shared`] for the first [`SHARED`] variable whose value names a
/// directory outside the checkout (an absolute path, or a relative one that
/// climbs out with `..`) when `jobs > 1`: one directory for every slot.
pub fn check(env: &BTreeMap<String, String>, jobs: u32) -> Result<Isolation, Shared> {
    if jobs > 1 {
        for (var, what) in SHARED {
            let Some(value) = env.get(*var) else { continue };
            if value.split(':').any(|p| !p.is_empty() && !stays_inside(p)) {
                return Err(Shared {
                    var: (*var).to_string(),
                    value: value.clone(),
                    what,
                });
            }
        }
    }
    let replaced = PER_SLOT
        .iter()
        .filter_map(|var| env.get(*var).map(|v| (*var, v)))
        .filter(|(_, v)| !stays_inside(v))
        .map(|(var, v)| (var.to_string(), v.clone()))
        .collect();
    Ok(Isolation { replaced })
}

/// Whether `path`, taken from inside a checkout, names a place inside it:
/// relative, and never climbing above where it starts.
fn stays_inside(path: &str) -> bool {
    let mut depth = 0usize;
    for c in Path::new(path).components() {
        match c {
            Component::Normal(_) => depth += 1,
            Component::CurDir => {}
            Component::ParentDir if depth > 0 => depth -= 1,
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return false,
        }
    }
    !path.is_empty()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn each_slot_gets_its_own_cargo_target_dir() {
        let shared = env(&[("CARGO_TARGET_DIR", "/cache/target"), ("PATH", "/usr/bin")]);
        let a = for_slot(&shared, Path::new("/d/slots/ab/slot-0"));
        let b = for_slot(&shared, Path::new("/d/slots/ab/slot-1"));
        assert_eq!(
            a["CARGO_TARGET_DIR"],
            "/d/slots/ab/slot-0.build/cargo-target"
        );
        assert_eq!(
            b["CARGO_TARGET_DIR"],
            "/d/slots/ab/slot-1.build/cargo-target"
        );
        assert_eq!(a["CARGO_BUILD_TARGET_DIR"], a["CARGO_TARGET_DIR"]);
        assert!(!a.contains_key("CARGO_BUILD_BUILD_DIR"));
        assert_eq!(a["PATH"], "/usr/bin");
    }

    #[test]
    fn unset_target_dir_is_set_too_so_a_config_file_cannot_share_one() {
        let a = for_slot(&env(&[]), Path::new("/d/slot-3"));
        assert_eq!(a["CARGO_TARGET_DIR"], "/d/slot-3.build/cargo-target");
    }

    #[test]
    fn relative_inside_is_kept_and_climbing_out_is_replaced() {
        let a = for_slot(
            &env(&[
                ("CARGO_TARGET_DIR", "build/target"),
                ("CARGO_BUILD_BUILD_DIR", "../../shared"),
            ]),
            Path::new("/d/slot-0"),
        );
        assert_eq!(a["CARGO_TARGET_DIR"], "build/target");
        assert_eq!(a["CARGO_BUILD_BUILD_DIR"], "/d/slot-0.build/cargo-target");
    }

    #[test]
    fn check_names_what_it_replaces() {
        let i = check(&env(&[("CARGO_TARGET_DIR", "/cache/t")]), 3).unwrap();
        assert_eq!(
            i.replaced,
            vec![("CARGO_TARGET_DIR".into(), "/cache/t".into())]
        );
        let h = i.header(Path::new("/d/slots/ab"));
        assert!(h.contains("/d/slots/ab/slot-N.build/cargo-target"), "{h}");
        assert!(h.contains("CARGO_TARGET_DIR=/cache/t"), "{h}");
        assert!(check(&env(&[]), 3).unwrap().replaced.is_empty());
    }

    #[test]
    fn a_shared_environment_refuses_several_jobs_only() {
        for (var, val) in [
            ("VIRTUAL_ENV", "/home/u/repo/.venv"),
            ("NODE_PATH", "node_modules:/opt/shared/node_modules"),
            ("PIP_TARGET", "../../lib"),
            ("npm_config_prefix", "/home/u/.npm-global"),
        ] {
            let e = env(&[(var, val)]);
            let err = check(&e, 2).unwrap_err();
            assert_eq!(err.var, var);
            let text = err.to_string();
            assert!(text.contains(var) && text.contains("--jobs 1"), "{text}");
            assert!(check(&e, 1).is_ok(), "{var} with one job");
        }
        // Inside the checkout each slot has its own.
        assert!(
            check(
                &env(&[("VIRTUAL_ENV", ".venv"), ("NODE_PATH", "node_modules")]),
                4
            )
            .is_ok()
        );
        // Safe caches pass.
        assert!(check(&env(&[("GOCACHE", "/c/go"), ("CARGO_HOME", "/c/cargo")]), 4).is_ok());
    }

    #[test]
    fn stays_inside_reads_paths_lexically() {
        assert!(stays_inside("target"));
        assert!(stays_inside("./a/../b"));
        assert!(!stays_inside("a/../../b"));
        assert!(!stays_inside("/abs"));
        assert!(!stays_inside(""));
    }
}
