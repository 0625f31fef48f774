//! `[writer] fallback` and `[reviewer] fallback` (docs/limits.md#fallback):
//! which agent config a fallback name stands for ([`Config::fallback_of`]),
//! the default command of an `[agents.NAME]` table, and the refusals of a
//! fallback that names no agent, the agent itself, or an agent of the same
//! account (it would be paused with it). Not when a fallback is used: that
//! is the run's choice (`crate::run`).

use std::path::Path;

use super::error::ConfigError;
use super::types::{AgentConfig, AgentKind, Config};

impl Config {
    /// The fallback agent of `primary` (`[writer]` or `[reviewer]`) and its
    /// name: the `[agents.NAME]` table its `fallback` names, else, for a
    /// kind's name (`claude`, `codex`), that kind's own CLI with its
    /// defaults. `None` without a fallback (or one that names nothing, which
    /// [`validate_fallbacks`] refuses at load).
    pub fn fallback_of(&self, primary: &AgentConfig) -> Option<(String, AgentConfig)> {
        let name = primary.fallback.as_deref()?;
        if let Some(a) = self.agents.get(name) {
            return Some((name.to_string(), a.clone()));
        }
        let kind = match name {
            "claude" => AgentKind::Claude,
            "codex" => AgentKind::Codex,
            _ => return None,
        };
        Some((
            name.to_string(),
            AgentConfig {
                kind,
                command: vec![name.to_string()],
                ..AgentConfig::default()
            },
        ))
    }
}

impl Config {
    /// Every agent a night may call, each with whether it writes and the
    /// table that configures it (`writer`, `agents.codex`; a kind named as
    /// a fallback without a table: `writer.fallback`): the writer, its
    /// fallback, the reviewer, its fallback (those configured).
    pub fn agents_in_play(&self) -> Vec<(bool, String, AgentConfig)> {
        let mut v = Vec::with_capacity(4);
        for (writes, table, primary) in [
            (true, "writer", &self.writer),
            (false, "reviewer", &self.reviewer),
        ] {
            v.push((writes, table.to_string(), primary.clone()));
            v.extend(self.fallback_of(primary).map(|(name, a)| {
                let table = if self.agents.contains_key(&name) {
                    format!("agents.{name}")
                } else {
                    format!("{table}.fallback")
                };
                (writes, table, a)
            }));
        }
        v
    }

    /// `message` (about the agent of `table`, worded for the `[writer]` or
    /// `[reviewer]` it plays) naming `table` instead, for a fallback.
    pub fn name_table(message: &str, writes: bool, table: &str) -> String {
        let role = if writes { "[writer]" } else { "[reviewer]" };
        message.replace(&format!("{role} command"), &format!("[{table}] command"))
    }
}

/// Gives every `[agents.NAME]` table without a `command` its kind's own
/// CLI, as `[writer]` and `[reviewer]` get theirs.
pub(super) fn default_commands(c: &mut Config) {
    for a in c.agents.values_mut() {
        if a.command.is_empty() {
            match a.kind {
                AgentKind::Claude => a.command = vec!["claude".into()],
                AgentKind::Codex => a.command = vec!["codex".into()],
                AgentKind::Command => {}
            }
        }
    }
}

/// The refusals of `[agents.NAME]` and the two `fallback` keys: an agent
/// table needs an executable and names no fallback of its own; a fallback
/// must name an agent (`[agents.NAME]`, or `claude`/`codex`), not its own
/// table's agent, and not one of the same account (paused together).
pub(super) fn validate_fallbacks(path: &Path, text: &str, c: &Config) -> Result<(), ConfigError> {
    let refuse = |table: &str, key: &str, message: String| ConfigError::Invalid {
        path: path.to_path_buf(),
        line: line_in_table(text, table, key),
        key: Some(format!("{table}.{key}")),
        message: format!("`{table}.{key}`: {message}"),
    };
    for (name, a) in &c.agents {
        let table = format!("agents.{name}");
        if a.command.is_empty() || a.command[0].trim().is_empty() {
            return Err(refuse(
                &table,
                "command",
                "must name an executable, e.g. command = [\"./scripts/agent.sh\"]".into(),
            ));
        }
        if a.fallback.is_some() {
            return Err(refuse(
                &table,
                "fallback",
                "only [writer] and [reviewer] name a fallback; remove the key".into(),
            ));
        }
    }
    for (table, a) in [("writer", &c.writer), ("reviewer", &c.reviewer)] {
        let Some(name) = a.fallback.as_deref() else {
            continue;
        };
        let Some((_, fb)) = c.fallback_of(a) else {
            let known: Vec<String> = c.agents.keys().map(|k| format!("{k:?}")).collect();
            return Err(refuse(
                table,
                "fallback",
                format!(
                    "{name:?} names no agent: write the name of an [agents.NAME] table ({}) or \"claude\"/\"codex\" for that CLI, e.g. fallback = \"codex\" with [agents.codex] kind = \"codex\"",
                    if known.is_empty() {
                        "there is none".to_string()
                    } else {
                        known.join(", ")
                    }
                ),
            ));
        };
        let same_agent = fb.kind == a.kind && fb.command == a.command && fb.model == a.model;
        if same_agent && fb.account() == a.account() {
            return Err(refuse(
                table,
                "fallback",
                format!(
                    "{name:?} is the [{table}] agent itself; name another agent, e.g. fallback = \"{}\"",
                    other_kind(a.kind)
                ),
            ));
        }
        if fb.account() == a.account() {
            return Err(refuse(
                table,
                "fallback",
                format!(
                    "{name:?} counts against the same account ({:?}) as [{table}], so it is paused with it; name an agent of another account, or set its `account`",
                    a.account()
                ),
            ));
        }
    }
    Ok(())
}

