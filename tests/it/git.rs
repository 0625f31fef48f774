//! git, slot and proof against real git in temporary directories, with a
//! local bare repository as the remote (docs/loop.md#checkout, docs/loop.md#writer, docs/loop.md#proof, docs/agents.md last rule).

use std::collections::BTreeMap;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use nightshift::git::{Git, GitError};
use nightshift::proof::{ChangeStatus, Proof, RoundStart, worktree_fingerprint};
use nightshift::slot::{Identity, Lease, Slot, SlotError, branch_name, slot_path};
use sha2::{Digest, Sha256};

/// Runs a setup git command (not through nightshift) and returns its stdout.
fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .args(["-c", "user.name=Test", "-c", "user.email=test@example.com"])
        .args([
            "-c",
            "init.defaultBranch=main",
            "-c",
            "core.hooksPath=/dev/null",
        ])
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

fn write(path: &Path, content: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, content).unwrap();
}

struct Fixture {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    remote: PathBuf,
    user: PathBuf,
    data: PathBuf,
}

const LIB_RS: &str = "pub fn one() -> u32 {\n    1\n}\n\npub fn two() -> u32 {\n    2\n}\n";

impl Fixture {
    /// A bare remote whose `main` has README.md, src/lib.rs, src/old.rs,
    /// docs/guide.md and a binary file; the user's clone of it.
    fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().canonicalize().unwrap();
        let remote = root.join("remote.git");
        let user = root.join("user");
        let data = root.join("data");
        std::fs::create_dir_all(&remote).unwrap();
        git(&remote, &["init", "--bare", "--quiet"]);
        let seed = root.join("seed");
        std::fs::create_dir_all(&seed).unwrap();
        git(&seed, &["init", "--quiet"]);
        write(&seed.join("README.md"), "# demo\n");
        write(&seed.join("src/lib.rs"), LIB_RS);
        write(&seed.join("src/old.rs"), "// old\nfn old() {}\n");
        write(&seed.join("docs/guide.md"), "guide\n");
        std::fs::create_dir_all(seed.join("assets")).unwrap();
        std::fs::write(seed.join("assets/logo.bin"), [0u8, 1, 2, 255, 0, 7]).unwrap();
        write(&seed.join(".gitignore"), "target/\n");
        git(&seed, &["add", "-A"]);
        git(&seed, &["commit", "--quiet", "-m", "initial"]);
        git(
            &seed,
            &["remote", "add", "origin", remote.to_str().unwrap()],
        );
        git(&seed, &["push", "--quiet", "origin", "main"]);
        git(
            &root,
            &["clone", "--quiet", remote.to_str().unwrap(), "user"],
        );
        Fixture {
            _tmp: tmp,
            root,
            remote,
            user,
            data,
        }
    }

    /// Another contributor pushes to the remote's main; returns the new tip.
    fn advance_remote(&self, file: &str, content: &str) -> String {
        let seed = self.root.join("seed");
        git(&seed, &["pull", "--quiet", "--ff-only", "origin", "main"]);
        write(&seed.join(file), content);
        git(&seed, &["add", "-A"]);
        git(&seed, &["commit", "--quiet", "-m", &format!("add {file}")]);
        git(&seed, &["push", "--quiet", "origin", "main"]);
        self.remote_main()
    }

    fn remote_main(&self) -> String {
        git(&self.remote, &["rev-parse", "refs/heads/main"])
    }

    fn slot_path(&self) -> PathBuf {
        slot_path(&self.data, &self.user, 0)
    }

    /// The next item's slot (`nightshift/next-1a2b3c4d`), from the run's
    /// `pinned` base and the last item's `kept` walk.
    fn prepare_next(&self, pinned: Option<&str>, kept: Option<nightshift::slot::KeptWalk>) -> Slot {
        let remote = self.remote.display().to_string();
        Slot::prepare_at(nightshift::slot::PrepareAt {
            dir: &self.slot_path(),
            repo: &self.user,
            remote: "origin",
            urls: (remote.clone(), remote),
            base: "main",
            branch: "nightshift/next-1a2b3c4d",
            token: None,
            stop: None,
            pinned,
            kept,
        })
        .expect("prepared")
    }

    fn prepare(&self, branch: &str) -> Slot {
        self.try_prepare("origin", branch).expect("prepare")
    }

    /// [`Slot::prepare`] of `branch` on main from the user's `remote`, no
    /// token, no stop.
    fn try_prepare(&self, remote: &str, branch: &str) -> Result<Slot, SlotError> {
        Slot::prepare(
            &self.slot_path(),
            &self.user,
            remote,
            "main",
            branch,
            None,
            None,
        )
    }
}

/// SHA-256 over every entry under `dir` (path, kind, mode, content or link
/// target), .git included: equal means byte-identical.
fn tree_hash(dir: &Path) -> String {
    fn walk(base: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let entry = entry.unwrap();
            let path = entry.path();
            let rel = path
                .strip_prefix(base)
                .unwrap()
                .to_string_lossy()
                .into_owned();
            let meta = std::fs::symlink_metadata(&path).unwrap();
            let mode = meta.permissions().mode();
            if meta.file_type().is_symlink() {
                let t = std::fs::read_link(&path).unwrap();
                out.insert(rel, format!("link {mode:o} {}", t.display()).into_bytes());
            } else if meta.is_dir() {
                out.insert(rel, format!("dir {mode:o}").into_bytes());
                walk(base, &path, out);
            } else {
                let mut v = format!("file {mode:o} ").into_bytes();
                v.extend(std::fs::read(&path).unwrap());
                out.insert(rel, v);
            }
        }
    }
    let mut entries = BTreeMap::new();
    walk(dir, dir, &mut entries);
    let mut h = Sha256::new();
    for (k, v) in entries {
        h.update(k.as_bytes());
        h.update([0]);
        h.update(&v);
        h.update([0]);
    }
    hex::encode(h.finalize())
}

fn author() -> Identity {
    Identity {
        name: "Item Author".into(),
        email: "author@example.com".into(),
    }
}

fn runner() -> Identity {
    Identity {
        name: "nightshift".into(),
        email: "nightshift@example.com".into(),
    }
}

fn proof(slot: &Slot, start: &RoundStart, claimed: &[&str], scope: &[&str]) -> Proof {
    let claimed: Vec<String> = claimed.iter().map(|s| s.to_string()).collect();
    let scope: Vec<String> = scope.iter().map(|s| s.to_string()).collect();
    Proof::collect(&slot.path, start, &claimed, &scope).expect("proof")
}

const BRANCH: &str = "nightshift/demo-1a2b3c4d";

#[test]
fn slot_starts_at_the_remote_base_and_leaves_a_diverged_dirty_user_repo_byte_identical() {
    let fx = Fixture::new();
    let remote_tip = fx.advance_remote("NEWS.md", "news from the remote\n");
    // The user's main diverged (a local commit, origin/main not fetched) and
    // the checkout is dirty: modified, staged and untracked files.
    write(&fx.user.join("local.txt"), "local work\n");
    git(&fx.user, &["add", "local.txt"]);
    git(&fx.user, &["commit", "--quiet", "-m", "local commit"]);
    write(&fx.user.join("README.md"), "# dirty edit\n");
    write(&fx.user.join("staged.txt"), "staged\n");
    git(&fx.user, &["add", "staged.txt"]);
    write(&fx.user.join("untracked.txt"), "untracked\n");
    let user_origin_main = git(&fx.user, &["rev-parse", "origin/main"]);
    assert_ne!(
        user_origin_main, remote_tip,
        "the user's origin/main is stale"
    );
    let before = tree_hash(&fx.user);

    let slot = fx.prepare(BRANCH);

    assert_eq!(
        slot.base_commit, remote_tip,
        "base is the remote's main, fetched fresh"
    );
    assert_eq!(git(&slot.path, &["rev-parse", "HEAD"]), remote_tip);
    assert_eq!(
        git(&slot.path, &["symbolic-ref", "HEAD"]),
        format!("refs/heads/{BRANCH}")
    );
    assert_eq!(
        git(&slot.path, &["status", "--porcelain"]),
        "",
        "slot is clean"
    );
    assert!(slot.path.join("NEWS.md").exists());
    assert!(
        !slot.path.join("local.txt").exists(),
        "nothing of the user's local commit"
    );
    assert!(!slot.path.join("untracked.txt").exists());
    assert_eq!(
        git(&slot.path, &["remote", "get-url", "origin"]),
        fx.remote.to_str().unwrap()
    );
    // A separate clone borrowing objects, not a worktree of the user's repo.
    assert!(slot.path.join(".git").is_dir());
    let alternates =
        std::fs::read_to_string(slot.path.join(".git/objects/info/alternates")).unwrap();
    assert!(
        alternates.contains(fx.user.join(".git/objects").to_str().unwrap()),
        "{alternates}"
    );
    assert!(!fx.user.join(".git/worktrees").exists());
    // The clone did not keep the user's local branches as if they were origin's.
    let tracking = git(
        &slot.path,
        &["for-each-ref", "--format=%(refname)", "refs/remotes/"],
    );
    assert_eq!(tracking, "refs/remotes/origin/main");
    assert!(!slot.reused);

    assert_eq!(
        tree_hash(&fx.user),
        before,
        "user's working tree and .git unchanged"
    );
}

#[test]
fn a_relative_remote_url_is_resolved_from_the_users_repo() {
    let fx = Fixture::new();
    git(&fx.user, &["remote", "set-url", "origin", "../remote.git"]);
    let slot = fx.prepare(BRANCH);
    assert_eq!(slot.base_commit, fx.remote_main());
    assert_eq!(slot.fetch_url, fx.remote.to_str().unwrap());
}

#[test]
fn a_slot_follows_the_users_remote_and_survives_a_failed_fetch() {
    let fx = Fixture::new();
    // A URL rewritten by the user's own `insteadOf` is fetched rewritten.
    git(
        &fx.user,
        &[
            "config",
            &format!("url.{}/.insteadOf", fx.root.display()),
            "demo:",
        ],
    );
    git(
        &fx.user,
        &["remote", "set-url", "origin", "demo:remote.git"],
    );
    let slot = fx.prepare(BRANCH);
    assert_eq!(slot.fetch_url, fx.remote.to_str().unwrap());

    // The user moves the remote: the reused slot fetches from the new place.
    let moved = fx.root.join("moved.git");
    std::fs::rename(&fx.remote, &moved).unwrap();
    let err = fx.try_prepare("origin", BRANCH).unwrap_err();
    assert!(err.to_string().contains("git fetch"), "{err}");
    assert!(
        slot.path.join(".git").is_dir(),
        "a network failure does not cost the slot"
    );
    git(
        &fx.user,
        &["remote", "set-url", "origin", moved.to_str().unwrap()],
    );
    git(
        &fx.user,
        &[
            "remote",
            "set-url",
            "--push",
            "origin",
            "/nonexistent/push.git",
        ],
    );
    let again = fx.prepare(BRANCH);
    assert!(again.reused, "{:?}", again.recloned_because);
    assert_eq!(again.push_url, "/nonexistent/push.git");
    assert_eq!(
        git(&again.path, &["remote", "get-url", "origin"]),
        moved.to_str().unwrap()
    );
    assert_eq!(
        git(&again.path, &["remote", "get-url", "--push", "origin"]),
        "/nonexistent/push.git"
    );

    // A remote the user does not have is an error naming the repository.
    let err = fx.try_prepare("upstream", BRANCH).unwrap_err();
    assert!(err.to_string().contains(fx.user.to_str().unwrap()), "{err}");
}

