//! `doctor`'s sandbox line (docs/security.md#the-sandbox): whether this
//! host builds the sandbox, under which mode, and what to do when it cannot.

use super::Check;
use crate::config::Loaded;
use crate::sandbox::Mode;

/// The sandbox line: pass when it is built, a warning when it is off or
/// `auto` cannot build it here, a failure under `required` without the
/// kernel's support (a run would exit 2).
pub(super) fn sandbox_check(loaded: &Loaded) -> Check {
    let b = &loaded.config.sandbox;
    match crate::settings::sandbox_state(&loaded.config, &loaded.path) {
        Ok(None) => {
            let net = if b.allow_hosts.is_empty() {
                "no network but claude's and codex's API host, through the filtering proxy"
                    .to_string()
            } else {
                format!(
                    "through the filtering proxy: {} and claude's and codex's API host",
                    b.allow_hosts.join(", ")
                )
            };
            Check::pass(
                "sandbox",
                format!(
                    "mode {}: every agent, gate and setup call runs in its own user, mount, PID and network namespaces with Landlock and seccomp ({net})",
                    b.mode
                ),
            )
        }
        Ok(Some(why)) if b.mode == Mode::Off => Check::warn(
            "sandbox",
            why,
            "set `[sandbox] mode = \"auto\"` (the default) to build it",
        ),
        Ok(Some(why)) => Check::warn(
            "sandbox",
            why,
            "enable the missing kernel feature, or set `[sandbox] mode = \"off\"` to silence this",
        ),
        Err(why) => Check::fail(
            "sandbox",
            why,
            "enable the missing kernel feature, or set `[sandbox] mode = \"auto\"`",
        ),
    }
}

/// The gate programs the sandbox would not show (docs/security.md#the-sandbox):
/// a program found on `PATH` outside the system directories, the
/// repository and `[sandbox] read`/`write` — rustup's `~/.cargo/bin/cargo`,
/// nvm's `node` — is "not found" inside, and every item would fail its
/// gate. `gates` are (origin, command) pairs; `None` when the sandbox is
/// off or every program is shown.
pub(super) fn hidden_gate_programs(
    loaded: &Loaded,
    repo: &std::path::Path,
    gates: &[(String, String)],
) -> Option<Check> {
    let b = &loaded.config.sandbox;
    if b.mode == Mode::Off {
        return None;
    }
    let shown = |p: &std::path::Path| {
        crate::sandbox::SYSTEM_DIRS.iter().any(|d| p.starts_with(d))
            || p.starts_with(repo)
            || b.read.iter().chain(&b.write).any(|d| p.starts_with(d))
    };
    let mut hidden = Vec::new();
    for (origin, command) in gates {
        for p in crate::gate::programs(command) {
            if let crate::gate::Program::Name(name) = p
                && let Some(at) = super::which(&name)
                && !shown(&at)
            {
                hidden.push(format!("{origin} `{command}`: {name} is {}", at.display()));
            }
        }
    }
    (!hidden.is_empty()).then(|| {
        Check::fail(
            "toolchain",
            format!(
                "the sandbox does not show these gate programs, so every item would fail its gate: {}",
                hidden.join("; ")
            ),
            "add their installation to `[sandbox] read` in the config, e.g. `read = [\"/root/.cargo\", \"/root/.rustup\"]` for a rustup toolchain",
        )
    })
}
