//! Where the config is and how it is read: [`load`] (a missing file means all defaults),
//! [`parse`] (serde, then the checks of `validate`), and [`secret_names_hint`], the lenient early
//! read `main` makes of the `secrets` list. Not the types (see `types`).

use std::path::{Path, PathBuf};

use super::error::{ConfigError, read_error};
use super::types::{AgentKind, Config};
use super::validate::{validate, validate_workers};

/// Directory nightshift keeps inside the user's repository (docs/files.md).
pub const DIR: &str = ".nightshift";
/// Config file name inside [`DIR`].
pub const FILE: &str = "config.toml";

/// Where the config was found and what it says.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The config file path (it may not exist: then all defaults).
    pub path: PathBuf,
    /// Whether the file existed.
    pub exists: bool,
    /// The values.
    pub config: Config,
}

/// Reads the config at `path`, or the defaults if it does not exist.
///
/// # Errors
/// [`ConfigError::Read`] when the file cannot be read, and
/// [`ConfigError::Invalid`] naming file, line and key for TOML errors,
/// unknown keys (`deny_unknown_fields`) and bad values.
pub fn load(path: &Path) -> Result<Loaded, ConfigError> {
    let text = match crate::file::read_regular_text(path, crate::file::MAX_TEXT_BYTES) {
        Ok(t) => t,
        Err(e) if e.is_not_found() => {
            return Ok(Loaded {
                path: path.to_path_buf(),
                exists: false,
                config: Config::default(),
            });
        }
        Err(e) => return Err(ConfigError::Read(e)),
    };
    let config = parse(path, &text)?;
    Ok(Loaded {
        path: path.to_path_buf(),
        exists: true,
        config,
    })
}

/// Parses config text; `path` is only used in error messages.
///
/// # Errors
/// [`ConfigError::Invalid`] as for [`load`].
pub fn parse(path: &Path, text: &str) -> Result<Config, ConfigError> {
    let config: Config = toml::from_str(text).map_err(|e| read_error(path, text, &e))?;
    let mut config = config;
    for a in [&mut config.writer, &mut config.reviewer] {
        if a.command.is_empty() {
            match a.kind {
                AgentKind::Claude => a.command = vec!["claude".into()],
                AgentKind::Codex => a.command = vec!["codex".into()],
                // Left empty: `validate` says what to write.
                AgentKind::Command => {}
            }
        }
    }
    super::fallback::default_commands(&mut config);
    validate(path, text, &config)?;
    super::fallback::validate_fallbacks(path, text, &config)?;
    validate_workers(path, text, &config)?;
    Ok(config)
}

/// The names in the config's `secrets` list, read before anything else so
/// that `main` can wipe them from nightshift's own environment while it
/// still has one thread (docs/agents.md: an agent running as the same user can read
/// `/proc/<nightshift>/environ`). `args` are the command-line arguments
/// (for `--config PATH` and `--repo PATH`, else `NIGHTSHIFT_CONFIG` and
/// `NIGHTSHIFT_REPO`); the config is that file, else
/// `.nightshift/config.toml` in the nearest directory that has one, from the
/// repository path (or the current directory) up. Lenient: an unreadable or invalid config gives no
/// names here (the real load reports it).
pub fn secret_names_hint(args: &[String]) -> Vec<String> {
    let flag = |name: &str| {
        args.iter().enumerate().find_map(|(i, a)| {
            a.strip_prefix(&format!("{name}="))
                .map(String::from)
                .or_else(|| (a == name).then(|| args.get(i + 1).cloned()).flatten())
        })
    };
    // `--repo` may name any directory inside the repository (git finds its
    // top): search up from it as from the current directory.
    let nearest = |start: PathBuf| {
        start
            .canonicalize()
            .unwrap_or(start)
            .ancestors()
            .map(|a| a.join(DIR).join(FILE))
            .find(|p| p.is_file())
    };
    // The flags, else their variables (as clap reads them: `NIGHTSHIFT_CONFIG`,
    // `NIGHTSHIFT_REPO`; a cron job sets these rather than a working directory).
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
    let path = match (
        flag("--config").or_else(|| var("NIGHTSHIFT_CONFIG")),
        flag("--repo").or_else(|| var("NIGHTSHIFT_REPO")),
    ) {
        (Some(c), _) => Some(PathBuf::from(c)),
        (None, Some(r)) => nearest(PathBuf::from(r)),
        (None, None) => std::env::current_dir().ok().and_then(nearest),
    };
    // A special file here is refused later, by `load`, with its message.
    let Some(text) =
        path.and_then(|p| crate::file::read_regular_text(&p, crate::file::MAX_TEXT_BYTES).ok())
    else {
        return Vec::new();
    };
    let Ok(table) = text.parse::<toml::Table>() else {
        return Vec::new();
    };
    table
        .get("secrets")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_str)
        .filter(|n| !n.is_empty() && !n.contains(['=', '\0']))
        .map(String::from)
        .collect()
}