/// The other vendor's kind, for an example.
fn other_kind(k: AgentKind) -> &'static str {
    match k {
        AgentKind::Codex => "claude",
        _ => "codex",
    }
}

/// The line (from 1) of `key = …` inside the `[table]` of `text`, else the
/// table's header, else 1.
fn line_in_table(text: &str, table: &str, key: &str) -> usize {
    let header = format!("[{table}]");
    let Some(start) = text.lines().position(|l| l.trim() == header) else {
        return 1;
    };
    text.lines()
        .enumerate()
        .skip(start + 1)
        .take_while(|(_, l)| !l.trim_start().starts_with('['))
        .find(|(_, l)| {
            l.trim_start()
                .strip_prefix(key)
                .is_some_and(|r| r.trim_start().starts_with('='))
        })
        .map_or(start + 1, |(i, _)| i + 1)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn refused(text: &str) -> String {
        match super::super::parse(Path::new("c.toml"), text) {
            Ok(_) => String::new(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_fallback_names_an_agent_table_or_a_kind() {
        let c = super::super::parse(
            Path::new("c.toml"),
            "[writer]\nfallback = \"spare\"\n[reviewer]\nkind = \"codex\"\nfallback = \"claude\"\n[agents.spare]\nkind = \"codex\"\nmodel = \"m\"\n",
        )
        .unwrap();
        let (name, a) = c.fallback_of(&c.writer).unwrap();
        assert_eq!(
            (name.as_str(), a.command, a.model.as_deref()),
            ("spare", vec!["codex".to_string()], Some("m"))
        );
        let (name, a) = c.fallback_of(&c.reviewer).unwrap();
        assert_eq!((name.as_str(), a.account()), ("claude", "claude".into()));
        assert!(c.fallback_of(&c.agents["spare"]).is_none());
    }

    #[test]
    fn a_fallback_naming_nothing_itself_or_its_own_account_is_refused_at_its_line() {
        let e = refused("verify = [\"x\"]\n[writer]\nkind = \"claude\"\nfallback = \"gemini\"\n");
        assert!(
            e.starts_with("c.toml:4: `writer.fallback`: \"gemini\" names no agent: write the name of an [agents.NAME] table (there is none)"),
            "{e}"
        );
        let e = refused("[writer]\nfallback = \"claude\"\n");
        assert!(
            e.starts_with("c.toml:2: `writer.fallback`: \"claude\" is the [writer] agent itself; name another agent, e.g. fallback = \"codex\""),
            "{e}"
        );
        let e = refused(
            "[reviewer]\nfallback = \"b\"\n[agents.b]\nkind = \"claude\"\ncommand = [\"claude2\"]\n",
        );
        assert!(
            e.contains("`reviewer.fallback`: \"b\" counts against the same account (\"claude\")"),
            "{e}"
        );
        let e = refused("[agents.b]\nkind = \"codex\"\nfallback = \"claude\"\n");
        assert!(
            e.starts_with("c.toml:3: `agents.b.fallback`: only [writer] and [reviewer]"),
            "{e}"
        );
        assert_eq!(
            refused(
                "[writer]\nfallback = \"b\"\n[agents.b]\nkind = \"claude\"\naccount = \"team\"\n"
            ),
            ""
        );
    }
}
