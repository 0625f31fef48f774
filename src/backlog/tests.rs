//! Unit tests of the backlog reader: durations, keywords, scope words and
//! the other line readers, called directly.

use super::details::*;
use super::lines::*;
use super::lints::*;
use super::model::*;
use super::parse::*;
use std::path::Path;

#[test]
fn durations() {
    let secs = |s: &str| item_timeout(s).map(|d| d.as_secs());
    for (text, want) in [
        ("45m", 2700),
        ("2h", 7200),
        ("90s", 90),
        ("1h30m", 5400),
        ("1h 30m", 5400),
        ("1H30M", 5400),
        ("45 min", 2700),
        ("45mins", 2700),
        ("2 hours", 7200),
        ("1 hour 30 minutes", 5400),
        ("1d", 86_400),
        ("45分鐘", 2700),
        ("2小時", 7200),
        ("１ｈ３０ｍ", 5400),
        ("30 秒", 30),
        ("1.5h", 5400),
        ("10 minutes", 600),
    ] {
        assert_eq!(secs(text), Ok(want), "{text:?}");
    }
    for bad in [
        "",
        "45",
        "m",
        "4 5m",
        "1x",
        "0m",
        "99999999999999999999h",
        "-1h",
        "abc",
        "45 furlongs",
        "m45",
    ] {
        assert!(item_timeout(bad).is_err(), "{bad:?} should be refused");
    }
    assert!(item_timeout("90").unwrap_err().contains("`timeout: 90m`"));
}

#[test]
fn rounds() {
    assert_eq!(item_rounds("3"), Ok(3));
    assert_eq!(item_rounds("３"), Ok(3));
    assert_eq!(item_rounds("007"), Ok(7));
    for bad in [
        "",
        "0",
        "three",
        "+3",
        "-1",
        "2 rounds",
        "1.5",
        "99999999999",
    ] {
        assert!(item_rounds(bad).is_err(), "{bad:?} should be refused");
    }
}

#[test]
fn keywords() {
    assert_eq!(
        keyword("accept: it works"),
        Some((DetailKind::Accept, "it works"))
    );
    assert_eq!(keyword("Accept : x"), Some((DetailKind::Accept, "x")));
    assert_eq!(
        keyword("scope：src/**"),
        Some((DetailKind::Scope, "src/**"))
    );
    assert_eq!(keyword("accepted: no"), None);
    assert_eq!(keyword("timeout"), None);
    assert_eq!(keyword("note: rounds: 2"), None);
    for bold in [
        "**accept:** x",
        "**Accept**: x",
        "__accept__ : x",
        "*accept:* x",
        "_accept_: x",
        "**accept**：x",
    ] {
        assert_eq!(keyword(bold), Some((DetailKind::Accept, "x")), "{bold:?}");
    }
    // Emphasis must close around the keyword or its colon.
    assert_eq!(keyword("**accept: x"), None);
    assert_eq!(keyword("**accepted**: x"), None);
}

#[test]
fn change_limits_are_detail_lines() {
    let b = parse(
        Path::new("NEXT.md"),
        "- [ ] Add sub
  - max_changed_files: 3
  - **MAX_DIFF_LINES:** ４０
  - max-changed-files: 2
  - max_diff_lines: 0
  - max_files: 9
  - max_changed_files: 5
",
    );
    let d = &b.items[0].details;
    assert_eq!(d.max_changed_files, Some((5, 7)));
    assert_eq!(d.max_diff_lines, Some((40, 3)));
    assert_eq!(d.lines[0].kind, DetailKind::MaxChangedFiles);
    let problems: Vec<(usize, &str)> = b
        .problems
        .iter()
        .map(|p| (p.line, p.message.as_str()))
        .collect();
    assert_eq!(problems.len(), 4, "{problems:?}");
    assert!(
        problems[0].1.contains("did you mean `max_changed_files:`"),
        "{problems:?}"
    );
    assert!(
        problems[1]
            .1
            .contains("`max_diff_lines: 0`: a change touches at least 1")
    );
    assert!(problems[2].1.contains("did you mean `max_changed_files:`"));
    assert!(
        problems[3]
            .1
            .contains("`max_changed_files:` given again (first on line 2)")
    );
    assert!(item_count("max_diff_lines", "lots").is_err());
}

