//! The commented config `nightshift init` writes ([`TEMPLATE`]), with a guessed gate or a marked
//! placeholder. Its lines are also where a refusal finds the line to suggest (see `error`).

/// The gate `nightshift init` writes when it finds no test command in the
/// repository: it fails every item with a message saying what to set, and
/// `doctor` and `plan` refuse it by name (docs/config.md `verify`).
pub const PLACEHOLDER_GATE: &str = "echo 'nightshift: no gate set; write your test command in verify in .nightshift/config.toml' >&2; exit 1";

/// [`TEMPLATE`] with `verify` set to `gate` (a guessed command), or to
/// [`PLACEHOLDER_GATE`] marked as one when `gate` is `None`.
pub fn template_with_gate(gate: Option<&str>) -> String {
    let line = TEMPLATE
        .lines()
        .find(|l| l.starts_with("verify = "))
        .expect("the template sets verify");
    let new = match gate {
        Some(g) => format!(
            "verify = {}        # gate commands, run with `sh -c` in the checkout (guessed by init)",
            toml::Value::from(vec![g])
        ),
        None => format!(
            "# PLACEHOLDER: set your test command (e.g. [\"sh test.sh\"]); nightshift init found none.\nverify = {}",
            toml::Value::from(vec![PLACEHOLDER_GATE])
        ),
    };
    TEMPLATE.replacen(line, &new, 1)
}

/// The `[sandbox]` table `init` adds when the gate's or an agent's program
/// lies where the sandbox would hide it (docs/security.md#toolchains):
/// `read_line` (`read = [...]`) under a comment naming each program and
/// where it was found (`found`).
pub fn sandbox_read_table(read_line: &str, found: &[String]) -> String {
    format!(
        "\n[sandbox]                      # docs/security.md#the-sandbox\n# init found {} outside the system directories: shown read-only inside\n{read_line}\n",
        found.join(", ")
    )
}

/// The commented config `nightshift init` writes (docs/config.md).
pub const TEMPLATE: &str = r#"# nightshift configuration (README: Configuration). Every key is optional; the values
# shown are the defaults unless marked "example".

backlog = "NEXT.md"            # the markdown checkbox backlog
base = "main"                  # PRs start from <remote>/<base> and target it
remote = "origin"
label = "autopilot"            # put on every PR (created if missing)
findings_label = "autopilot-found"
verify = ["cargo test"]        # gate commands, run with `sh -c` in the checkout
deadline = "07:00"             # no item or round starts after this local time
# timezone = "Asia/Taipei"     # default: $TZ, then the system zone
# github_repo = "owner/repo"   # default: GH_REPO, then the remote's URL
tick_in_pr = false             # true: each PR ticks its own box (PRs then conflict)
setup = []                     # e.g. ["npm ci"], run in each fresh checkout
# agent_user = "nightshift"    # run agents and gates as this user when root
# agents_as_root = false       # root without agent_user: true lets agents run as root (they can read the token)
secrets = []                   # more variables agents and gates never see
gate_env = []                  # variables passed to gate commands only
max_findings_per_item = 5      # writer FINDINGS filed as issues, per item
max_agent_output = "1GiB"      # an agent call printing more is killed; its round fails
# max_open_prs = 10            # example: no new PR while 10 nightshift PRs are open (default: no limit)
draft = false                  # true: open PRs as drafts, marked ready once CI is green
# ci_log_lines = 80             # lines of a failed CI job's log a fix round's writer reads
protected = []                 # e.g. ["migrations/**"]: more paths no writer may change (CI config and .nightshift/ always are)

[limits]                       # caps; an item may lower them, never raise them.
# The defaults, shown commented out: uncomment a line to set your own cap
# (cards then show it as "policy" rather than "default").
# rounds = 3
# agent_timeout = "60m"
# gate_timeout = "20m"
# item_timeout = "2h"
# max_tokens = 20000000          # per item, input (cache reads included) + output, as the agents report
# max_cost_usd = 20.0            # per item
# max_cost_usd_per_run = 100.0   # for the whole night
# max_attempts = 3               # nights an item may fail before it is blocked
# max_tend_rounds = 3            # writer rounds per tended PR per night
# limit_buffer = "120s"
# limit_sleep_min = "60s"
# limit_sleep_max = "6h"
# max_changed_files = 100        # files one item's change may touch
# max_diff_lines = 5000          # lines one item's change may add and remove
# ci_rounds = 2                  # fix rounds per item for a red required check (0: none)
# ci_wait = "45m"                # wait for a conclusive CI result after each push

[writer]
kind = "claude"                # claude | codex | command
command = ["claude"]           # the executable and any extra arguments
# fallback = "codex"           # example: another agent while this account is paused (an [agents.NAME] or a kind)

[reviewer]
kind = "claude"
command = ["claude"]

# [[recipes]]                  # a title prefix selects a prompt template
# prefix = "fix:"
# prompt = "docs/FIX.md"
"#;