#[test]
fn a_second_prepare_resets_the_slot_instead_of_cloning_it() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let marker = slot.path.join(".git/nightshift-test-marker");
    std::fs::write(&marker, "survives a reset").unwrap();
    // Leftovers of a previous item: edits, untracked and ignored files.
    write(&slot.path.join("src/lib.rs"), "garbage\n");
    write(&slot.path.join("scratch/new.txt"), "scratch\n");
    write(
        &slot.path.join("target/debug/out"),
        "ignored build output\n",
    );
    std::fs::remove_file(slot.path.join("README.md")).unwrap();
    let tip = fx.advance_remote("second.md", "second\n");

    let again = fx.prepare("nightshift/other-99999999");

    assert!(
        again.reused,
        "reused, not recloned: {:?}",
        again.recloned_because
    );
    assert!(marker.exists(), "the slot's .git survived: no new clone");
    assert_eq!(again.base_commit, tip);
    assert_eq!(
        git(&again.path, &["status", "--porcelain", "--ignored"]),
        ""
    );
    assert!(!again.path.join("target").exists() && !again.path.join("scratch").exists());
    assert_eq!(
        std::fs::read_to_string(again.path.join("src/lib.rs")).unwrap(),
        LIB_RS
    );
    let branches = git(
        &again.path,
        &["for-each-ref", "--format=%(refname)", "refs/heads/"],
    );
    assert_eq!(
        branches, "refs/heads/nightshift/other-99999999",
        "old item branches pruned"
    );
}

#[test]
fn a_tampered_or_broken_slot_is_removed_and_cloned_again() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let marker = slot.path.join(".git/nightshift-test-marker");
    std::fs::write(&marker, "x").unwrap();
    git(
        &slot.path,
        &["config", "core.sshCommand", "touch /tmp/pwned"],
    );

    let again = fx.prepare(BRANCH);
    assert!(!again.reused);
    let reason = again.recloned_because.clone().unwrap();
    assert_eq!(reason, ".git/config changed since the slot was prepared");
    assert!(!marker.exists(), "a new clone");
    let config = std::fs::read_to_string(again.path.join(".git/config")).unwrap();
    assert!(!config.contains("sshCommand"), "clean config: {config}");

    // A reset that fails (a stale lock left by a killed git): recloned.
    std::fs::write(again.path.join(".git/index.lock"), "").unwrap();
    let after_lock = fx.prepare(BRANCH);
    let reason = after_lock.recloned_because.clone().unwrap();
    assert!(
        reason.contains("reset failed") && reason.contains("index.lock"),
        "{reason}"
    );
    assert!(!after_lock.path.join(".git/index.lock").exists());

    // Not a git repository any more (.git deleted): recloned as well.
    std::fs::remove_dir_all(again.path.join(".git")).unwrap();
    let third = fx.prepare(BRANCH);
    assert!(!third.reused && third.recloned_because.is_some());
    assert_eq!(git(&third.path, &["rev-parse", "HEAD"]), fx.remote_main());
}

#[test]
fn push_lands_the_branch_on_the_remote_with_base_as_parent_and_exactly_the_edits() {
    let fx = Fixture::new();
    // The user's local main diverged: the pushed branch must not carry it.
    write(&fx.user.join("local.txt"), "local\n");
    git(&fx.user, &["add", "local.txt"]);
    git(&fx.user, &["commit", "--quiet", "-m", "local"]);
    let user_before = tree_hash(&fx.user);
    let slot = fx.prepare(BRANCH);
    write(
        &slot.path.join("src/lib.rs"),
        &LIB_RS.replace("2\n", "22\n"),
    );
    write(&slot.path.join("src/new.rs"), "pub fn new() {}\n");
    std::fs::remove_file(slot.path.join("src/old.rs")).unwrap();
    write(&slot.path.join("target/ignored.o"), "build output\n");

    let sha = slot
        .commit_all("nightshift: demo\n\nbody", &author(), &runner())
        .expect("commit");
    slot.push(None).expect("push");

    let remote_ref = format!("refs/heads/{BRANCH}");
    assert_eq!(git(&fx.remote, &["rev-parse", &remote_ref]), sha);
    assert_eq!(
        git(&fx.remote, &["rev-parse", &format!("{sha}^")]),
        fx.remote_main()
    );
    let names = git(
        &fx.remote,
        &["diff", "--name-status", &fx.remote_main(), &sha],
    );
    assert_eq!(names, "M\tsrc/lib.rs\nA\tsrc/new.rs\nD\tsrc/old.rs");
    let who = git(
        &fx.remote,
        &["log", "-1", "--format=%an <%ae>|%cn <%ce>|%B", &sha],
    );
    assert_eq!(
        who,
        "Item Author <author@example.com>|nightshift <nightshift@example.com>|nightshift: demo\n\nbody"
    );
    assert_eq!(
        git(&fx.remote, &["log", "--format=%H", &remote_ref])
            .lines()
            .count(),
        2
    );

    // Nothing to commit is an error, not an empty commit.
    assert!(matches!(
        slot.commit_all("again", &author(), &runner()),
        Err(SlotError::NothingToCommit { .. })
    ));
    slot.discard().unwrap();
    assert_eq!(
        tree_hash(&fx.user),
        user_before,
        "commit, push and discard left the user's repo alone"
    );
}

#[test]
fn planted_hooks_never_run_and_a_tampered_slot_is_not_committed_or_pushed() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let evidence = fx.root.join("hook-ran");
    for hook in [
        "pre-commit",
        "commit-msg",
        "post-commit",
        "pre-push",
        "post-checkout",
        "reference-transaction",
    ] {
        let path = slot.path.join(".git/hooks").join(hook);
        write(
            &path,
            &format!("#!/bin/sh\necho {hook} >> '{}'\n", evidence.display()),
        );
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    write(&slot.path.join("src/new.rs"), "pub fn new() {}\n");

    // The slot API refuses to run git in a slot whose hooks changed...
    match slot.commit_all("x", &author(), &runner()) {
        Err(e @ SlotError::Tampered { .. }) => {
            assert!(e.to_string().contains(".git/hooks/"), "{e}")
        }
        other => panic!("expected Tampered, got {other:?}"),
    }
    assert!(matches!(slot.push(None), Err(SlotError::Tampered { .. })));
    // ...and the git builder itself never runs them anyway.
    let g = Git::new(&slot.path)
        .env("GIT_AUTHOR_NAME", "a")
        .env("GIT_AUTHOR_EMAIL", "a@e")
        .env("GIT_COMMITTER_NAME", "c")
        .env("GIT_COMMITTER_EMAIL", "c@e");
    g.run(&["add", "-A"]).unwrap();
    g.run(&["commit", "-q", "-m", "with hooks planted"])
        .unwrap();
    g.run(&["checkout", "-q", "-b", "side"]).unwrap();
    g.push_with_lease(fx.remote.to_str().unwrap(), "side", "")
        .unwrap();
    assert!(
        !evidence.exists(),
        "a hook ran: {:?}",
        std::fs::read_to_string(&evidence)
    );
    // Control: plain git does run them, so the check above means something.
    Command::new("git")
        .args([
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@e",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            "ctl",
        ])
        .current_dir(&slot.path)
        .status()
        .unwrap();
    assert!(evidence.exists(), "control: the planted hook is executable");

    // A tampered slot is removed rather than reset by git.
    slot.discard().unwrap();
    assert!(!slot.path.exists());
}

#[test]
fn proof_counts_edits_new_files_and_deletions_with_line_stats() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    assert!(proof(&slot, &start, &[], &[]).is_empty(), "no change yet");

    write(
        &slot.path.join("src/lib.rs"),
        &LIB_RS.replace(
            "    2\n",
            "    2 + 0\n}\n\npub fn three() -> u32 {\n    3\n",
        ),
    );
    write(&slot.path.join("src/new/mod.rs"), "a\nb\nc\n");
    std::fs::remove_file(slot.path.join("src/old.rs")).unwrap();
    std::fs::write(slot.path.join("assets/logo.bin"), [9u8, 0, 9, 0]).unwrap();
    write(&slot.path.join("target/out.o"), "ignored\n");
    // A staged new file counts as well.
    write(&slot.path.join("docs/staged.md"), "one\n");
    git(&slot.path, &["add", "docs/staged.md"]);

    let p = proof(
        &slot,
        &start,
        &["src/lib.rs", "./src/new/mod.rs", "src/old.rs"],
        &[],
    );
    let got: Vec<(String, ChangeStatus, usize, usize, bool)> = p
        .changed
        .iter()
        .map(|c| (c.path.clone(), c.status, c.added, c.removed, c.binary))
        .collect();
    assert_eq!(
        got,
        vec![
            ("assets/logo.bin".into(), ChangeStatus::Modified, 0, 0, true),
            ("docs/staged.md".into(), ChangeStatus::Added, 1, 0, false),
            ("src/lib.rs".into(), ChangeStatus::Modified, 5, 1, false),
            ("src/new/mod.rs".into(), ChangeStatus::Added, 3, 0, false),
            ("src/old.rs".into(), ChangeStatus::Deleted, 0, 2, false),
        ]
    );
    assert!(!p.is_empty());
    assert!(p.claimed_not_in_git.is_empty());
    assert!(!p.head_moved && !p.branch_switched && !p.git_dir_tampered);
    assert_eq!(p.rule_broken(), None);
    assert_eq!(p.base, slot.base_commit);
    assert_eq!(p.diff_hash.len(), 64);
}

#[test]
fn proof_lists_files_outside_scope() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    write(&slot.path.join("src/lib.rs"), "changed\n");
    write(&slot.path.join("docs/guide.md"), "changed\n");
    write(&slot.path.join("Cargo.toml"), "[package]\n");

    let p = proof(&slot, &start, &[], &["src/**", "Cargo.toml"]);
    assert_eq!(p.out_of_scope, vec!["docs/guide.md".to_string()]);
    let reason = p.rule_broken().unwrap();
    assert!(
        reason.contains("outside scope") && reason.contains("docs/guide.md"),
        "{reason}"
    );

    let p = proof(&slot, &start, &[], &["src/**", "docs/", "Cargo.toml"]);
    assert!(p.out_of_scope.is_empty());
    assert_eq!(p.rule_broken(), None);
}

