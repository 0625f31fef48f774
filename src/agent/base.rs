//! What every backend starts from: the [`process::Command`]
//! with the call's environment, working directory, limits and files (prompt,
//! stdout, stderr under the call's directory).
//!
//! Not for a backend's flags or output format: each backend adds its own.

use std::path::{Path, PathBuf};

use super::model::{AgentError, Call, Role};
use crate::process;

/// Why a call that was cancelled (a signal, or the claim lost to another
/// worker) failed, in the words the run shows for such an item.
pub(crate) const CANCELLED: &str = "interrupted";

/// Why a call whose output passed its cap failed, for the round's reason.
pub(crate) fn over_output_cap(call: &Call) -> String {
    format!(
        "killed: it printed more than {} (max_agent_output); the end of its output is kept",
        crate::config::format_size(call.max_output)
    )
}

/// Builds the process command shared by every backend: cwd, env with `TZ`,
/// timeout, streamed log files, redaction, run-as.
pub(crate) fn base_command(
    argv: &[String],
    call: &Call,
    extra_env: &[(&str, String)],
) -> process::Command {
    let mut env = call.env.clone();
    env.insert("TZ".into(), call.tz.name().to_string());
    for (k, v) in extra_env {
        env.insert((*k).to_string(), v.clone());
    }
    let role = call.role.as_str();
    let mut cmd = process::Command::new(&argv[0])
        .args(&argv[1..])
        .cwd(&call.cwd)
        .env_map(env)
        .timeout(call.timeout)
        .max_output(call.max_output)
        .stdout_file(call.log_dir.join(format!("{role}.stdout")))
        .stderr_file(call.log_dir.join(format!("{role}.stderr")))
        .redactor(crate::secret::Redactor::with_known(&call.secrets));
    if let Some(u) = &call.run_as {
        cmd = cmd.run_as(u.clone());
    }
    if let Some(policy) = &call.sandbox {
        cmd = cmd.sandbox(policy.clone());
    }
    cmd
}

/// Writes the command protocol's files for one call and returns their paths:
/// (prompt, contract, feedback).
pub(crate) fn write_call_files(call: &Call) -> Result<(PathBuf, PathBuf, PathBuf), AgentError> {
    let err = |source| AgentError::Files {
        role: call.role.as_str(),
        dir: call.log_dir.clone(),
        source,
    };
    let role = call.role.as_str();
    let prompt = call.log_dir.join(format!("{role}.prompt.md"));
    let contract = call.log_dir.join("contract.json");
    let feedback = call.log_dir.join(format!("{role}.feedback.txt"));
    std::fs::write(&prompt, &call.prompt).map_err(err)?;
    std::fs::write(&contract, &call.contract_json).map_err(err)?;
    std::fs::write(&feedback, &call.feedback).map_err(err)?;
    if let Some(u) = &call.run_as {
        // The agent runs as another user: let it read its own call files.
        for p in [&call.log_dir, &prompt, &contract, &feedback] {
            let _ = nix::unistd::chown(
                p.as_path(),
                Some(nix::unistd::Uid::from_raw(u.uid)),
                Some(nix::unistd::Gid::from_raw(u.gid)),
            );
        }
    }
    Ok((prompt, contract, feedback))
}

/// Path helper: the per-call log directory of a round.
pub fn call_dir(item_dir: &Path, round: u32, role: Role, attempt: u32) -> PathBuf {
    item_dir.join(format!("round-{round:02}-{}-{attempt}", role.as_str()))
}
