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
            let mut net = if b.allow_hosts.is_empty() {
                "no network but claude's and codex's API host, through the filtering proxy"
                    .to_string()
            } else {
                format!(
                    "through the filtering proxy: {} and claude's and codex's API host",
                    b.allow_hosts.join(", ")
                )
            };
            let c = &loaded.config;
            let own = [
                ("writer", &c.writer.allow_hosts),
                ("reviewer", &c.reviewer.allow_hosts),
            ];
            let own = own
                .into_iter()
                .chain([("gate and setup", &b.gate_allow_hosts)]);
            for (who, hosts) in own.filter(|(_, h)| !h.is_empty()) {
                net.push_str(&format!("; {who} only: {}", hosts.join(", ")));
            }
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

/// The `toolchain` line (docs/security.md#toolchains): a failure naming
/// each gate, setup or agent program the sandbox would not show
/// (`settings::toolchain::hidden_programs`, the rule `plan` refuses by) and the
/// `[sandbox] read` line that shows them; `None` when every one is shown
/// or no sandbox is built. `gates` are (origin, command) pairs.
pub(super) fn hidden_programs(
    loaded: &Loaded,
    repo: &std::path::Path,
    gates: &[(String, String)],
) -> Option<Check> {
    use crate::settings::toolchain;
    let env = crate::settings::agents_environment(&loaded.config);
    let hidden = toolchain::hidden_programs(loaded, repo, gates, &env);
    (!hidden.is_empty()).then(|| {
        let said: Vec<String> = hidden.iter().map(toolchain::Hidden::describe).collect();
        Check::fail(
            "toolchain",
            said.join("; "),
            format!(
                "show their installation to the sandbox (`[sandbox] read`): write `{}` under `[sandbox]` in {}",
                toolchain::read_line(&loaded.config.sandbox.read, &hidden),
                loaded.path.display()
            ),
        )
    })
}