#[test]
fn proof_sees_a_commit_by_the_writer_as_head_moved() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    write(&slot.path.join("src/lib.rs"), "changed\n");
    git(&slot.path, &["commit", "-qam", "writer commits"]);

    let p = proof(&slot, &start, &[], &[]);
    assert!(p.head_moved && !p.branch_switched);
    assert_ne!(p.head_after, p.head_before);
    assert_eq!(
        p.changed.len(),
        1,
        "the change still counts against the base"
    );
    assert!(p.rule_broken().unwrap().contains("moved HEAD"));

    // A rewrite back to the base with the same branch is a move too.
    git(&slot.path, &["reset", "-q", "--soft", "HEAD~1"]);
    git(&slot.path, &["commit", "-qm", "amended"]);
    assert!(proof(&slot, &start, &[], &[]).head_moved);
}

#[test]
fn proof_sees_a_branch_switch_and_a_detached_head() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    git(&slot.path, &["checkout", "-q", "-b", "other"]);
    let p = proof(&slot, &start, &[], &[]);
    assert!(p.branch_switched && !p.head_moved);
    assert_eq!(p.branch_after.as_deref(), Some("refs/heads/other"));
    assert!(p.rule_broken().unwrap().contains("switched branch"));

    git(&slot.path, &["checkout", "-q", "--detach"]);
    let p = proof(&slot, &start, &[], &[]);
    assert!(p.branch_switched && p.branch_after.is_none());
    assert!(p.rule_broken().unwrap().contains("detached HEAD"));
}

#[test]
fn proof_sees_a_planted_hook_or_config_change_as_tampering() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    write(
        &slot.path.join(".git/hooks/pre-push"),
        "#!/bin/sh\nexit 0\n",
    );
    let p = proof(&slot, &start, &[], &[]);
    assert!(p.git_dir_tampered && p.is_empty());
    // The card names the part that changed, not a vague "config or hooks".
    assert_eq!(p.git_dir_changed, [".git/hooks/pre-push"]);
    assert!(
        p.rule_broken()
            .unwrap()
            .contains("changed the checkout's .git/hooks/pre-push"),
        "{:?}",
        p.rule_broken()
    );
    assert!(slot.is_tampered());

    std::fs::remove_file(slot.path.join(".git/hooks/pre-push")).unwrap();
    assert!(!proof(&slot, &start, &[], &[]).git_dir_tampered, "restored");
    git(&slot.path, &["config", "filter.x.clean", "cat"]);
    assert_eq!(
        proof(&slot, &start, &[], &[]).git_dir_changed,
        [".git/config"]
    );
    git(&slot.path, &["config", "--unset", "filter.x.clean"]);
    // info/exclude can hide new files from the proof and the commit.
    let exclude = slot.path.join(".git/info/exclude");
    let mut text = std::fs::read_to_string(&exclude).unwrap_or_default();
    text.push_str("secret.txt\n");
    write(&exclude, &text);
    let p = proof(&slot, &start, &[], &[]);
    assert!(
        p.git_dir_changed.contains(&".git/info/exclude".to_string()),
        "{:?}",
        p.git_dir_changed
    );
    assert!(
        p.rule_broken().unwrap().contains(".git/info/exclude"),
        "{:?}",
        p.rule_broken()
    );
}

#[test]
fn proof_lists_claimed_files_git_does_not_show() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    write(&slot.path.join("src/lib.rs"), "changed\n");
    let abs = slot.path.join("src/lib.rs");
    let p = proof(
        &slot,
        &start,
        &[
            abs.to_str().unwrap(),
            "README.md",
            "./src/ghost.rs",
            "src/ghost.rs",
        ],
        &[],
    );
    assert_eq!(
        p.claimed_not_in_git,
        vec!["README.md".to_string(), "src/ghost.rs".to_string()]
    );
    assert_eq!(
        p.rule_broken(),
        None,
        "a false claim is reported, not a broken rule"
    );
}

#[test]
fn diff_hash_is_stable_for_identical_edits_in_two_rounds() {
    let fx = Fixture::new();
    let edit = |slot: &Slot, staged: bool| {
        write(&slot.path.join("src/lib.rs"), "changed\n");
        write(&slot.path.join("src/new.rs"), "new\n");
        std::fs::remove_file(slot.path.join("src/old.rs")).unwrap();
        std::fs::write(slot.path.join("assets/logo.bin"), [1u8, 0, 1, 0, 200]).unwrap();
        if staged {
            git(&slot.path, &["add", "-A"]);
        }
    };
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    edit(&slot, false);
    let first = proof(&slot, &start, &[], &[]).diff_hash;
    assert_eq!(
        proof(&slot, &start, &[], &[]).diff_hash,
        first,
        "same state, same hash"
    );
    slot.discard().unwrap();

    // Round two, from a fresh reset, the same edits (staged this time).
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    edit(&slot, true);
    assert_eq!(proof(&slot, &start, &[], &[]).diff_hash, first);

    // Any other content gives another hash, binary content included.
    std::fs::write(slot.path.join("assets/logo.bin"), [1u8, 0, 1, 0, 201]).unwrap();
    assert_ne!(proof(&slot, &start, &[], &[]).diff_hash, first);
}

/// Whether the checkout at `path` shows no change since `before`.
fn unchanged(path: &std::path::Path, before: &nightshift::snapshot::Snapshot) -> bool {
    let now = worktree_fingerprint(path).unwrap();
    let changes = now.changes_since(before);
    eprintln!("changes: {changes:?}");
    changes.is_empty()
}

#[test]
fn worktree_fingerprint_changes_when_a_file_changes_and_not_otherwise() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    write(&slot.path.join("src/lib.rs"), "writer's change\n");
    write(&slot.path.join("notes.txt"), "untracked\n");
    let before = worktree_fingerprint(&slot.path).unwrap();

    // Reading (what a read-only reviewer does) changes nothing.
    git(&slot.path, &["log", "--oneline", "-1"]);
    std::fs::read_to_string(slot.path.join("src/lib.rs")).unwrap();
    assert!(unchanged(&slot.path, &before));

    // Same status letters, other content: detected.
    write(&slot.path.join("notes.txt"), "untracked, edited\n");
    assert!(!unchanged(&slot.path, &before));
    // Put back as it was: an untracked file has no copy to compare with,
    // so a write undone is still a write (a tracked one is compared with
    // its blob, below).
    write(&slot.path.join("notes.txt"), "untracked\n");
    assert!(!unchanged(&slot.path, &before), "a write undone");
    // A stat cache written after the files, as after any checkout.
    std::thread::sleep(std::time::Duration::from_millis(60));
    git(&slot.path, &["update-index", "-q", "--refresh"]);
    let before = worktree_fingerprint(&slot.path).unwrap();

    // An edit to a clean tracked file, a new file, staging: each detected.
    write(&slot.path.join("README.md"), "# touched\n");
    assert!(!unchanged(&slot.path, &before));
    write(&slot.path.join("README.md"), "# demo\n");
    assert!(unchanged(&slot.path, &before));
    git(&slot.path, &["add", "notes.txt"]);
    assert!(!unchanged(&slot.path, &before));
}

/// A reviewer that writes only where git does not look (an ignored build
/// directory the next round's gate would use) is caught too; reading it is not.
#[test]
fn worktree_fingerprint_sees_ignored_files_written() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    write(&slot.path.join("src/lib.rs"), "writer's change\n");
    write(&slot.path.join("target/debug/build.log"), "built\n");
    assert!(
        git(&slot.path, &["status", "--porcelain", "--ignored"]).contains("!! target/"),
        "target/ is ignored"
    );
    let before = worktree_fingerprint(&slot.path).unwrap();
    std::fs::read_to_string(slot.path.join("target/debug/build.log")).unwrap();
    assert!(unchanged(&slot.path, &before), "reading changes nothing");
    write(&slot.path.join("target/debug/planted.sh"), "#!/bin/sh\n");
    assert!(!unchanged(&slot.path, &before), "a new ignored file");
    std::fs::remove_file(slot.path.join("target/debug/planted.sh")).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(20));
    write(&slot.path.join("target/debug/build.log"), "tampered\n");
    assert!(!unchanged(&slot.path, &before), "an ignored file rewritten");
}

#[test]
fn discard_removes_the_local_branch_and_leaves_nothing_behind() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    write(&slot.path.join("src/lib.rs"), "changed\n");
    write(&slot.path.join("new/dir/file.txt"), "new\n");
    write(&slot.path.join("target/out"), "ignored\n");
    git(&slot.path, &["add", "new"]);

    slot.discard().unwrap();

    assert_eq!(git(&slot.path, &["status", "--porcelain", "--ignored"]), "");
    assert_eq!(git(&slot.path, &["rev-parse", "HEAD"]), slot.base_commit);
    assert_eq!(
        git(&slot.path, &["for-each-ref", "refs/heads/"]),
        "",
        "no local branch left"
    );
    assert_eq!(
        git(&fx.remote, &["for-each-ref", "refs/heads/nightshift/"]),
        "",
        "nothing pushed"
    );
    // The slot is still good for the next item.
    assert!(fx.prepare(BRANCH).reused);
}

#[test]
fn branch_names_follow_the_slug_rule() {
    let key = "1a2b3c4d5e6f7a8b9c0d";
    let cases = [
        ("Fix login bug", "nightshift/fix-login-bug-1a2b3c4d"),
        (
            "  --Add `--json` to plan!!  ",
            "nightshift/add-json-to-plan-1a2b3c4d",
        ),
        ("加深 Rust 所有權章節", "nightshift/rust-1a2b3c4d"),
        ("加深所有權章節", "nightshift/item-1a2b3c4d"),
        ("", "nightshift/item-1a2b3c4d"),
        ("Café: naïve résumé", "nightshift/caf-na-ve-r-sum-1a2b3c4d"),
        (
            "UPPER_case__and   spaces",
            "nightshift/upper-case-and-spaces-1a2b3c4d",
        ),
        (
            "Refactor the extremely long module name into smaller pieces please",
            "nightshift/refactor-the-extremely-long-module-name-1a2b3c4d",
        ),
        // The 40-character cut lands on a '-', which is trimmed.
        (
            "aaaaaaaaa bbbbbbbbb ccccccccc dddddddddd eeee",
            "nightshift/aaaaaaaaa-bbbbbbbbb-ccccccccc-dddddddddd-1a2b3c4d",
        ),
    ];
    for (title, want) in cases {
        assert_eq!(branch_name(title, key), want, "title {title:?}");
    }
    let slug = branch_name(
        "Refactor the extremely long module name into smaller pieces please",
        key,
    );
    let slug = slug
        .strip_prefix("nightshift/")
        .unwrap()
        .rsplit_once('-')
        .unwrap()
        .0;
    assert!(slug.len() <= 40, "{slug}");
}

