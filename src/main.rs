//! The `nightshift` binary: scrubs secrets from its own environment before
//! any thread exists and closes its /proc files and memory to other
//! processes of its user (docs/agents.md), then runs the CLI.

/// Variables that may hold the ledger's URL or password (docs/ledger.md). Agents
/// running as the same user can read `/proc/<nightshift>/environ`, so their
/// bytes are wiped from it like the token's; nightshift itself still needs
/// them (`PGPASSWORD` answers for a URL without a password, as in libpq).
const LEDGER_VARS: &[&str] = &["NIGHTSHIFT_DATABASE_URL", "DATABASE_URL", "PGPASSWORD"];

fn main() -> std::process::ExitCode {
    // Before the async runtime starts threads: see `secret::scrub_own_env`.
    // The config's `secrets` go too; their values stay in `removed`.
    let args: Vec<String> = std::env::args().collect();
    let secret_names = nightshift::config::secret_names_hint(&args);
    let extra: Vec<&str> = LEDGER_VARS
        .iter()
        .copied()
        .chain(secret_names.iter().map(String::as_str))
        .collect();
    let removed = nightshift::secret::scrub_own_env(&extra);
    // Every removed value, and the password inside a URL among them, is
    // masked in whatever nightshift keeps, logs or sends from here on.
    // (A weak PGPASSWORD such as `postgres` is not worth it; see `is_weak_password`.)
    let worth = |(n, v): &&(String, nightshift::secret::Secret)| {
        n != "PGPASSWORD" || !nightshift::secret::is_weak_password(v.expose())
    };
    // A ledger URL's secret is its password: the rest (user, host, database)
    // is what a person needs to read in `doctor` and in errors, so only the
    // password is masked there (a URL without one masks nothing).
    nightshift::secret::remember(removed.iter().filter(worth).flat_map(|(n, v)| {
        let url =
            v.expose().contains("://") && n != "PGPASSWORD" && LEDGER_VARS.contains(&n.as_str());
        (!url)
            .then(|| v.expose().to_string())
            .into_iter()
            .chain(nightshift::secret::url_password_forms(v.expose()))
    }));
    // The ledger URL stays in memory only: no child inherits it.
    nightshift::ledger::keep_removed_vars(
        removed
            .iter()
            .filter(|(n, _)| LEDGER_VARS.contains(&n.as_str()))
            .map(|(n, v)| (n.clone(), v.expose().to_string()))
            .collect(),
    );
    // Scrubbing the environment hides nothing from an agent that reads our
    // memory through /proc/<pid>/mem: close both to processes of our user.
    let _ = nightshift::process::become_undumpable();
    nightshift::cli::main(nightshift::cli::Startup { removed })
}
