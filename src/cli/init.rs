//! `nightshift init` (docs/commands.md, docs/files.md): `.nightshift/` with a commented config
//! and a `.gitignore` holding `*`, and `NEXT.md` from the example if there is
//! none. Never touches the project's own `.gitignore`, `AGENTS.md`,
//! `CLAUDE.md` or `.claude/`.

use crate::cli::{Cli, repo_root};
use crate::config;
use crate::error::{Error, Result};

/// The example backlog `init` writes when the repository has none.
pub const NEXT_EXAMPLE: &str = include_str!("../../NEXT.example.md");

/// `nightshift init`.
pub(crate) fn run(cli: &Cli) -> Result<()> {
    let repo = repo_root(cli)?;
    let dir = repo.join(config::DIR);
    let io = |what: &str, e: std::io::Error| Error::failed(format!("{what}: {e}"));
    if dir.exists() && !dir.is_dir() {
        return Err(Error::config(format!(
            "{} exists and is not a directory; move it away, then run `nightshift init` again",
            dir.display()
        )));
    }
    std::fs::create_dir_all(&dir).map_err(|e| io(&dir.display().to_string(), e))?;
    let ignore = dir.join(".gitignore");
    if !ignore.exists() {
        create(&ignore, "*\n").map_err(|e| io(&ignore.display().to_string(), e))?;
        println!("created {}", ignore.display());
    }
    let cfg = dir.join(config::FILE);
    let mut gate_unset = false;
    let made_config = !cfg.exists();
    if cfg.exists() {
        println!("kept    {} (already there)", cfg.display());
    } else {
        // The gate is the project's own test command: guessed from its files.
        let guess = crate::gate::guess(&repo);
        let text = config::template_with_gate(guess.as_ref().map(|g| g.command));
        create(&cfg, &text).map_err(|e| io(&cfg.display().to_string(), e))?;
        println!("created {}", cfg.display());
        match &guess {
            Some(g) => println!(
                "gate:   verify = [\"{}\"] (guessed: {}); change it in {} if your tests run otherwise",
                g.command,
                g.because,
                cfg.display()
            ),
            None => {
                gate_unset = true;
                println!(
                    "gate:   none found (no Cargo.toml, package.json with a test script, pytest config or Python project with tests/test_*.py, go.mod or Makefile with a `test:` target); {} holds a placeholder that fails every item: set `verify` to your test command, e.g. verify = [\"sh test.sh\"]",
                    cfg.display()
                );
            }
        }
    }
    let loaded = crate::settings::checked_load(&cfg)?;
    let backlog = repo.join(&loaded.config.backlog);
    if backlog.exists() && !backlog.is_file() {
        return Err(Error::config(format!(
            "{} exists and is not a file; the backlog must be a markdown file (or set `backlog` in {})",
            backlog.display(),
            cfg.display()
        )));
    }
    if backlog.exists() {
        println!("kept    {} (already there)", backlog.display());
    } else {
        create(&backlog, NEXT_EXAMPLE).map_err(|e| io(&backlog.display().to_string(), e))?;
        println!("created {} from the example", backlog.display());
    }
    if made_config {
        show_toolchain(&repo, &cfg)?;
    }
    let c = &loaded.config;
    if gate_unset {
        println!(
            "next: set `verify` in {}, edit {}, then `nightshift plan`",
            cfg.display(),
            backlog.display()
        );
    } else {
        println!(
            "next: check {} (gate `{}`, writer {}, reviewer {}), edit {}, then `nightshift plan`",
            cfg.display(),
            c.verify.join("`, `"),
            c.writer.kind,
            c.reviewer.kind,
            backlog.display()
        );
    }
    Ok(())
}

/// When a gate or agent program of the new config and backlog lies where
/// the sandbox would hide it (rustup's `~/.cargo/bin/cargo`, nvm's node:
/// docs/security.md#toolchains), adds the `[sandbox] read` line that shows
/// it to the config `init` just wrote, and says so: otherwise `plan`'s first
/// answer would be a refusal asking for that line.
fn show_toolchain(repo: &std::path::Path, cfg: &std::path::Path) -> Result<()> {
    use crate::settings::toolchain;
    let loaded = crate::settings::checked_load(cfg)?;
    let Ok(bl) = crate::settings::read_backlog(repo, &loaded) else {
        return Ok(());
    };
    let Ok(plan) = crate::plan::build_plan(repo, &bl, &loaded) else {
        return Ok(());
    };
    let hidden = toolchain::hidden_in_plan(&loaded, repo, &plan);
    if hidden.is_empty() {
        return Ok(());
    }
    let line = toolchain::read_line(&loaded.config.sandbox.read, &hidden);
    let found: Vec<String> = hidden
        .iter()
        .map(|h| format!("{} at {}", h.program, h.found.display()))
        .collect();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(cfg)
        .map_err(|e| Error::failed(format!("{}: {e}", cfg.display())))?;
    std::io::Write::write_all(
        &mut file,
        config::sandbox_read_table(&line, &found).as_bytes(),
    )
    .map_err(|e| Error::failed(format!("{}: {e}", cfg.display())))?;
    println!(
        "sandbox: {} outside the system directories: wrote `{line}` under [sandbox] in {} (docs/security.md#toolchains)",
        found.join(", "),
        cfg.display()
    );
    Ok(())
}

/// Writes a new file, never through a symbolic link: `exists()` is false for
/// a link to a missing file, and a plain write would create the link's target
/// wherever a cloned repository points it (`NEXT.md -> ~/.config/…`).
fn create(path: &std::path::Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = std::fs::OpenOptions::new().write(true).create_new(true).open(path).map_err(|e| {
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink()) {
            std::io::Error::new(e.kind(), format!("a symbolic link to a missing file is in the way ({e}); nightshift creates no file through a link — remove it or point it at a file"))
        } else {
            e
        }
    })?;
    file.write_all(text.as_bytes())
}