#[test]
fn the_token_reaches_git_only_through_askpass_and_never_argv() {
    let fx = Fixture::new();
    let token = "ghp_s3cr3tT0ken";
    // git asks for https credentials exactly as a push would; the user's
    // credential helpers are off for this call, so askpass answers.
    let out = Git::new(&fx.user)
        .token(Some(token))
        .run_with_input(
            &["credential", "fill"],
            Some(b"protocol=https\nhost=example.invalid\npath=o/r.git\n\n"),
        )
        .expect("credential fill");
    let text = out.text();
    assert!(text.contains("username=x-access-token"), "{text}");
    assert!(text.contains(&format!("password={token}")), "{text}");

    // Without a token there is nothing to answer and no prompt: it fails fast.
    let started = Instant::now();
    let err = Git::new(&fx.user)
        .env("GIT_ASKPASS", "")
        .env("SSH_ASKPASS", "")
        .run_with_input(
            &["-c", "credential.helper=", "credential", "fill"],
            Some(b"protocol=https\nhost=example.invalid\n\n"),
        )
        .unwrap_err();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert!(
        err.to_string().contains("terminal prompts disabled"),
        "{err}"
    );

    // A failed push with a token: the error shows argv and stderr, no token.
    let err = Git::new(&fx.user)
        .token(Some(token))
        .timeout(Duration::from_secs(30))
        .push_with_lease("https://127.0.0.1:9/o/r.git", "main", "")
        .unwrap_err();
    let shown = format!("{err} {err:?}");
    assert!(!shown.contains(token), "{shown}");
    assert!(
        shown.contains("git push") && shown.contains("127.0.0.1:9"),
        "{shown}"
    );
}

#[test]
fn git_errors_carry_argv_status_and_stderr_and_a_timeout_kills() {
    let fx = Fixture::new();
    let err = Git::new(&fx.user).rev_parse("no-such-branch").unwrap_err();
    match &err {
        GitError::Failed { argv, status, .. } => {
            assert!(argv.starts_with("git rev-parse"), "{argv}");
            assert_eq!(status, "exit status 1");
        }
        other => panic!("unexpected {other:?}"),
    }
    let err = Git::new(&fx.user).run(&["checkout", "nope"]).unwrap_err();
    assert!(
        err.to_string()
            .contains("did not match any file(s) known to git"),
        "{err}"
    );
    assert!(err.to_string().contains(fx.user.to_str().unwrap()), "{err}");

    let started = Instant::now();
    let err = Git::new(&fx.user)
        .timeout(Duration::from_millis(300))
        .run(&["-c", "alias.slow=!sleep 20", "slow"])
        .unwrap_err();
    assert!(matches!(err, GitError::TimedOut { .. }), "{err:?}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "killed, not waited for"
    );

    // Something git started that keeps the output pipe open (an ssh
    // ControlPersist master does) does not hold the call.
    let started = Instant::now();
    let out = Git::new(&fx.user)
        .run(&["-c", "alias.linger=!echo started; sleep 8 &", "linger"])
        .expect("git itself succeeded");
    assert_eq!(out.text(), "started");
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );

    assert_eq!(
        Git::new(&fx.user).rev_parse("HEAD").unwrap(),
        nightshift::git::head_commit(&fx.user).unwrap()
    );
    assert_eq!(
        nightshift::git::head_branch(&fx.user).unwrap().as_deref(),
        Some("refs/heads/main")
    );
}

#[test]
fn a_push_replaces_a_leftover_branch_of_the_same_name() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    write(&slot.path.join("first.txt"), "first night\n");
    slot.commit_all("first", &author(), &runner()).unwrap();
    slot.push(None).unwrap();

    let slot = fx.prepare(BRANCH);
    write(&slot.path.join("second.txt"), "second night\n");
    let sha = slot.commit_all("second", &author(), &runner()).unwrap();
    slot.push(None).unwrap();
    assert_eq!(
        git(&fx.remote, &["rev-parse", &format!("refs/heads/{BRANCH}")]),
        sha
    );
    let files = git(
        &fx.remote,
        &["diff", "--name-only", &fx.remote_main(), &sha],
    );
    assert_eq!(files, "second.txt", "not stacked on the leftover");
}

/// The push after a claim check carries the head the branch had at the
/// claim (docs/workers.md#fencing): a worker paused between its check and
/// its push cannot replace what the takeover pushed since, while a
/// leftover of an earlier night, there at the claim, is still replaced.
#[test]
fn a_push_replaces_only_the_head_the_branch_had_at_the_claim() {
    let fx = Fixture::new();
    let seed = fx.root.join("seed");
    let push_from_seed = |file: &str| {
        write(&seed.join(file), "someone else's\n");
        git(&seed, &["add", file]);
        git(&seed, &["commit", "--quiet", "-m", file]);
        let spec = format!("HEAD:refs/heads/{BRANCH}");
        git(&seed, &["push", "--quiet", "--force", "origin", &spec]);
        git(&seed, &["rev-parse", "HEAD"])
    };
    let remote_head = || git(&fx.remote, &["rev-parse", &format!("refs/heads/{BRANCH}")]);

    // Claimed while the branch is absent; the takeover pushes it meanwhile.
    let mut slot = fx.prepare(BRANCH);
    assert_eq!(slot.read_lease(None).unwrap(), &Lease::Absent);
    let takeover = push_from_seed("takeover.txt");
    write(&slot.path.join("late.txt"), "the lost attempt's\n");
    slot.commit_all("late", &author(), &runner()).unwrap();
    let err = slot
        .push(None)
        .expect_err("a branch pushed since the claim is not replaced");
    assert!(
        err.to_string().contains("stale info") || err.to_string().contains("rejected"),
        "{err}"
    );
    assert_eq!(remote_head(), takeover, "the takeover's branch stands");

    // Claimed while a leftover sits there: that leftover is replaced.
    let mut slot = fx.prepare(BRANCH);
    assert_eq!(slot.read_lease(None).unwrap(), &Lease::At(takeover.clone()));
    write(&slot.path.join("mine.txt"), "this night's\n");
    let sha = slot.commit_all("mine", &author(), &runner()).unwrap();
    slot.push(None)
        .expect("the leftover seen at the claim is replaced");
    assert_eq!(remote_head(), sha);

    // Moved again after this claim: refused once more.
    let mut slot = fx.prepare(BRANCH);
    slot.read_lease(None).unwrap();
    let moved = push_from_seed("moved.txt");
    write(&slot.path.join("again.txt"), "again\n");
    slot.commit_all("again", &author(), &runner()).unwrap();
    assert!(slot.push(None).is_err());
    assert_eq!(remote_head(), moved);
}

/// The slot borrows objects from the user's repository: a history rewrite
/// and `git gc --prune=now` there removes objects the slot still points at.
/// The next prepare must clone the slot again, not fail every night.
#[test]
fn a_slot_whose_borrowed_objects_were_pruned_is_cloned_again() {
    let fx = Fixture::new();
    let first = fx.prepare(BRANCH);
    let old_base = first.base_commit.clone();
    let seed = fx.root.join("seed");
    git(&seed, &["commit", "--quiet", "--amend", "-m", "rewritten"]);
    git(&seed, &["push", "--quiet", "--force", "origin", "main"]);
    git(&fx.user, &["fetch", "--quiet", "origin"]);
    git(&fx.user, &["reset", "--quiet", "--hard", "origin/main"]);
    git(&fx.user, &["reflog", "expire", "--expire=now", "--all"]);
    git(&fx.user, &["gc", "--quiet", "--prune=now"]);
    assert!(
        Command::new("git")
            .args(["cat-file", "-e", &old_base])
            .current_dir(&fx.user)
            .status()
            .unwrap()
            .code()
            != Some(0),
        "the old base must be gone from the user's store"
    );
    let again = fx
        .try_prepare("origin", BRANCH)
        .expect("a broken slot is cloned again");
    assert_eq!(again.base_commit, fx.remote_main());
    assert_ne!(again.base_commit, old_base);
}

/// An agent left running by a killed nightshift must not keep editing the
/// checkout the next run reuses.
#[test]
fn prepare_kills_processes_left_running_in_the_slot() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let mut straggler = Command::new("sh")
        .args([
            "-c",
            "while true; do echo x >> leftover.txt; sleep 0.05; done",
        ])
        .current_dir(&slot.path)
        .process_group(0)
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let again = fx.prepare(BRANCH);
    let status = straggler.wait().unwrap();
    assert!(
        status.code().is_none(),
        "the straggler was killed by a signal: {status:?}"
    );
    std::thread::sleep(Duration::from_millis(200));
    assert!(
        !again.path.join("leftover.txt").exists(),
        "the reset checkout still gets writes"
    );
}

/// Slots never initialise submodules and `git clean` does not look inside
/// their paths: what an agent wrote there must not survive into the next
/// item.
#[test]
fn files_written_into_a_submodule_path_do_not_survive_a_reset() {
    let fx = Fixture::new();
    let seed = fx.root.join("seed");
    git(&seed, &["pull", "--quiet", "--ff-only", "origin", "main"]);
    let some_commit = git(&seed, &["rev-parse", "HEAD"]);
    git(
        &seed,
        &[
            "update-index",
            "--add",
            "--cacheinfo",
            &format!("160000,{some_commit},lib"),
        ],
    );
    git(&seed, &["commit", "--quiet", "-m", "a submodule"]);
    git(&seed, &["push", "--quiet", "origin", "main"]);
    git(&fx.user, &["pull", "--quiet", "--ff-only"]);
    let slot = fx.prepare(BRANCH);
    assert!(slot.filled_submodule_dirs().unwrap().is_empty());
    std::fs::create_dir_all(slot.path.join("lib")).unwrap();
    write(&slot.path.join("lib/left.txt"), "left behind\n");
    // What an agent wrote there is told (the PR cannot carry it).
    assert_eq!(slot.filled_submodule_dirs().unwrap(), ["lib"]);
    let again = fx.prepare(BRANCH);
    assert!(
        !again.path.join("lib/left.txt").exists(),
        "a file in a submodule path survived the reset"
    );
    assert!(again.filled_submodule_dirs().unwrap().is_empty());
}

