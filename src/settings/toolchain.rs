//! The toolchain trap (docs/security.md#toolchains): a program a gate,
//! setup command or agent starts that the sandbox would not show. A
//! program found on `PATH` outside the system directories — rustup's
//! `~/.cargo/bin/cargo`, nvm's `node`, pyenv's `python` — is "not found"
//! inside, and every item would fail. `plan` refuses such a plan and
//! `doctor` fails its `toolchain` line, both through [`hidden_programs`],
//! naming the program, where it was found and the `[sandbox] read` line
//! that shows it.
//!
//! Not for building the sandbox (`crate::sandbox`), nor for a call's own
//! policy (`crate::run`'s sandbox module).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::config::{AgentKind, Loaded};

/// A program the sandbox would hide from the calls that start it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Hidden {
    /// Who starts it, for a person: "verify `cargo test`", "[writer] command".
    pub who: String,
    /// The program as it is started (`cargo`, `/opt/x/agent`), or the
    /// interpreter a script names (`node`).
    pub program: String,
    /// Where it was found on this host (before links).
    pub found: PathBuf,
    /// The directories to show (`[sandbox] read`): the installation it
    /// lies in, and for a rustup proxy the toolchains too (`RUSTUP_HOME`).
    pub show: Vec<PathBuf>,
}

impl Hidden {
    /// One sentence for a person: who, what, where, and what it causes.
    pub fn describe(&self) -> String {
        format!(
            "{}: {} is {}, which the sandbox does not show, so every item would fail it (\"not found\")",
            self.who,
            self.program,
            self.found.display()
        )
    }
}

/// The `[sandbox] read = [...]` line that shows every program of `hidden`:
/// the config's own `read` entries, then each directory they need.
pub fn read_line(read: &[String], hidden: &[Hidden]) -> String {
    let mut dirs: Vec<String> = read.to_vec();
    for h in hidden {
        for d in &h.show {
            let d = d.display().to_string();
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
    }
    let quoted: Vec<String> = dirs.iter().map(|d| format!("{d:?}")).collect();
    format!("read = [{}]", quoted.join(", "))
}

/// The programs `loaded`'s gates and agents would not find inside the
/// sandbox, in the order met: each gate and setup command of `gates`
/// ((who, command) pairs) starting a program by name found on the `PATH`
/// of `env` (the calls' environment) outside the directories shown, and
/// each agent in play whose program (or its script's interpreter) lies
/// outside them. Empty when the sandbox is not built
/// (`settings::sandbox_state`), when `mode` is `off`, or when every
/// program is shown.
///
/// Shown: the system directories, `repo` (a checkout's files are its
/// slot's), `[sandbox] read` and `write`, an agent's own program file and,
/// for claude and codex, the `node_modules` it lies in.
pub fn hidden_programs(
    loaded: &Loaded,
    repo: &Path,
    gates: &[(String, String)],
    env: &BTreeMap<String, String>,
) -> Vec<Hidden> {
    if !matches!(super::sandbox_state(&loaded.config, &loaded.path), Ok(None)) {
        return vec![];
    }
    let b = &loaded.config.sandbox;
    let mut shown: Vec<PathBuf> = crate::sandbox::SYSTEM_DIRS
        .iter()
        .map(PathBuf::from)
        .chain([repo.to_path_buf()])
        .chain(b.read.iter().chain(&b.write).map(PathBuf::from))
        .flat_map(|d| [std::fs::canonicalize(&d).unwrap_or_else(|_| d.clone()), d])
        .collect();
    let look = Lookup { env, shown: &[] };
    let mut out = Vec::new();
    for (who, command) in gates {
        for p in crate::gate::programs(command) {
            // A relative path is the checkout's file: its slot is shown.
            let name = match p {
                crate::gate::Program::Name(n) => n,
                crate::gate::Program::Path(p) if p.starts_with('/') => p,
                _ => continue,
            };
            if let Some(found) = look.find(&name) {
                let look = Lookup { env, shown: &shown };
                out.extend(look.check(&format!("{who} `{command}`"), &name, &found, false));
            }
        }
    }
    for (writes, table, agent) in loaded.config.agents_in_play() {
        let Some(program) = agent.command.first() else {
            continue;
        };
        let Some(found) = look.find(program) else {
            // Not found at all: `plan` and `doctor` say so on their own.
            continue;
        };
        let package = (agent.kind != AgentKind::Command)
            .then(|| crate::run::package_of(program, env))
            .flatten();
        shown.extend(package);
        let look = Lookup { env, shown: &shown };
        let role = if writes { "writer" } else { "reviewer" };
        let who = format!("the {role}'s program ([{table}] command)");
        out.extend(look.check(&who, program, &found, true));
    }
    out.dedup();
    out
}

/// The programs of `plan`'s gates (every item's `verify` and `setup`,
/// each command once) and of the config's agents that the sandbox would
/// hide ([`hidden_programs`] with the agents' environment).
pub fn hidden_in_plan(loaded: &Loaded, repo: &Path, plan: &crate::plan::Plan) -> Vec<Hidden> {
    let mut gates: Vec<(String, String)> = Vec::new();
    for e in &plan.entries {
        let (verify, setup) = (e.contract.verify.iter(), e.contract.setup.iter());
        let commands = (verify.map(|v| ("verify", v))).chain(setup.map(|s| ("setup", s)));
        for (who, command) in commands {
            if !gates.iter().any(|(_, c)| c == command) {
                gates.push((who.to_string(), command.clone()));
            }
        }
    }
    let env = super::agents_environment(&loaded.config);
    hidden_programs(loaded, repo, &gates, &env)
}

/// How programs are found and judged: the calls' environment and the
/// directories the sandbox shows (canonical and as written).
struct Lookup<'a> {
    env: &'a BTreeMap<String, String>,
    shown: &'a [PathBuf],
}