#[test]
fn verify_values() {
    assert_eq!(verify_command("`cargo test`"), Ok("cargo test".to_string()));
    assert_eq!(verify_command("``echo `x` ``"), Ok("echo `x`".to_string()));
    assert_eq!(
        verify_command("npm test -- --ci"),
        Ok("npm test -- --ci".to_string())
    );
    assert!(verify_command("`cargo test").is_err());
    assert!(verify_command("``").is_err());
    assert!(verify_command("`a` and `b`").is_err());
    assert!(
        verify_command("`$ cargo test`")
            .unwrap_err()
            .contains("verify: `cargo test`")
    );
    assert!(
        verify_command("$ make")
            .unwrap_err()
            .contains("verify: `make`")
    );
    assert_eq!(
        verify_command("`$HOME/bin/check`"),
        Ok("$HOME/bin/check".to_string())
    );
}

#[test]
fn scope_splitting() {
    assert_eq!(
        scope_globs("src/**, tests/*.rs  `docs/**`，a.md"),
        Ok(vec![
            "src/**".to_string(),
            "tests/*.rs".into(),
            "docs/**".into(),
            "a.md".into()
        ])
    );
    assert_eq!(
        scope_globs("src/a.rs、src/b.rs；docs ;c"),
        Ok(vec![
            "src/a.rs".to_string(),
            "src/b.rs".into(),
            "docs".into(),
            "c".into()
        ])
    );
    assert_eq!(scope_globs(" , ，"), Ok(vec![]));
    assert_eq!(scope_globs("` `"), Ok(vec![]));
    assert!(
        scope_globs("`src/**` only the parser")
            .unwrap_err()
            .contains("\"only the parser\"")
    );
    assert!(scope_globs("`src/**").unwrap_err().contains("unclosed"));
    assert!(
        scope_globs("/etc/**")
            .unwrap_err()
            .contains("leaves the repository")
    );
    assert!(
        scope_globs("src/**, ../**")
            .unwrap_err()
            .contains("\"../**\" leaves the repository")
    );
    assert_eq!(scope_globs("src/..rs"), Ok(vec!["src/..rs".to_string()]));
}

#[test]
fn indentation() {
    assert_eq!(columns("- "), 2);
    assert_eq!(columns("-\t"), 4);
    assert_eq!(columns("10. "), 4);
    assert_eq!(strip_indent("    - x", 2), "  - x");
    assert_eq!(strip_indent("\t- x", 2), "- x");
    assert_eq!(strip_indent(" x", 4), "x");
    assert_eq!(strip_bullet("  - accept: x"), ("accept: x", true));
    assert_eq!(strip_bullet("12) accept: x"), ("accept: x", true));
    assert_eq!(strip_bullet("-accept"), ("-accept", false));
    assert_eq!(strip_bullet("1234567890. x"), ("1234567890. x", false));
    assert_eq!(strip_bullet("*"), ("", true));
    assert_eq!(strip_bullet("**accept:** x"), ("**accept:** x", false));
}

#[test]
fn stray_boxes() {
    let flagged = |body: &str, bullet: bool| stray_box(body, bullet).is_some();
    for (body, bullet) in [
        ("[] x", true),
        ("[\u{3000}] x", true),
        ("[\u{a0}] x", true),
        ("[  ] x", true),
        ("[ ]\u{3000}x", true),
        ("[ ]x", true),
        ("[ ] x", false),
        ("[ ] x", true),
        ("[ ]", true),
        ("[!] x", true),
        ("[?] x", true),
        ("[*] x", true),
    ] {
        assert!(flagged(body, bullet), "{body:?} bullet={bullet}");
    }
    for (body, bullet) in [
        ("[-] cancelled", true),
        ("[/] in progress", true),
        ("[~] x", true),
        ("[>] deferred", true),
        ("[ x] done", true),
        ("[✓] done", true),
        ("[ｘ] done", true),
        ("[a] option", true),
        ("[1] reference", true),
        ("[WIP] title", true),
        ("[x](http://e.com) link", true),
        ("[1]: http://e.com", false),
        ("[!] x", false),
        ("[]", false),
        ("[ ]x", false),
        ("[ ]x", false),
        ("plain", true),
    ] {
        assert!(!flagged(body, bullet), "{body:?} bullet={bullet}");
    }
}