/// The second night's git: a branch whose base moved is rebased (stopped at
/// a conflict that names the file and both commits, resolved, continued);
/// the push replaces the remote branch only while it is at the head
/// nightshift pushed, so a person's push is never overwritten.
#[test]
fn rebase_stops_at_a_conflict_and_the_lease_protects_a_persons_push() {
    use nightshift::git::Rebase;
    let dir = tempfile::tempdir().unwrap();
    let remote = dir.path().join("remote.git");
    let work = dir.path().join("work");
    git(
        dir.path(),
        &[
            "init",
            "-q",
            "--bare",
            "-b",
            "main",
            remote.to_str().unwrap(),
        ],
    );
    git(
        dir.path(),
        &["init", "-q", "-b", "main", work.to_str().unwrap()],
    );
    write(&work.join("calc.txt"), "add\n");
    write(&work.join("other.txt"), "x\n");
    git(&work, &["add", "-A"]);
    git(&work, &["commit", "-qm", "init"]);
    git(&work, &["checkout", "-qb", "nightshift/mul-1"]);
    write(&work.join("calc.txt"), "add\nmul\n");
    git(&work, &["commit", "-qam", "mul"]);
    let pushed = git(&work, &["rev-parse", "HEAD"]);
    git(
        &work,
        &[
            "push",
            "-q",
            remote.to_str().unwrap(),
            "nightshift/mul-1",
            "main",
        ],
    );
    // The sibling PR is merged: main appends another word on the same line.
    git(&work, &["checkout", "-q", "main"]);
    write(&work.join("calc.txt"), "add\nsub\n");
    git(&work, &["commit", "-qam", "sub"]);
    let main = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["checkout", "-q", "nightshift/mul-1"]);

    let g = Git::new(&work)
        .env("GIT_COMMITTER_NAME", "nightshift")
        .env("GIT_COMMITTER_EMAIL", "nightshift@localhost");
    let Rebase::Conflict {
        files,
        onto,
        applying,
    } = g.rebase_onto("main").unwrap()
    else {
        panic!("a conflict")
    };
    assert_eq!(files, ["calc.txt"]);
    assert_eq!(
        (onto.as_str(), applying.as_str()),
        (main.as_str(), pushed.as_str())
    );
    assert!(
        std::fs::read_to_string(work.join("calc.txt"))
            .unwrap()
            .contains("<<<<<<<")
    );
    // The writer resolves it; the rebase goes on.
    write(&work.join("calc.txt"), "add\nsub\nmul\n");
    git(&work, &["add", "calc.txt"]);
    let Rebase::Clean { head } = g.rebase_continue().unwrap() else {
        panic!("clean after the resolution")
    };
    assert_eq!(
        git(&work, &["rev-parse", "HEAD^"]),
        main,
        "now descends from the new main"
    );

    // A stale lease (someone else's head expected) is refused…
    let url = remote.to_str().unwrap();
    let err = g
        .push_with_lease(url, "nightshift/mul-1", &main)
        .unwrap_err();
    assert!(err.to_string().contains("stale info"), "{err}");
    assert_eq!(git(&remote, &["rev-parse", "nightshift/mul-1"]), pushed);
    // …the head nightshift pushed is replaced.
    g.push_with_lease(url, "nightshift/mul-1", &pushed).unwrap();
    assert_eq!(git(&remote, &["rev-parse", "nightshift/mul-1"]), head);

    // A clean rebase says where the branch is; an abort puts it back.
    git(&work, &["checkout", "-qb", "nightshift/other-2", &pushed]);
    write(&work.join("other.txt"), "y\n");
    git(&work, &["commit", "-qam", "other"]);
    let before = git(&work, &["rev-parse", "HEAD"]);
    git(&work, &["checkout", "-qb", "nightshift/mul-3", &pushed]);
    assert!(matches!(
        g.rebase_onto("nightshift/other-2").unwrap(),
        Rebase::Clean { .. }
    ));
    git(&work, &["checkout", "-q", "nightshift/mul-1"]);
    assert!(matches!(
        g.rebase_onto(&before).unwrap(),
        Rebase::Conflict { .. }
    ));
    g.rebase_abort().unwrap();
    assert_eq!(git(&work, &["rev-parse", "HEAD"]), head);
}

/// A tend in a slot: the PR branch is taken up at the head nightshift
/// pushed (refused once someone else pushed), rebased onto the moved base
/// (a conflict resolved and continued), and pushed with a lease.
#[test]
fn a_slot_takes_up_a_pushed_branch_rebases_it_and_pushes_with_a_lease() {
    use nightshift::git::Rebase;
    let fx = Fixture::new();
    // Night 1: the branch changes README.md and is pushed.
    let slot = fx.prepare(BRANCH);
    write(&slot.path.join("README.md"), "# demo\nby nightshift\n");
    let pushed = slot.commit_all("night 1", &author(), &runner()).unwrap();
    slot.push(None).unwrap();
    // The morning: a sibling PR that changed the same line is merged.
    let main = fx.advance_remote("README.md", "# demo\nby a sibling\n");

    // Night 2: a fresh slot on the same branch name starts at the new base…
    let slot = fx.prepare(BRANCH);
    assert_eq!(slot.base_commit, main);
    // …refuses a head other than the one pushed…
    let err = slot.take_pushed_branch(None, &main).unwrap_err();
    assert!(matches!(err, SlotError::Moved { .. }), "{err}");
    // …takes up the pushed one, and the rebase stops at the conflict.
    slot.take_pushed_branch(None, &pushed).unwrap();
    assert_eq!(git(&slot.path, &["rev-parse", "HEAD"]), pushed);
    let Rebase::Conflict {
        files,
        onto,
        applying,
    } = slot.rebase_onto_base(&runner()).unwrap()
    else {
        panic!("a conflict")
    };
    assert_eq!(
        (files, onto, applying),
        (vec!["README.md".to_string()], main.clone(), pushed.clone())
    );
    write(
        &slot.path.join("README.md"),
        "# demo\nby a sibling\nby nightshift\n",
    );
    let Rebase::Clean { head } = slot.rebase_continue(&runner()).unwrap() else {
        panic!("clean")
    };
    assert_eq!(git(&slot.path, &["rev-parse", "HEAD^"]), main);
    assert_eq!(
        git(&slot.path, &["log", "-1", "--format=%cn"]),
        "nightshift"
    );
    // Someone pushes meanwhile: the lease refuses; else it replaces.
    let stale = slot.push_with_lease(None, &main, None).unwrap_err();
    assert!(stale.to_string().contains("stale info"), "{stale}");
    slot.push_with_lease(None, &pushed, None).unwrap();
    assert_eq!(git(&fx.remote, &["rev-parse", BRANCH]), head);
}

/// The proof read from the writer's tree (what the round does, issue 12:
/// no walk of every file) is the proof read from the working tree: the
/// same files, statuses, line counts and diff hash, for every kind of
/// change — an edit, a new file, a deletion, a rename, a binary file, a
/// mode change, a link — while ignored build output stays out of both.
#[test]
fn the_proof_from_the_writers_tree_is_the_proof_from_the_working_tree() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    let p = &slot.path;
    write(&p.join("src/lib.rs"), &LIB_RS.replace("2\n", "22\n"));
    write(&p.join("src/new.rs"), "pub fn new() {}\n");
    std::fs::remove_file(p.join("docs/guide.md")).unwrap();
    std::fs::rename(p.join("src/old.rs"), p.join("src/older.rs")).unwrap();
    std::fs::write(p.join("assets/logo.bin"), [9u8, 0, 0, 255, 1]).unwrap();
    std::fs::set_permissions(p.join("README.md"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", p.join("lib-link")).unwrap();
    write(&p.join("target/build.o"), "ignored output\n");
    let claimed = vec!["src/new.rs".to_string(), "ghost.rs".to_string()];
    let from_worktree = Proof::collect(p, &start, &claimed, &[]).unwrap();
    let tree = slot.snapshot_tree().unwrap();
    let from_tree = Proof::collect_tree(p, &start, &tree, &claimed, &[]).unwrap();
    assert_eq!(from_tree, from_worktree);
    let paths: Vec<&str> = from_tree.changed.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "README.md",
            "assets/logo.bin",
            "docs/guide.md",
            "lib-link",
            "src/lib.rs",
            "src/new.rs",
            "src/older.rs"
        ]
    );
    assert_eq!(from_tree.claimed_not_in_git, ["ghost.rs"]);
    // Nothing changed: both are empty, with the same hash.
    let fresh = fx.prepare("nightshift/other-1a2b3c4d");
    let start = RoundStart::record(&fresh).unwrap();
    let tree = fresh.snapshot_tree().unwrap();
    let empty = Proof::collect_tree(&fresh.path, &start, &tree, &[], &[]).unwrap();
    assert!(empty.is_empty());
    assert_eq!(
        empty,
        Proof::collect(&fresh.path, &start, &[], &[]).unwrap()
    );
}

/// The same for entries that change kind: a file that became a directory,
/// a directory that became a file, a new directory several levels deep —
/// the tree's diff reads only the subtrees that differ (issue 12), and
/// still names every path the working tree's diff names.
#[test]
fn the_proof_from_the_tree_follows_files_that_became_directories_and_back() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    let p = &slot.path;
    std::fs::remove_file(p.join("src/old.rs")).unwrap();
    write(&p.join("src/old.rs/inner.rs"), "// now a directory\n");
    std::fs::remove_dir_all(p.join("docs")).unwrap();
    write(&p.join("docs"), "now a file\n");
    write(&p.join("a/b/c/deep.rs"), "deep\n");
    let from_worktree = Proof::collect(p, &start, &[], &[]).unwrap();
    let tree = slot.snapshot_tree().unwrap();
    let from_tree = Proof::collect_tree(p, &start, &tree, &[], &[]).unwrap();
    assert_eq!(from_tree, from_worktree);
    let paths: Vec<&str> = from_tree.changed.iter().map(|c| c.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            "a/b/c/deep.rs",
            "docs",
            "docs/guide.md",
            "src/old.rs",
            "src/old.rs/inner.rs"
        ]
    );
}

/// Committing the approved tree (`commit_tree`, what shipping does) makes
/// the commit `commit_all` makes of the same working tree — same tree,
/// parent, author, committer and message — and leaves the index alone;
/// a tree that is the branch's own is nothing to commit.
#[test]
fn committing_the_approved_tree_is_committing_the_working_tree() {
    let fx = Fixture::new();
    let change = |slot: &Slot| {
        write(
            &slot.path.join("src/lib.rs"),
            &LIB_RS.replace("1\n", "11\n"),
        );
        write(&slot.path.join("src/new.rs"), "pub fn new() {}\n");
        std::fs::remove_file(slot.path.join("src/old.rs")).unwrap();
        write(&slot.path.join("target/build.o"), "ignored\n");
    };
    let message = "nightshift: demo\n\nContract sha256 abc\n";
    let a = fx.prepare(BRANCH);
    change(&a);
    let by_tree = a
        .commit_tree(&a.snapshot_tree().unwrap(), message, &author(), &runner())
        .unwrap();
    let index_after = git(&a.path, &["write-tree"]);
    a.discard().unwrap();
    let b = fx.prepare(BRANCH);
    change(&b);
    let by_add = b.commit_all(message, &author(), &runner()).unwrap();
    let (ta, tb) = (
        git(&b.path, &["cat-file", "-p", &by_tree]),
        git(&b.path, &["cat-file", "-p", &by_add]),
    );
    let strip_times = |s: &str| -> Vec<String> {
        s.lines()
            .map(|l| match l.split_once('>') {
                Some((who, _)) if l.starts_with("author ") || l.starts_with("committer ") => {
                    who.to_string()
                }
                _ => l.to_string(),
            })
            .collect()
    };
    assert_eq!(strip_times(&ta), strip_times(&tb));
    // The slot's index still holds the base: the branch moved, not the index.
    assert_eq!(
        index_after,
        git(
            &a.path,
            &["rev-parse", &format!("{}^{{tree}}", fx.remote_main())]
        )
    );
    let c = fx.prepare("nightshift/empty-1a2b3c4d");
    let own = c.snapshot_tree().unwrap();
    assert!(matches!(
        c.commit_tree(&own, message, &author(), &runner()),
        Err(SlotError::NothingToCommit { .. })
    ));
}