impl Lookup<'_> {
    /// `program` as the call would find it: a path as given, a name on
    /// `PATH` (an executable file).
    fn find(&self, program: &str) -> Option<PathBuf> {
        use std::os::unix::fs::PermissionsExt;
        let executable = |p: &Path| {
            p.metadata()
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        };
        if program.contains('/') {
            let p = PathBuf::from(program);
            return (p.is_absolute() && executable(&p)).then_some(p);
        }
        std::env::split_paths(self.env.get("PATH")?)
            .map(|d| d.join(program))
            .find(|p| executable(p))
    }

    /// Whether `path` (canonical) lies in a directory the sandbox shows.
    fn is_shown(&self, path: &Path) -> bool {
        self.shown.iter().any(|d| path.starts_with(d))
    }

    /// What of `program` (found at `found`) the sandbox would hide:
    /// itself, unless `file_shown` (an agent's program file is shown on its
    /// own) or it lies in a shown directory; a rustup proxy's toolchains;
    /// a script's interpreter.
    fn check(&self, who: &str, program: &str, found: &Path, file_shown: bool) -> Vec<Hidden> {
        let Ok(real) = std::fs::canonicalize(found) else {
            return vec![];
        };
        let mut show = Vec::new();
        if !file_shown && !self.is_shown(&real) {
            show.push(install_root(&real));
        }
        if is_rustup_proxy(found, &real) {
            let home = rustup_home(self.env).filter(|h| !self.is_shown(h));
            if show.is_empty() && home.is_some() {
                show.push(install_root(&real));
            }
            show.extend(home);
        }
        let mut out = Vec::new();
        if !show.is_empty() {
            show.retain(|d| !self.is_shown(d));
            out.push(Hidden {
                who: who.to_string(),
                program: program.to_string(),
                found: found.to_path_buf(),
                show,
            });
        }
        // The interpreter of a script (`#!/usr/bin/env node`) is started
        // by the kernel inside: it must be shown as a gate's program is.
        if let Some(interp) = interpreter(&real)
            && let Some(at) = self.find(&interp)
        {
            let who = format!("{who}, the interpreter of {}", real.display());
            let hidden = self.check(&who, &interp, &at, false);
            out.extend(hidden.into_iter().filter(|h| !h.show.is_empty()));
        }
        out
    }
}