#[test]
fn line_index_handles_lone_cr() {
    let text = "a\rbb\r\rc\r\nd\n";
    let idx = LineIndex::new(text);
    assert_eq!(idx.count(), 6);
    let lines: Vec<&str> = (1..=6).map(|n| &text[idx.range(n)]).collect();
    assert_eq!(lines, ["a", "bb", "", "c", "d", ""]);
    assert_eq!(idx.line_of(1), 1);
    assert_eq!(idx.line_of(2), 2);
    assert_eq!(idx.line_of(8), 4);
}

#[test]
fn line_index_handles_crlf_and_missing_final_newline() {
    let text = "a\r\nbb\nccc";
    let idx = LineIndex::new(text);
    assert_eq!(idx.count(), 3);
    assert_eq!(&text[idx.range(1)], "a");
    assert_eq!(&text[idx.range(2)], "bb");
    assert_eq!(&text[idx.range(3)], "ccc");
    assert_eq!(idx.line_of(0), 1);
    assert_eq!(idx.line_of(3), 2);
    assert_eq!(idx.line_of(7), 3);
}

#[test]
fn allow_lines_are_globs_in_the_grammar_of_scope() {
    let b = parse(
        Path::new("NEXT.md"),
        "- [ ] Fix CI
  - scope: src/** .github/workflows/ci.yml
  - allow: .github/workflows/ci.yml
  - **Allow:** `.gitlab-ci.yml`, `.circleci/**`；`Jenkinsfile`
  - allow:
  - allow: /etc/**
  - allow: `.github/**` only the test job
  - allow: src/[a
  - alow: .travis.yml
- [ ] No allow here
",
    );
    let d = &b.items[0].details;
    assert_eq!(
        d.allow,
        [
            ".github/workflows/ci.yml",
            ".gitlab-ci.yml",
            ".circleci/**",
            "Jenkinsfile"
        ]
    );
    assert_eq!(d.scope, ["src/**", ".github/workflows/ci.yml"]);
    assert_eq!(d.lines[1].kind, DetailKind::Allow);
    assert!(b.items[1].details.allow.is_empty());
    let problems: Vec<(usize, &str)> = b
        .problems
        .iter()
        .map(|p| (p.line, p.message.as_str()))
        .collect();
    assert_eq!(problems.len(), 5, "{problems:?}");
    assert_eq!(problems[0].0, 5);
    assert!(problems[0].1.starts_with("empty `allow:`"), "{problems:?}");
    assert_eq!(problems[1].0, 6);
    assert!(
        problems[1]
            .1
            .contains("allow \"/etc/**\" leaves the repository"),
        "{problems:?}"
    );
    assert_eq!(problems[2].0, 7);
    assert!(
        problems[2].1.starts_with("prose in `allow:`"),
        "{problems:?}"
    );
    assert_eq!(problems[3].0, 8);
    assert!(
        problems[3].1.starts_with("bad glob `src/[a` in `allow:`"),
        "{problems:?}"
    );
    assert_eq!(problems[4].0, 9);
    assert!(
        problems[4].1.contains("did you mean `allow:`"),
        "{problems:?}"
    );
    // Problems are reported with the file and line, as every detail's are.
    assert!(
        b.problems[0]
            .to_string()
            .starts_with("NEXT.md:5: empty `allow:`"),
        "{}",
        b.problems[0]
    );
}