/// `ignored` follows git's rules: an ignored file and directory are, a
/// tracked file under an ignore pattern is not, and neither is a new file.
#[test]
fn ignored_paths_are_those_git_add_would_leave_out() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    write(&slot.path.join(".git/info/exclude"), "*.log\n");
    let asked: Vec<Vec<u8>> = [
        "target/x.o",
        "src/lib.rs",
        "new.rs",
        "run.log",
        "deep/a/b.log",
    ]
    .iter()
    .map(|p| p.as_bytes().to_vec())
    .collect();
    let got = slot.ignored(&asked).unwrap();
    let got: Vec<&str> = got
        .iter()
        .map(|p| std::str::from_utf8(p).unwrap())
        .collect();
    assert_eq!(got, ["deep/a/b.log", "run.log", "target/x.o"]);
    assert!(slot.ignored(&[b"src/lib.rs".to_vec()]).unwrap().is_empty());
}

/// The writer's tree written from a walk (only what changed against the
/// index's stat cache goes to git, issue 12) is the tree `git add -A`
/// writes, for every kind of change: edits, new files and directories, a
/// deletion, a mode change, a link, ignored output, a file staged and then
/// edited again, the same bytes written again, a file that became a
/// directory — and when a `.gitignore` changes what is ignored.
#[test]
fn the_tree_from_a_walk_is_the_tree_git_add_writes() {
    let fx = Fixture::new();
    let same = |slot: &Slot, case: &str| {
        let walked = worktree_fingerprint(&slot.path).unwrap();
        let from_walk = slot.snapshot_tree_from(&walked).unwrap();
        assert_eq!(from_walk, slot.snapshot_tree().unwrap(), "{case}");
    };
    let slot = fx.prepare(BRANCH);
    let p = slot.path.clone();
    same(&slot, "nothing changed");
    write(&p.join("src/lib.rs"), &LIB_RS.replace("2\n", "22\n"));
    write(&p.join("src/deep/new/mod.rs"), "pub mod x;\n");
    std::fs::remove_file(p.join("docs/guide.md")).unwrap();
    std::fs::set_permissions(p.join("README.md"), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::os::unix::fs::symlink("src/lib.rs", p.join("lib-link")).unwrap();
    write(&p.join("target/build.o"), "ignored output\n");
    std::fs::write(p.join("assets/logo.bin"), [0u8, 1, 2, 255, 0, 7]).unwrap();
    same(&slot, "edits");
    write(&p.join("staged.txt"), "staged\n");
    git(&p, &["add", "staged.txt"]);
    write(&p.join("staged.txt"), "staged, then edited\n");
    same(&slot, "staged then edited");
    std::fs::remove_file(p.join("src/old.rs")).unwrap();
    write(&p.join("src/old.rs/inner.rs"), "// now a directory\n");
    same(&slot, "a file became a directory");
    write(&p.join(".gitignore"), "");
    same(&slot, "target/ no longer ignored");
}

/// A slot that has the run's pinned base checks it out without asking the
/// remote (issue 12: no fetch per item): with the remote gone, the next
/// item is still prepared at the pinned commit, while without a pin, or
/// with a pin the slot lacks, the fetch is tried and fails.
#[test]
fn a_slot_with_the_pinned_base_is_prepared_without_a_fetch() {
    let fx = Fixture::new();
    let first = fx.prepare(BRANCH);
    let base = first.base_commit.clone();
    write(&first.path.join("left.txt"), "from the last item\n");
    let gone = fx.root.join("gone.git").display().to_string();
    let at = |pinned: Option<&str>, branch: &str| {
        let dir = fx.slot_path();
        let (user, urls) = (fx.user.clone(), (gone.clone(), gone.clone()));
        Slot::prepare_at(nightshift::slot::PrepareAt {
            dir: &dir,
            repo: &user,
            remote: "origin",
            urls,
            base: "main",
            branch,
            token: None,
            stop: None,
            pinned,
            kept: None,
        })
    };
    let slot = at(Some(&base), "nightshift/next-1a2b3c4d").expect("no fetch needed");
    assert_eq!(slot.base_commit, base);
    assert_eq!(git(&slot.path, &["rev-parse", "HEAD"]), base);
    assert!(!slot.path.join("left.txt").exists(), "reset and cleaned");
    assert_eq!(
        git(&slot.path, &["symbolic-ref", "HEAD"]),
        "refs/heads/nightshift/next-1a2b3c4d"
    );
    assert!(
        at(None, "nightshift/third-1a2b3c4d").is_err(),
        "a fetch without a pin"
    );
    let missing = "0123456789012345678901234567890123456789";
    assert!(
        at(Some(missing), "nightshift/fourth-1a2b3c4d").is_err(),
        "a pin the slot lacks"
    );
}

/// A writer that rewrites the slot's own index so that git trusts a
/// changed file (`--assume-unchanged`, `--skip-worktree`: what a forged
/// stat cache also does) cannot make the tree differ from the working tree
/// the reviewer reads: trees start from the index git wrote at the reset,
/// kept beside the slot, not from the one the agent could write.
#[test]
fn a_forged_index_does_not_hide_a_change_from_the_tree() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let p = slot.path.clone();
    write(&p.join("src/lib.rs"), &LIB_RS.replace("1\n", "100\n"));
    write(&p.join("docs/guide.md"), "rewritten guide\n");
    git(&p, &["update-index", "--assume-unchanged", "src/lib.rs"]);
    git(&p, &["update-index", "--skip-worktree", "docs/guide.md"]);
    let on_disk = |f: &str| git(&p, &["hash-object", f]);
    let in_tree = |tree: &str, f: &str| git(&p, &["rev-parse", &format!("{tree}:{f}")]);
    let walked = worktree_fingerprint(&p).unwrap();
    for tree in [
        slot.snapshot_tree_from(&walked).unwrap(),
        slot.snapshot_tree().unwrap(),
    ] {
        for f in ["src/lib.rs", "docs/guide.md"] {
            assert_eq!(in_tree(&tree, f), on_disk(f), "{f} in {tree}");
        }
    }
}

/// The next item's reset from the last item's kept walk (issue 12) leaves
/// what `git checkout --force` and `git clean -ffdx` leave: the base's
/// tree, nothing untracked or ignored, HEAD on the new branch — for
/// changes made before the walk and for those made after it (seen by its
/// watch), in tracked, untracked and ignored paths and in `.git`.
#[test]
fn a_reset_from_the_kept_walk_leaves_what_git_checkout_and_clean_leave() {
    use nightshift::snapshot::Snapshot;
    let fx = Fixture::new();
    let first = fx.prepare(BRANCH);
    let (p, base) = (first.path.clone(), first.base_commit.clone());
    write(&p.join("src/lib.rs"), "changed\n");
    std::fs::remove_file(p.join("docs/guide.md")).unwrap();
    write(&p.join("src/new.rs"), "new\n");
    write(&p.join(".github/workflows/ci.yml"), "on: push\n");
    write(&p.join("target/debug/out.o"), "built\n");
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-q", "-m", "the item's commit"]);
    git(&p, &["branch", "stray"]);
    let (walk, follow) = Snapshot::take_following(&p).unwrap();
    let kept = nightshift::slot::KeptWalk::new(&first, walk, follow.expect("watched"));
    // After the walk: what its watch must tell the reset about.
    write(&p.join("src/old.rs"), "rewritten after the walk\n");
    write(&p.join("late/dir/file.txt"), "late\n");
    write(&p.join("target/debug/later.o"), "later\n");
    let exec = std::os::unix::fs::PermissionsExt::from_mode(0o755);
    std::fs::set_permissions(p.join("README.md"), exec).unwrap();
    let slot = fx.prepare_next(Some(&base), kept);
    assert!(slot.undone, "reset from the kept walk, not by git");
    assert_clean_at_base(&p, &base);
    assert_eq!(
        git(&p, &["branch", "--list", "stray"]),
        "",
        "other branches pruned"
    );
    assert!(!p.join("late").exists() && !p.join(".github").exists());
    assert_eq!(
        std::fs::read_to_string(p.join("src/lib.rs")).unwrap(),
        LIB_RS
    );
}

/// A kept walk of another base, or one whose watch saw more than it can
/// tell, leaves the reset to git.
#[test]
fn a_kept_walk_of_another_base_leaves_the_reset_to_git() {
    use nightshift::snapshot::Snapshot;
    let fx = Fixture::new();
    let first = fx.prepare(BRANCH);
    let p = first.path.clone();
    write(&p.join("src/new.rs"), "new\n");
    let (walk, follow) = Snapshot::take_following(&p).unwrap();
    let kept = nightshift::slot::KeptWalk::new(&first, walk, follow.expect("watched"));
    let moved = fx.advance_remote("src/more.rs", "more\n");
    let slot = fx.prepare_next(None, kept);
    assert!(!slot.undone);
    assert_eq!(git(&p, &["rev-parse", "HEAD"]), moved);
    assert!(!p.join("src/new.rs").exists());
}

// ---- Attacks on the reset from the kept walk (issue 12) ----

/// The slot of `fx`, prepared; `before` done to it, walked and kept
/// watched; `after` done since; then prepared again from the kept walk.
/// Returns the slot, the base and whether the kept walk did the reset.
fn kept_walk_reset(
    fx: &Fixture,
    before: impl FnOnce(&Path),
    after: impl FnOnce(&Path),
) -> (Slot, String) {
    use nightshift::snapshot::Snapshot;
    let first = fx.prepare(BRANCH);
    let (p, base) = (first.path.clone(), first.base_commit.clone());
    before(&p);
    let (walk, follow) = Snapshot::take_following(&p).unwrap();
    let kept = nightshift::slot::KeptWalk::new(&first, walk, follow.expect("watched"));
    after(&p);
    let slot = fx.prepare_next(Some(&base), kept);
    (slot, base)
}

/// The checkout `p` is at `base` on the item's branch, with nothing
/// changed, untracked or ignored.
fn assert_clean_at_base(p: &Path, base: &str) {
    assert_eq!(git(p, &["rev-parse", "HEAD"]), base);
    assert_eq!(
        git(p, &["symbolic-ref", "HEAD"]),
        "refs/heads/nightshift/next-1a2b3c4d"
    );
    let status = [
        "status",
        "--porcelain",
        "--ignored",
        "--untracked-files=all",
    ];
    assert_eq!(git(p, &status), "", "nothing changed, untracked or ignored");
}

/// What `git checkout --force` and `git clean -ffdx` leave: HEAD on the new
/// branch at `base`, nothing changed, untracked or ignored, every tracked
/// entry byte-identical to the base's (content, mode, link target; an
/// empty directory at a submodule path).
fn assert_left_as_git_leaves(p: &Path, base: &str) {
    assert_clean_at_base(p, base);
    let tree = git(p, &["ls-tree", "-r", "--full-tree", base]);
    for line in tree.lines() {
        let (head, path) = line.split_once('\t').unwrap();
        let mut f = head.split(' ');
        let (mode, oid) = (f.next().unwrap(), f.nth(1).unwrap());
        let at = p.join(path);
        let meta = std::fs::symlink_metadata(&at).unwrap_or_else(|e| panic!("{path}: {e}"));
        match mode {
            "160000" => {
                assert!(meta.is_dir(), "{path}: a submodule's directory");
                assert_eq!(std::fs::read_dir(&at).unwrap().count(), 0, "{path} empty");
            }
            "120000" => {
                assert!(meta.file_type().is_symlink(), "{path}: a link");
                let blob = git(p, &["cat-file", "blob", oid]);
                assert_eq!(std::fs::read_link(&at).unwrap().to_str().unwrap(), blob);
            }
            _ => {
                assert!(meta.is_file(), "{path}: a file");
                let exec = meta.permissions().mode() & 0o111 != 0;
                assert_eq!(exec, mode == "100755", "{path}: mode");
                let hashed = git(p, &["hash-object", "--no-filters", "--", path]);
                assert_eq!(hashed, oid, "{path}: content");
            }
        }
    }
}

