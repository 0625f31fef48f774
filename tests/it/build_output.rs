//! Build output per slot (docs/loop.md#build-output-per-slot; issue 21,
//! point 1): with `--jobs 3` and a shared `CARGO_TARGET_DIR` in the
//! environment, each gate builds and tests its own slot's code, and an item
//! that fails its tests is never pushed. Real cargo on a real Rust project,
//! real PostgreSQL, the fake GitHub, the real binary.

use std::path::Path;

use crate::common;

use common::github::FakeGitHub;
use common::{Fixture, git, text};

/// A writer that adds a function and its test to `src/lib.rs`, named after
/// the item (`Add <word>`); the item `Add broken` adds a test that fails.
const WRITER: &str = r#"#!/bin/sh
set -eu
word=$(grep -o '"title":"Add [a-z0-9]*' "$NIGHTSHIFT_CONTRACT_FILE" | head -1 | sed 's/.*Add //')
expect=1
[ "$word" = broken ] && expect=2
cat >> src/lib.rs <<RS

/// One, as $word.
pub fn $word() -> i32 {
    1
}

#[cfg(test)]
mod ${word}_tests {
    #[test]
    fn ${word}_is_one() {
        assert_eq!(super::$word(), $expect);
    }
}
RS
echo "added $word"
"#;

const REVIEWER: &str = "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n";

/// The fixture's repository turned into a Rust crate with no dependencies,
/// gated by `cargo test --quiet`; cargo and rustup found where this test's
/// own environment finds them (the fixture's HOME is empty).
fn rust_world(f: &mut Fixture) {
    f.write(
        "Cargo.toml",
        "[package]\nname = \"calc\"\nversion = \"0.1.0\"\nedition = \"2021\"\n\n[dependencies]\n",
    );
    f.write("src/lib.rs", "//! calc\n");
    f.write(".gitignore", "/target\n");
    git(&f.repo, &["add", "-A"]);
    git(&f.repo, &["commit", "-q", "-m", "a crate"]);
    git(&f.repo, &["push", "-q", "origin", "main"]);
    let real_home = std::env::var("HOME").unwrap_or_else(|_| "/root".into());
    for (var, fallback) in [("RUSTUP_HOME", ".rustup"), ("CARGO_HOME", ".cargo")] {
        let v = std::env::var(var).unwrap_or_else(|_| format!("{real_home}/{fallback}"));
        f.extra_env.push((var.into(), v));
    }
    let w = f.agent("writer.sh", WRITER);
    let r = f.agent("reviewer.sh", REVIEWER);
    // The toolchain lies outside the system directories: the sandbox shows
    // it read-only (docs/config.md#sandbox).
    let toolchain: Vec<String> = (f.extra_env.iter())
        .filter(|(k, _)| k == "RUSTUP_HOME" || k == "CARGO_HOME")
        .map(|(_, v)| format!("\"{v}\""))
        .collect();
    f.config(&format!(
        "verify = [\"cargo test --quiet\"]\n\n[limits]\nrounds = 1\n\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n\n[sandbox]\nread = [{}]\nwrite = [\"{}\"]\n",
        toolchain.join(", "),
        f.dir.path().display()
    ));
}

/// Whether `dir` holds anything.
fn has_entries(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_some())
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_3_with_a_shared_cargo_target_dir_test_each_slot_and_never_push_a_failing_item() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_testtoken_0123456789abcdef".into());
    rust_world(&mut f);
    let shared = f.dir.path().join("shared-target");
    f.extra_env
        .push(("CARGO_TARGET_DIR".into(), shared.display().to_string()));
    f.write(
        "NEXT.md",
        "# words\n\n- [ ] Add alpha\n- [ ] Add broken\n- [ ] Add gamma\n- [ ] Add delta\n- [ ] Add omega\n",
    );
    let out = f.approve_and_drain(&["--jobs", "3"]);
    let log = text(&out);
    // The failing item fails the run.
    assert_eq!(out.status.code(), Some(1), "{log}");
    // The run's header says where slots build, and what it replaced.
    assert!(
        log.contains("each slot builds in its own directory")
            && log.contains(&format!("CARGO_TARGET_DIR={}", shared.display())),
        "{log}"
    );
    let report = f.report();
    let items = report["items"].as_array().unwrap();
    assert_eq!(items.len(), 5, "{report:#}");
    for i in items {
        let want = if i["title"] == "Add broken" {
            "tests_failed"
        } else {
            "pr_opened"
        };
        assert_eq!(i["outcome"], want, "{}: {report:#}", i["title"]);
    }
    // The failing item's branch never reached the remote; the others did.
    let branches = f.remote_branches();
    assert_eq!(branches.len(), 4, "{branches:?}");
    assert!(
        !branches.iter().any(|b| b.contains("broken")),
        "{branches:?}"
    );
    assert_eq!(gh.prs().len(), 4);
    // No gate and no writer built into the shared directory; each slot has its own.
    assert!(
        !has_entries(&shared),
        "something built into {}",
        shared.display()
    );
    let slots = std::fs::read_dir(f.data.join("slots"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let built: Vec<_> = (0..3)
        .map(|n| slots.join(format!("slot-{n}.build/cargo-target")))
        .filter(|d| has_entries(d))
        .collect();
    assert!(built.len() >= 2, "per-slot build directories: {built:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn jobs_2_with_a_virtualenv_outside_the_checkout_is_refused_with_the_fix() {
    let mut f = Fixture::new();
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    let r = f.agent("reviewer.sh", REVIEWER);
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "# words\n\n- [ ] Add alpha\n- [ ] Add beta\n");
    let venv = f.dir.path().join("venv");
    f.extra_env
        .push(("VIRTUAL_ENV".into(), venv.display().to_string()));
    let out = f.approve_and_drain(&["--jobs", "2"]);
    let log = text(&out);
    assert_eq!(out.status.code(), Some(2), "{log}");
    assert!(
        log.contains(&format!("VIRTUAL_ENV={}", venv.display())) && log.contains("--jobs 1"),
        "{log}"
    );
    assert!(f.remote_branches().is_empty());
    // One job is allowed: nothing else shares the virtualenv.
    let out = f.run(&["drain", "--jobs", "1"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(f.remote_branches().len(), 2);
}
