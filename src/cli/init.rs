//! `nightshift init` (SPEC §2, §10): `.nightshift/` with a commented config
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
    if cfg.exists() {
        println!("kept    {} (already there)", cfg.display());
    } else {
        create(&cfg, config::TEMPLATE).map_err(|e| io(&cfg.display().to_string(), e))?;
        println!("created {}", cfg.display());
    }
    let loaded = config::load(&cfg)?;
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
    println!("next: edit the backlog, then `nightshift plan`");
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