/// [`outside`], with the hash of its files as made (to show later that
/// nothing wrote through to them).
fn outside_hashed(fx: &Fixture) -> (PathBuf, String) {
    let out = outside(fx);
    let untouched = tree_hash(&out);
    (out, untouched)
}

/// A directory outside the slot an agent aims links at: `tree_hash` of it
/// must not move.
fn outside(fx: &Fixture) -> PathBuf {
    let out = fx.root.join("outside");
    write(&out.join("lib.rs"), "outside's own lib.rs\n");
    write(&out.join("guide.md"), "outside's guide\n");
    write(&out.join("deep/keep.txt"), "keep\n");
    out
}

/// Links, hard links, FIFOs, sockets and odd names, made before the walk
/// and after it: the reset removes links as links (never what they point
/// at), writes no file outside the slot, and leaves what git leaves.
#[test]
fn a_kept_walk_reset_of_links_fifos_and_odd_names_stays_inside_the_slot() {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::fs::symlink;
    let fx = Fixture::new();
    let (out, untouched) = outside_hashed(&fx);
    let o = out.clone();
    let o2 = out.clone();
    let (slot, base) = kept_walk_reset(
        &fx,
        |p| {
            // A tracked file now a link to a file outside.
            std::fs::remove_file(p.join("README.md")).unwrap();
            symlink(o.join("lib.rs"), p.join("README.md")).unwrap();
            // A tracked file hard-linked from outside, and one outside
            // linked in as an untracked file.
            std::fs::hard_link(p.join("src/old.rs"), o.join("twin.rs")).unwrap();
            std::fs::hard_link(o.join("guide.md"), p.join("docs/hard.md")).unwrap();
            // An untracked directory that is a link to a directory outside.
            symlink(&o, p.join("escape")).unwrap();
            nix::unistd::mkfifo(&p.join("fifo"), nix::sys::stat::Mode::S_IRWXU).unwrap();
            let _sock = std::os::unix::net::UnixListener::bind(p.join("src/sock")).unwrap();
            let odd = std::ffi::OsStr::from_bytes(b"src/\xff\xfename\nwith newline");
            write(&p.join(odd), "odd\n");
            write(&p.join("target/été/x.o"), "ignored\n");
        },
        |p| {
            // After the walk: a tracked file replaced by a link to a
            // directory outside, the untracked link swapped for a
            // directory and back to a link, a FIFO where a tracked file was.
            std::fs::remove_file(p.join("docs/guide.md")).unwrap();
            symlink(&o2, p.join("docs/guide.md")).unwrap();
            std::fs::remove_file(p.join("escape")).unwrap();
            write(&p.join("escape/inner.txt"), "inner\n");
            std::fs::remove_dir_all(p.join("escape")).unwrap();
            symlink(&o2, p.join("escape")).unwrap();
            std::fs::remove_file(p.join("src/lib.rs")).unwrap();
            nix::unistd::mkfifo(&p.join("src/lib.rs"), nix::sys::stat::Mode::S_IRWXU).unwrap();
            let odd = std::ffi::OsStr::from_bytes(b"late\n\xff");
            write(&p.join(odd), "late\n");
        },
    );
    assert!(slot.undone, "reset from the kept walk");
    assert_left_as_git_leaves(&slot.path, &base);
    std::fs::remove_file(out.join("twin.rs")).unwrap();
    assert_eq!(tree_hash(&out), untouched, "nothing outside the slot moved");
}

/// A writer that swaps a tracked directory for a link to a directory
/// outside (holding files of the same names), before the walk or after
/// it: the reset never writes through the link.
#[test]
fn a_tracked_directory_swapped_for_a_link_is_not_written_through() {
    use std::os::unix::fs::symlink;
    for after_walk in [false, true] {
        let fx = Fixture::new();
        let (out, untouched) = outside_hashed(&fx);
        let swap = |p: &Path| {
            std::fs::remove_dir_all(p.join("docs")).unwrap();
            symlink(&out, p.join("docs")).unwrap();
            std::fs::remove_dir_all(p.join("src")).unwrap();
            symlink(&out, p.join("src")).unwrap();
        };
        let (slot, base) = if after_walk {
            kept_walk_reset(&fx, |_| {}, swap)
        } else {
            kept_walk_reset(&fx, swap, |_| {})
        };
        assert_left_as_git_leaves(&slot.path, &base);
        assert_eq!(tree_hash(&out), untouched, "after the walk: {after_walk}");
    }
}

/// `.git/index` replaced by a link to a file outside the slot, or by a
/// hard link to one: putting the base's index back replaces the entry,
/// never writes the file it points at.
#[test]
fn an_index_swapped_for_a_link_outside_is_replaced_not_written_through() {
    use std::os::unix::fs::symlink;
    for hard in [false, true] {
        let fx = Fixture::new();
        let (out, untouched) = outside_hashed(&fx);
        let o = out.clone();
        let (slot, base) = kept_walk_reset(
            &fx,
            |p| write(&p.join("src/lib.rs"), "changed\n"),
            |p| {
                let index = p.join(".git/index");
                std::fs::remove_file(&index).unwrap();
                if hard {
                    std::fs::hard_link(o.join("lib.rs"), &index).unwrap();
                } else {
                    symlink(o.join("lib.rs"), &index).unwrap();
                }
            },
        );
        assert_left_as_git_leaves(&slot.path, &base);
        assert_eq!(tree_hash(&out), untouched, "hard link: {hard}");
    }
}

/// `.git/index` replaced by a FIFO nothing reads: the reset neither hangs
/// nor leaves it.
#[test]
fn an_index_swapped_for_a_fifo_does_not_hang_the_reset() {
    let fx = Fixture::new();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let fx = fx;
        let (slot, base) = kept_walk_reset(
            &fx,
            |_| {},
            |p| {
                let index = p.join(".git/index");
                std::fs::remove_file(&index).unwrap();
                nix::unistd::mkfifo(&index, nix::sys::stat::Mode::S_IRWXU).unwrap();
            },
        );
        assert_left_as_git_leaves(&slot.path, &base);
        tx.send(()).unwrap();
    });
    let done = rx.recv_timeout(Duration::from_secs(30));
    assert!(done.is_ok(), "the reset hung (or failed) on a FIFO index");
}

/// The seed index beside the slot (`slot-N.index`) replaced by a link to
/// a file outside: the reset does not trust it (git resets) and the new
/// seed replaces the link instead of writing the file it points at.
#[test]
fn a_seed_index_swapped_for_a_link_outside_is_replaced_not_written_through() {
    use std::os::unix::fs::symlink;
    let fx = Fixture::new();
    let (out, untouched) = outside_hashed(&fx);
    let (seed, o) = (fx.slot_path().with_file_name("slot-0.index"), out.clone());
    let (slot, base) = kept_walk_reset(
        &fx,
        |p| write(&p.join("src/lib.rs"), "changed\n"),
        |_| {
            assert!(seed.is_file(), "the seed is {}", seed.display());
            std::fs::remove_file(&seed).unwrap();
            symlink(o.join("lib.rs"), &seed).unwrap();
        },
    );
    assert!(
        !slot.undone,
        "a seed that is no index leaves the reset to git"
    );
    assert_left_as_git_leaves(&slot.path, &base);
    let seed = fx.slot_path().with_file_name("slot-0.index");
    assert!(std::fs::symlink_metadata(&seed).unwrap().is_file());
    assert_eq!(tree_hash(&out), untouched);
}

/// A base with a submodule at `lib` (never checked out in a slot).
fn with_submodule(fx: &Fixture) {
    let seed = fx.root.join("seed");
    git(&seed, &["pull", "--quiet", "--ff-only", "origin", "main"]);
    let some_commit = git(&seed, &["rev-parse", "HEAD"]);
    let info = format!("160000,{some_commit},lib");
    git(&seed, &["update-index", "--add", "--cacheinfo", &info]);
    git(&seed, &["commit", "--quiet", "-m", "a submodule"]);
    git(&seed, &["push", "--quiet", "origin", "main"]);
    git(&fx.user, &["pull", "--quiet", "--ff-only"]);
}

/// A submodule's directory removed, or replaced by a file or a dangling
/// link, before the walk or after it: the reset leaves the empty
/// directory git's checkout leaves.
#[test]
fn a_submodule_path_replaced_by_a_file_or_link_or_removed_is_reset() {
    use std::os::unix::fs::symlink;
    type Act = fn(&Path);
    let acts: [(&str, Act); 4] = [
        ("removed", |p| std::fs::remove_dir(p.join("lib")).unwrap()),
        ("a file", |p| {
            std::fs::remove_dir(p.join("lib")).unwrap();
            write(&p.join("lib"), "a file\n");
        }),
        ("a dangling link", |p| {
            std::fs::remove_dir(p.join("lib")).unwrap();
            symlink("nowhere", p.join("lib")).unwrap();
        }),
        ("filled", |p| write(&p.join("lib/inner/x.txt"), "x\n")),
    ];
    for (what, act) in acts {
        for after_walk in [false, true] {
            let fx = Fixture::new();
            with_submodule(&fx);
            let (slot, base) = if after_walk {
                kept_walk_reset(&fx, |_| {}, act)
            } else {
                kept_walk_reset(&fx, act, |_| {})
            };
            let at = format!("{what}, after the walk: {after_walk}");
            assert!(slot.path.join("lib").is_dir(), "{at}");
            assert!(slot.filled_submodule_dirs().unwrap().is_empty(), "{at}");
            assert_left_as_git_leaves(&slot.path, &base);
        }
    }
}

/// A tracked `.gitattributes` rewritten by the writer (say, to CRLF line
/// ends) must not change how the other tracked files are checked out
/// again: they come back as the base has them.
#[test]
fn a_rewritten_gitattributes_does_not_change_how_files_come_back() {
    let fx = Fixture::new();
    fx.advance_remote(".gitattributes", "*.bin binary\n");
    // Checked out before `.gitattributes` (`-` sorts before `.`).
    fx.advance_remote("-first.txt", "first\nlines\n");
    let (slot, base) = kept_walk_reset(
        &fx,
        |p| {
            write(&p.join(".gitattributes"), "* text eol=crlf\n");
            write(&p.join("-first.txt"), "changed\n");
            write(&p.join("src/lib.rs"), "changed\n");
            write(&p.join("docs/guide.md"), "changed\n");
        },
        |_| {},
    );
    assert_left_as_git_leaves(&slot.path, &base);
    let lib = std::fs::read_to_string(slot.path.join("src/lib.rs")).unwrap();
    assert_eq!(lib, LIB_RS);
}