/// The installation a program lies in, the directory to show: the parent
/// of its `bin`, `sbin` or `shims` directory (`~/.cargo`, nvm's
/// `~/.nvm/versions/node/v20`, `~/.pyenv`), else its own directory.
fn install_root(real: &Path) -> PathBuf {
    let dir = real.parent().unwrap_or(Path::new("/"));
    let is_bin = dir
        .file_name()
        .is_some_and(|n| n == "bin" || n == "sbin" || n == "shims");
    match dir.parent() {
        Some(up) if is_bin && up != Path::new("/") => up.to_path_buf(),
        _ => dir.to_path_buf(),
    }
}

/// Whether `found` is a rustup proxy (`cargo`, `rustc`… as a link to, or
/// a hard link of, the `rustup` beside it): it runs the toolchain in
/// `RUSTUP_HOME`, which must be shown too.
fn is_rustup_proxy(found: &Path, real: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    if found.file_name().is_some_and(|n| n == "rustup") {
        return false;
    }
    if real.file_name().is_some_and(|n| n == "rustup") {
        return true;
    }
    let beside = found.with_file_name("rustup");
    match (std::fs::metadata(found), std::fs::metadata(&beside)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

/// Where rustup keeps its toolchains: `RUSTUP_HOME`, else `~/.rustup`
/// (canonical); `None` when it does not exist.
fn rustup_home(env: &BTreeMap<String, String>) -> Option<PathBuf> {
    let dir = match env.get("RUSTUP_HOME") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(env.get("HOME")?).join(".rustup"),
    };
    std::fs::canonicalize(dir).ok()
}

/// The program a script's `#!` line starts: the path, or the name after
/// `/usr/bin/env` (and its options). `None` for a binary.
fn interpreter(real: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(real).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = line.split(|b| *b == b'\n').next()?;
    let text = std::str::from_utf8(line).ok()?;
    let mut words = text.split_whitespace();
    let first = words.next()?;
    if Path::new(first).file_name().is_some_and(|n| n == "env") {
        return words
            .find(|w| !w.starts_with('-') && !w.contains('='))
            .map(str::to_string);
    }
    Some(first.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_installation_is_the_parent_of_its_bin() {
        for (real, root) in [
            ("/root/.cargo/bin/rustup", "/root/.cargo"),
            (
                "/h/.nvm/versions/node/v20.1.0/bin/node",
                "/h/.nvm/versions/node/v20.1.0",
            ),
            ("/h/.pyenv/shims/python", "/h/.pyenv"),
            ("/opt/tool/mytool", "/opt/tool"),
            ("/bin/x", "/bin"),
        ] {
            assert_eq!(install_root(Path::new(real)), Path::new(root), "{real}");
        }
    }

    #[test]
    fn a_scripts_interpreter_is_its_shebang() {
        let dir = tempfile::tempdir().unwrap();
        for (text, want) in [
            ("#!/usr/bin/env node\n", Some("node")),
            (
                "#!/usr/bin/env -S NODE_OPTIONS=x node --flag\n",
                Some("node"),
            ),
            (
                "#!/opt/py/bin/python3 -u\nprint()\n",
                Some("/opt/py/bin/python3"),
            ),
            ("\x7fELF...", None),
        ] {
            let f = dir.path().join("s");
            std::fs::write(&f, text).unwrap();
            assert_eq!(interpreter(&f).as_deref(), want, "{text}");
        }
    }

    #[test]
    fn a_rustup_proxy_is_a_link_to_rustup() {
        let dir = tempfile::tempdir().unwrap();
        let bin = dir.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        std::fs::write(bin.join("rustup"), "x").unwrap();
        std::os::unix::fs::symlink("rustup", bin.join("cargo")).unwrap();
        std::fs::hard_link(bin.join("rustup"), bin.join("rustc")).unwrap();
        std::fs::write(bin.join("other"), "x").unwrap();
        let real = |n: &str| std::fs::canonicalize(bin.join(n)).unwrap();
        assert!(is_rustup_proxy(&bin.join("cargo"), &real("cargo")));
        assert!(is_rustup_proxy(&bin.join("rustc"), &real("rustc")));
        assert!(!is_rustup_proxy(&bin.join("rustup"), &real("rustup")));
        assert!(!is_rustup_proxy(&bin.join("other"), &real("other")));
    }
}
