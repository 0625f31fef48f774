//! The `nightshift` binary: scrubs the token variables from its own
//! environment before any thread exists (SPEC §6), becomes a child subreaper
//! so escaped agent descendants can be swept, then runs the CLI.

fn main() -> std::process::ExitCode {
    // Before the async runtime starts threads: see `secret::scrub_own_env`.
    let removed = nightshift::secret::scrub_own_env(&[]);
    let _ = nightshift::process::become_subreaper();
    nightshift::cli::main(nightshift::cli::Startup { removed })
}