/// An untracked directory removed and made again after the walk (it gets
/// its old inode number back on ext4) with files written into it: the
/// reset still removes them.
#[test]
fn a_directory_made_again_after_the_walk_is_cleaned_whole() {
    let fx = Fixture::new();
    let (slot, base) = kept_walk_reset(
        &fx,
        |p| write(&p.join("target/debug/old.o"), "old\n"),
        |p| {
            for _ in 0..3 {
                std::fs::remove_dir_all(p.join("target/debug")).unwrap();
                std::fs::create_dir(p.join("target/debug")).unwrap();
                write(&p.join("target/debug/new.o"), "new\n");
                std::fs::remove_dir_all(p.join("src")).unwrap();
                std::fs::create_dir(p.join("src")).unwrap();
                write(&p.join("src/new.rs"), "new\n");
            }
        },
    );
    assert_left_as_git_leaves(&slot.path, &base);
}

/// A merge, cherry-pick or revert left in progress by the writer: `git
/// checkout` ends its state (MERGE_HEAD and the rest), so the next item's
/// commit is no merge; the reset from the kept walk must end it too.
#[test]
fn a_merge_left_in_progress_is_ended_by_the_reset() {
    let fx = Fixture::new();
    let states = [
        "MERGE_HEAD",
        "MERGE_MSG",
        "MERGE_MODE",
        "MERGE_RR",
        "AUTO_MERGE",
        "SQUASH_MSG",
        "CHERRY_PICK_HEAD",
        "REVERT_HEAD",
    ];
    for after_walk in [false, true] {
        let leave = |p: &Path| {
            let head = git(p, &["rev-parse", "HEAD"]);
            for name in states {
                write(&p.join(".git").join(name), &format!("{head}\n"));
            }
            write(&p.join("src/lib.rs"), "<<<<<<< conflict\n");
        };
        let (slot, base) = if after_walk {
            kept_walk_reset(&fx, |_| {}, leave)
        } else {
            kept_walk_reset(&fx, leave, |_| {})
        };
        assert_left_as_git_leaves(&slot.path, &base);
        for name in states {
            let left = slot.path.join(".git").join(name);
            assert!(!left.exists(), "{name} left, after the walk: {after_walk}");
        }
    }
}

/// A tended PR's change squashed onto the base leaves the slot's index
/// (and its seed) holding the squashed tree, not the base's: the next
/// item's reset from a walk kept after it must still leave the base.
#[test]
fn a_kept_walk_after_a_squash_onto_the_base_still_resets_to_the_base() {
    use nightshift::snapshot::Snapshot;
    let fx = Fixture::new();
    let mut first = fx.prepare(BRANCH);
    let (p, base) = (first.path.clone(), first.base_commit.clone());
    write(&p.join("src/lib.rs"), "the PR's change\n");
    write(&p.join("src/pr.rs"), "the PR's file\n");
    git(&p, &["add", "-A"]);
    git(&p, &["commit", "-q", "-m", "the PR"]);
    let head = git(&p, &["rev-parse", "HEAD"]);
    git(&p, &["reset", "-q", "--hard", &base]);
    let (files, _tree) = first.squash_onto_base(&head).expect("squashed");
    assert!(files.is_empty());
    // The squash's message gone (an agent's `git commit`, or removed).
    let _ = std::fs::remove_file(p.join(".git/SQUASH_MSG"));
    write(&p.join("src/writer.rs"), "the writer's work\n");
    let (walk, follow) = Snapshot::take_following(&p).unwrap();
    let kept = nightshift::slot::KeptWalk::new(&first, walk, follow.expect("watched"));
    let slot = fx.prepare_next(Some(&base), kept);
    assert_left_as_git_leaves(&slot.path, &base);
    assert!(!p.join("src/pr.rs").exists());
}

/// The proof's tree diff reads only the paths that differ, named to
/// libgit2 as a path list: names a pattern parser reads otherwise (a
/// leading `#` or `!`, a newline, spaces, glob characters, a backslash)
/// must still be in the change, beside an ordinary one.
#[test]
fn the_proof_of_a_tree_sees_files_whatever_their_names() {
    let fx = Fixture::new();
    let slot = fx.prepare(BRANCH);
    let start = RoundStart::record(&slot).unwrap();
    let p = &slot.path;
    let names = [
        "#notes.md",
        "!bang.md",
        "src/#hash.rs",
        "src/!not.rs",
        "new\nline.md",
        " lead.md",
        "trail.md ",
        "star*.md",
        "q?.md",
        "[ab].md",
        "back\\slash.md",
        "dir/",
    ];
    for name in names {
        if let Some(dir) = name.strip_suffix('/') {
            write(&p.join(dir).join("inner.md"), "inner\n");
        } else {
            write(&p.join(name), "new\n");
        }
    }
    write(&p.join("src/lib.rs"), "changed\n");
    git(p, &["add", "-A"]);
    let tree = git(p, &["write-tree"]);
    let proof = Proof::collect_tree(p, &start, &tree, &[], &[]).unwrap();
    let changed: Vec<&str> = proof.changed.iter().map(|c| c.path.as_str()).collect();
    for name in names.iter().map(|n| n.replace("dir/", "dir/inner.md")) {
        assert!(changed.contains(&name.as_str()), "{name:?} in {changed:?}");
    }
    assert!(changed.contains(&"src/lib.rs"));
    // The secret check reads the same diff.
    let base = git(p, &["rev-parse", "HEAD"]);
    let redactor = nightshift::secret::Redactor::new([
        "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB".to_string(),
    ]);
    write(
        &p.join("#token.txt"),
        "ghp_0123456789abcdefghijklmnopqrstuvwxyzAB\n",
    );
    git(p, &["add", "-A"]);
    let tree = git(p, &["write-tree"]);
    let found = nightshift::proof::secret_in_change(p, &base, &tree, &redactor).unwrap();
    assert_eq!(found.as_deref(), Some("#token.txt"));
}

/// What the kept walk cannot tell leaves the reset to git, which leaves
/// the base: a tracked file turned directory, a nested repository in a
/// tracked directory, a `.git` file, more paths changed after the walk
/// than a refresh reads, a tracked file hard-linked and written through
/// its other link after the walk.
#[test]
fn what_the_kept_walk_cannot_tell_is_reset_by_git() {
    type Act = fn(&Path);
    let cases: [(&str, Act, Act); 5] = [
        (
            "a file turned directory",
            |p| {
                std::fs::remove_file(p.join("src/old.rs")).unwrap();
                write(&p.join("src/old.rs/inner.rs"), "inner\n");
            },
            |_| {},
        ),
        (
            "a nested repository",
            |p| git(&p.join("src"), &["init", "-q", "nested"]).truncate(0),
            |_| {},
        ),
        (
            "a .git file",
            |p| write(&p.join("docs/.git"), "gitdir: /nowhere\n"),
            |_| {},
        ),
        (
            "over the refresh's paths",
            |_| {},
            |p| {
                for i in 0..=10_000 {
                    write(&p.join(format!("src/f{i}")), "");
                }
            },
        ),
        (
            "a hard link written through",
            |_| {},
            |p| {
                std::fs::hard_link(p.join("src/lib.rs"), p.join("src/twin.rs")).unwrap();
                std::fs::write(p.join("src/twin.rs"), "through the twin\n").unwrap();
            },
        ),
    ];
    for (what, before, after) in cases {
        let fx = Fixture::new();
        let (slot, base) = kept_walk_reset(&fx, before, after);
        assert!(!slot.undone, "{what}: reset by git");
        assert_left_as_git_leaves(&slot.path, &base);
    }
}

/// What a test does to the slot before its walk.
type Before = fn(&Path);

/// What is done to a slot before its walk, for each of the two resets
/// [`kept_walk_reset`] can end in: by git (nothing else changed) and from
/// the kept walk (a new file; true: the test may assert it).
fn both_resets() -> [(&'static str, Before, bool); 2] {
    [
        ("nothing else changed", |_| {}, false),
        (
            "a new file",
            |p| write(&p.join("src/new.rs"), "new\n"),
            true,
        ),
    ]
}

/// `.git/HEAD` replaced by a link to a file outside the slot: pointing
/// HEAD at the new branch replaces the link, never writes the file —
/// whether git resets the slot (nothing else changed) or the kept walk
/// does (libgit2 would write a ref through a link; seen once in CI).
#[test]
fn a_head_swapped_for_a_link_outside_is_replaced_not_written_through() {
    use std::os::unix::fs::symlink;
    for (what, before, by_walk) in both_resets() {
        let fx = Fixture::new();
        let (out, untouched) = outside_hashed(&fx);
        let o = out.clone();
        let (slot, base) = kept_walk_reset(&fx, before, |p| {
            let head = p.join(".git/HEAD");
            std::fs::copy(&head, o.join("HEAD")).unwrap();
            std::fs::remove_file(&head).unwrap();
            symlink(o.join("HEAD"), &head).unwrap();
        });
        if by_walk {
            assert!(slot.undone, "{what}: reset from the kept walk");
        }
        let outside_head = std::fs::read_to_string(out.join("HEAD")).unwrap();
        assert_eq!(
            outside_head,
            format!("ref: refs/heads/{BRANCH}\n"),
            "{what}"
        );
        std::fs::remove_file(out.join("HEAD")).unwrap();
        assert_eq!(tree_hash(&out), untouched, "{what}");
        let head = std::fs::symlink_metadata(slot.path.join(".git/HEAD")).unwrap();
        assert!(head.is_file(), "{what}");
        assert_left_as_git_leaves(&slot.path, &base);
    }
}

/// `.git/refs/heads/nightshift` (the directory of the item branches)
/// replaced by a link to a directory outside the slot: the reset writes
/// the new branch in the slot and leaves the outside directory as it was,
/// by git or by the kept walk.
#[test]
fn a_ref_directory_swapped_for_a_link_outside_is_not_written_through() {
    use std::os::unix::fs::symlink;
    for (what, before, _) in both_resets() {
        let fx = Fixture::new();
        let (out, _) = outside_hashed(&fx);
        let o = out.join("refs");
        let (slot, base) = kept_walk_reset(&fx, before, |p| {
            let dir = p.join(".git/refs/heads/nightshift");
            std::fs::create_dir_all(&o).unwrap();
            for e in std::fs::read_dir(&dir).unwrap() {
                let e = e.unwrap();
                std::fs::copy(e.path(), o.join(e.file_name())).unwrap();
            }
            std::fs::remove_dir_all(&dir).unwrap();
            symlink(&o, &dir).unwrap();
        });
        let mut names: Vec<_> = std::fs::read_dir(&o)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["demo-1a2b3c4d"], "{what}: outside as it was");
        let dir = std::fs::symlink_metadata(slot.path.join(".git/refs/heads/nightshift")).unwrap();
        assert!(dir.is_dir(), "{what}");
        assert_left_as_git_leaves(&slot.path, &base);
    }
}
