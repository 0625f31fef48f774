//! What tending says in words: the feedback a tend's writer rounds get, the
//! prompt for a conflict with the base, and nightshift's one answering
//! comment on the PR (docs/github.md "The second night"). Every text from
//! GitHub is quoted, cropped and defused here. Not what a PR needs (the
//! parent module) nor what the report shows ([`super::tended`]).

use std::fmt::Write as _;

use super::{Feedback, FeedbackKind, short};

/// The feedback a tend's writer rounds get: each request verbatim, with
/// author, file and line, numbered so the answer can refer to them.
pub fn writer_feedback(pr: u64, comments: &[Feedback]) -> String {
    let mut s = format!(
        "A person reviewed pull request #{pr} and asked for the changes below (verbatim). Address each one in the code; do not reply on GitHub (nightshift answers after the gate and the reviewer).\n"
    );
    for (i, fb) in comments.iter().enumerate() {
        let place = match (&fb.path, fb.line) {
            (Some(p), Some(l)) => format!(" on {p}, line {l}"),
            (Some(p), None) => format!(" on {p}"),
            _ => String::new(),
        };
        let _ = writeln!(
            s,
            "\n{}. {} ({}){place}:",
            i + 1,
            fb.author,
            kind_words(fb.kind)
        );
        for l in fb.body.lines() {
            let _ = writeln!(s, "   > {l}");
        }
    }
    s
}

/// What the writer resolving a conflict with the base is told: both sides
/// by commit and role, and the conflicted files. The branch's commits did
/// not rebase cleanly, so its change is brought onto the base as one
/// (`git merge --squash`) and the conflicts are left in the files.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConflictFacts<'a> {
    pub pr: u64,
    /// The PR's branch.
    pub branch: &'a str,
    /// The base branch (config `base`).
    pub base: &'a str,
    /// The base's commit the change is brought onto (ours, kept).
    pub onto: &'a str,
    /// The branch head whose change is brought in (theirs).
    pub applying: &'a str,
    /// The files with conflict markers (relative paths).
    pub files: &'a [String],
}

/// The writer's task for a conflict the rebase could not resolve.
pub fn conflict_prompt(c: &ConflictFacts<'_>) -> String {
    let mut s = format!(
        "Pull request #{} (branch {}) no longer applies to {}: another change was merged there first. Its commits do not rebase cleanly, so its whole change was brought onto {} as one, and the conflicts are left in the files.\n\
         - ours (kept): {} at {} — what is on {} now\n\
         - theirs (to bring in): this branch's change, as of its head {}\n\
         Conflicted files (they contain <<<<<<< ======= >>>>>>> markers):\n",
        c.pr,
        c.branch,
        c.base,
        c.base,
        c.base,
        short(c.onto),
        c.base,
        short(c.applying)
    );
    for f in c.files {
        let _ = writeln!(s, "- {f}");
    }
    s.push_str("Resolve every conflict so both changes hold (keep what was merged, and redo this branch's change on top of it), remove every marker, and change nothing else. Do not run git: nightshift commits and pushes.\n");
    s
}

/// Facts for the one comment answering a tended PR.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer<'a> {
    /// The requests answered (from the card).
    pub requests: &'a [Feedback],
    /// `Some(files)` when the branch was brought onto a moved base: the
    /// files the writer had to resolve (empty: a clean rebase).
    pub rebased: Option<&'a [String]>,
    /// The base branch.
    pub base: &'a str,
    /// Files changed by this night's work, from git.
    pub changed: &'a [String],
    /// The gate commands and their exit codes, as nightshift ran them.
    pub gate: &'a [(String, Option<i32>)],
    /// The reviewer's verdict word (`approve`).
    pub verdict: &'a str,
    /// The head before and after the push.
    pub old_head: &'a str,
    pub new_head: &'a str,
}

/// The one comment a successful tend posts: each request quoted (mentions
/// defused), what changed, the gate result and the reviewer's verdict.
/// Names from git and the gate are shown as code.
pub fn answer_comment(a: &Answer<'_>) -> String {
    let mut s = format!(
        "nightshift updated this PR: {} → {}.\n",
        code(short(a.old_head)),
        code(short(a.new_head))
    );
    match a.rebased {
        Some([]) => {
            let _ = writeln!(s, "\n- Rebased onto {} (it applied cleanly).", code(a.base));
        }
        Some(files) => {
            let names: Vec<String> = files.iter().map(|f| code(f)).collect();
            let _ = writeln!(
                s,
                "\n- Rebased onto {}; the writer resolved the conflicts in {}.",
                code(a.base),
                names.join(", ")
            );
        }
        None => {}
    }
    if !a.requests.is_empty() {
        s.push_str("\nRequests answered:\n");
    }
    for (i, fb) in a.requests.iter().enumerate() {
        let place = match (&fb.path, fb.line) {
            (Some(p), Some(l)) => format!(" on {}", code(&format!("{p}:{l}"))),
            (Some(p), None) => format!(" on {}", code(p)),
            _ => String::new(),
        };
        let first = fb.body.lines().find(|l| !l.trim().is_empty()).unwrap_or("");
        let _ = writeln!(
            s,
            "{}. {}{place}: “{}”",
            i + 1,
            defuse(&fb.author),
            defuse(&crop(first, 200))
        );
    }
    let changed: Vec<String> = a.changed.iter().map(|f| code(f)).collect();
    let _ = writeln!(
        s,
        "\nChanged: {}.",
        if changed.is_empty() {
            "nothing but the rebase".to_string()
        } else {
            changed.join(", ")
        }
    );
    let gate: Vec<String> = a
        .gate
        .iter()
        .map(|(cmd, exit)| match exit {
            Some(c) => format!("{} exit {c}", code(cmd)),
            None => format!("{} (no exit code)", code(cmd)),
        })
        .collect();
    let _ = writeln!(
        s,
        "Gate (run by nightshift): {}.",
        if gate.is_empty() {
            "none configured".to_string()
        } else {
            gate.join("; ")
        }
    );
    let _ = writeln!(s, "Reviewer (read-only): {}.", code(a.verdict));
    s.push_str("\nThe evidence card in the description is updated. Nothing was merged.\n");
    s
}

/// How a kind of feedback is named to people and the writer.
pub(super) fn kind_words(kind: FeedbackKind) -> &'static str {
    match kind {
        FeedbackKind::ChangesRequested => "review, changes requested",
        FeedbackKind::Review => "review",
        FeedbackKind::LineComment => "line comment",
        FeedbackKind::Comment => "comment",
    }
}

/// `text` as inline Markdown code, whatever backticks it holds.
fn code(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') {
        " "
    } else {
        ""
    };
    format!("{fence}{pad}{text}{pad}{fence}")
}

/// `text` quoted in a comment without notifying anyone: `@name` would ping
/// that account, `#12` would link an issue.
fn defuse(text: &str) -> String {
    text.replace('@', "@\u{200b}").replace('#', "#\u{200b}")
}

/// At most `max` characters of `text`, with `…` when cut.
pub(super) fn crop(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        text.to_string()
    } else {
        format!("{}…", text.chars().take(max).collect::<String>())
    }
}
