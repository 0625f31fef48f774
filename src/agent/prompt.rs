//! Prompt composition: the writer's and the reviewer's rules and the
//! contract, with the item's change limits, in one prompt ([`compose_prompt`]).
//!
//! Not for sending it: the backends pass the prompt as the child's stdin.

use super::model::Role;

/// The runner's rules every writer prompt carries (docs/loop.md#writer, docs/loop.md#findings-and-questions).
pub const WRITER_RULES: &str = "\
## Rules of this run (enforced from git; breaking one fails the round)
- Change files only in the current directory, and only within the item's scope if it has one.
- Do not commit, push, switch branches, rewrite history, open or merge pull requests: the runner does that.
- The runner runs the gate commands itself after you finish; run them too if you can.
- If something needs a person's decision, stop and end your answer with a block:
  QUESTION: <the question>
- Problems you noticed outside this item go in a block (one per line, then a blank line); they become issues, not work:
  FINDINGS:
  - <one finding per line>
";

/// The reviewer's instructions (docs/loop.md#review).
pub const REVIEWER_RULES: &str = "\
## You are the reviewer (read-only)
Read the change in the current directory (`git diff` against the base, untracked files included) against the contract.
Do not modify anything. Judge each numbered acceptance condition and say where the evidence is
(a test that checks it, a file and line, a command's output). Approve only if every condition is met.
End your answer with one JSON object on its own line:
{\"verdict\":\"approve\",\"findings\":[],\"conditions\":[{\"index\":1,\"met\":true,\"evidence\":\"<where it shows>\"}]}
or
{\"verdict\":\"request_changes\",\"findings\":[\"<what must change>\", ...],\"conditions\":[...]}
(`conditions` is `[]` when the item has none.)
";

/// Composes a prompt: recipe template (if any), rules, the contract and the
/// previous round's feedback.
pub fn compose_prompt(
    role: Role,
    contract: &crate::contract::Contract,
    feedback: &str,
    base_commit: &str,
) -> String {
    let mut p = String::new();
    if let (Role::Writer, Some(r)) = (role, &contract.recipe) {
        p.push_str(&r.template);
        p.push_str("\n\n");
    }
    p.push_str(&format!("# Item: {}\n\n", contract.title));
    if !contract.context.is_empty() {
        p.push_str("## Context (the backlog's rules)\n");
        for c in &contract.context {
            p.push_str(&format!("> {c}\n"));
        }
        p.push('\n');
    }
    if !contract.details.is_empty() {
        p.push_str("## Details\n");
        for d in &contract.details {
            p.push_str(&format!("{d}\n"));
        }
        p.push('\n');
    }
    if !contract.accept.is_empty() {
        p.push_str("## Acceptance conditions\n");
        // Numbered: the reviewer's verdict refers to them by number.
        for (i, a) in contract.accept.iter().enumerate() {
            p.push_str(&format!("{}. {a}\n", i + 1));
        }
        p.push('\n');
    }
    if !contract.verify.is_empty() {
        p.push_str("## Gate (the runner runs these; all must pass)\n");
        for v in &contract.verify {
            p.push_str(&format!("- `{v}`\n"));
        }
        p.push('\n');
    }
    if !contract.scope.is_empty() {
        p.push_str(&format!(
            "## Scope\nOnly these paths may change: {}\n\n",
            contract.scope.join(", ")
        ));
    }
    p.push_str(&change_limits_section(contract));
    match role {
        Role::Writer => p.push_str(WRITER_RULES),
        Role::Reviewer => {
            p.push_str(&format!("The base commit is {base_commit}.\n"));
            p.push_str(REVIEWER_RULES);
        }
    }
    if !feedback.trim().is_empty() {
        p.push_str("\n## Feedback from the previous round\n");
        p.push_str(feedback);
        p.push('\n');
    }
    p
}

/// The prompt's section on the change's size, the protected paths and the
/// ones the item's `allow:` lifts (docs/loop.md#proof): the runner checks
/// them from git after the writer.
fn change_limits_section(contract: &crate::contract::Contract) -> String {
    let l = &contract.limits;
    let mut s = format!(
        "## Size of the change\nAt most {} changed files and {} lines added and removed in all, counted by git against the base; a larger change fails the item.\n",
        l.max_changed_files.value, l.max_diff_lines.value
    );
    let protected = contract.protected_paths();
    if !protected.is_empty() {
        s.push_str(&format!(
            "These paths must never change, whatever the scope: {}\n",
            protected.join(", ")
        ));
    }
    if !contract.allow.is_empty() {
        s.push_str(&format!(
            "This item may change these protected paths all the same (its approved `allow:`; still only inside the scope): {}\n",
            contract.allow.join(", ")
        ));
    }
    s.push('\n');
    s
}
