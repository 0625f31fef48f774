//! Tests of reading, checking and wording the config (moved with the code from `config.rs`).

use std::path::Path;
use std::time::Duration;

use super::error::keys_of;
use super::*;

fn err(text: &str) -> (usize, Option<String>, String) {
    match parse(Path::new(".nightshift/config.toml"), text) {
        Err(ConfigError::Invalid {
            line, key, message, ..
        }) => (line, key, message),
        other => panic!("expected an invalid config, got {other:?}"),
    }
}

#[test]
fn template_parses_to_the_defaults() {
    let c = parse(Path::new("t"), TEMPLATE).unwrap();
    let d = Config::default();
    assert_eq!(c.limits, d.limits);
    assert_eq!(c.verify, d.verify);
    assert_eq!(c.writer, d.writer);
    // The commented-out caps are the defaults, so uncommenting one changes nothing by itself.
    let mut in_limits = false;
    let uncommented: String = TEMPLATE
        .lines()
        .map(|l| {
            if l.starts_with('[') {
                in_limits = l.starts_with("[limits]");
            }
            if in_limits {
                l.strip_prefix("# ")
                    .filter(|r| r.split_whitespace().nth(1) == Some("="))
                    .unwrap_or(l)
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n");
    assert!(uncommented.contains("\nrounds = 3\n"), "{uncommented}");
    assert_eq!(
        parse(Path::new("t"), &uncommented).unwrap().limits,
        d.limits
    );
}

#[test]
fn init_writes_a_guessed_gate_or_a_marked_placeholder() {
    let c = parse(Path::new("t"), &template_with_gate(Some("go test ./..."))).unwrap();
    assert_eq!(c.verify, ["go test ./..."]);
    let text = template_with_gate(None);
    assert!(
        text.contains("# PLACEHOLDER: set your test command"),
        "{text}"
    );
    assert_eq!(
        parse(Path::new("t"), &text).unwrap().verify,
        [PLACEHOLDER_GATE]
    );
}

#[test]
fn every_read_error_says_what_to_write() {
    let cases = [
        ("verify = \"sh test.sh\"\n", "`verify = [\"sh test.sh\"]`"),
        ("setup = \"npm ci\"\n", "`setup = [\"npm ci\"]`"),
        ("backlog = 5\n", "`backlog = \"NEXT.md\"`"),
        ("tick_in_pr = \"yes\"\n", "`tick_in_pr = false`"),
        (
            "max_findings_per_item = \"5\"\n",
            "`max_findings_per_item = 5`",
        ),
        ("[limits]\nrounds = -1\n", "`rounds = 3`"),
        ("[limits]\nmax_cost_usd = \"20\"\n", "`max_cost_usd = 20.0`"),
        (
            "[limits]\nagent_timeout = 45\n",
            "`agent_timeout = \"60m\"`",
        ),
        (
            "[limits]\nagent_timeout = \"0s\"\n",
            "`agent_timeout = \"60m\"`",
        ),
        ("[limits]\ngate_timeout = \"soon\"\n", "write e.g. \"45m\""),
        ("[writer]\nkind = \"claud\"\n", "`kind = \"claude\"`"),
        (
            "[writer]\ncommand = \"claude\"\n",
            "`command = [\"claude\"]`",
        ),
        ("writer = \"claude\"\n", "write `[writer]` on its own line"),
        ("deadline = \"7am\"\n", "write HH:MM"),
        ("timezone = \"Mars/Base\"\n", "use an IANA name"),
        ("github_repo = \"nope\"\n", "`github_repo = \"owner/repo\"`"),
        ("base = main\n", "`base = \"main\"`"),
        ("base = \"a\"\nbase = \"b\"\n", "keep one"),
        (
            "[[recipes]]\nprefix = \"fix:\"\n",
            "add `prompt = \"docs/FIX.md\"`",
        ),
        ("[recipes]\nprefix = \"fix:\"\n", "[[recipes]]"),
        ("[limits]\nlimit_sleep_min = \"7h\"\n", "lower it or raise"),
        ("base = \"\"\n", "`base = \"main\"`"),
        ("max_open_prs = 0\n", "`max_open_prs = 10`"),
        ("max_open_prs = \"many\"\n", "`max_open_prs = 10`"),
        ("draft = 1\n", "`draft = false`"),
        ("protected = \"x/**\"\n", "`protected = [\"x/**\"]`"),
        ("protected = [\"a[b\"]\n", "`protected = [\"migrations/**\""),
        (
            "[limits]\nmax_changed_files = 0\n",
            "`max_changed_files = 100`",
        ),
        (
            "[limits]\nmax_diff_lines = \"5k\"\n",
            "`max_diff_lines = 5000`",
        ),
    ];
    for (text, fix) in cases {
        let (line, _, message) = err(text);
        assert!(line >= 1, "{text}");
        assert!(message.contains(fix), "{text:?} → {message}");
    }
}

#[test]
fn unknown_key_names_line_and_key() {
    let (line, key, message) = err("base = \"main\"\nverfy = [\"x\"]\n");
    assert_eq!(line, 2);
    assert_eq!(key.as_deref(), Some("verfy"));
    assert!(message.contains("unknown field"), "{message}");
}

#[test]
fn unknown_key_in_a_table() {
    let (line, key, message) = err("[limits]\nrounds = 2\nroundz = 3\n");
    assert_eq!(line, 3);
    assert_eq!(key.as_deref(), Some("roundz"));
    assert!(message.contains("did you mean `rounds`?"), "{message}");
}

#[test]
fn a_key_appended_below_another_table_is_told_where_it_belongs() {
    let tail = "[reviewer]\nkind = \"claude\"\n";
    let (line, _, message) = err(&format!("{tail}verfy = [\"x\"]\n"));
    assert_eq!(line, 3);
    assert!(
        message
            .contains("`verify` is a key of the top level: move it above the first `[table]` line"),
        "{message}"
    );
    let (_, _, message) = err(&format!("{tail}rounds = 5\n"));
    assert!(
        message.contains("`rounds` is a key of [limits]: move it under the `[limits]` line"),
        "{message}"
    );
    assert!(
        keys_of("").contains(&"verify".to_string())
            && keys_of("[limits]").contains(&"item_timeout".to_string())
    );
}

#[test]
fn a_misspelt_key_gets_the_nearest_known_one_and_junk_gets_none() {
    assert!(
        err("verfiy = [\"x\"]\n")
            .2
            .contains("did you mean `verify`?")
    );
    assert!(
        err("[writer]\ncomand = [\"x\"]\n")
            .2
            .contains("did you mean `command`?")
    );
    let (_, _, message) = err("zzzzzz = 1\n");
    assert!(
        !message.contains("did you mean") && message.contains("remove the key or fix its spelling"),
        "{message}"
    );
}

#[test]
fn cost_caps_are_positive_finite_and_at_most_a_million() {
    let (line, key, message) = err("[limits]\nmax_cost_usd_per_run = 1e300\n");
    assert_eq!(
        (line, key.as_deref()),
        (2, Some("max_cost_usd_per_run")),
        "{message}"
    );
    assert!(message.contains("at most 1000000 USD"), "{message}");
    assert!(
        err("[limits]\nmax_cost_usd = -1.0\n")
            .2
            .contains("positive number of USD")
    );
    assert!(
        err("[limits]\nmax_cost_usd = nan\n")
            .2
            .contains("positive number of USD")
    );
    assert!(
        parse(
            Path::new("c"),
            "[limits]\nmax_cost_usd_per_run = 1000000.0\n"
        )
        .is_ok()
    );
}

#[test]
fn durations_longer_than_a_year_are_refused() {
    let (line, _, message) = err("[limits]\nlimit_sleep_max = \"9999999999999h\"\n");
    assert_eq!(line, 2);
    assert!(
        message.contains("duration too large") || message.contains("longer than a year"),
        "{message}"
    );
    let (_, _, message) = err("[limits]\nlimit_buffer = \"400d\"\n");
    assert!(message.contains("longer than a year"), "{message}");
    assert!(parse_duration("366d").is_ok());
}

#[test]
fn a_left_out_command_is_the_kinds_own_cli_and_a_command_agent_must_name_one() {
    let c = parse(
        Path::new("t"),
        "[writer]\nkind = \"codex\"\n[reviewer]\nkind = \"claude\"\n",
    )
    .unwrap();
    assert_eq!(c.writer.command, ["codex"]);
    assert_eq!(c.reviewer.command, ["claude"]);
    let (line, _, message) = err("[writer]\nkind = \"command\"\n");
    assert!(
        line >= 1 && message.contains("[writer] command must name an executable"),
        "{message}"
    );
}

#[test]
fn max_tend_rounds_defaults_to_three_and_is_bounded() {
    assert_eq!(Config::default().limits.max_tend_rounds, 3);
    let c = parse(Path::new("t"), "[limits]\nmax_tend_rounds = 5\n").unwrap();
    assert_eq!(c.limits.max_tend_rounds, 5);
    for bad in ["0", "101"] {
        let (line, key, message) = err(&format!("[limits]\nmax_tend_rounds = {bad}\n"));
        assert_eq!(
            (line, key.as_deref()),
            (2, Some("max_tend_rounds")),
            "{message}"
        );
    }
}

#[test]
fn a_value_of_the_wrong_type_names_its_key() {
    let (line, key, message) = err("base = \"main\"\nbacklog = 5\n");
    assert_eq!((line, key.as_deref()), (2, Some("backlog")));
    assert!(message.starts_with("`backlog`: invalid type"), "{message}");
    let (_, key, message) = err("[limits]\nrounds = -1\n");
    assert_eq!(key.as_deref(), Some("rounds"), "{message}");
    assert!(message.starts_with("`rounds`:"), "{message}");
}

#[test]
fn limits_and_secrets_that_cannot_work_are_refused() {
    assert!(
        err("[limits]\nmax_tokens = 0\n")
            .2
            .contains("at least 1000")
    );
    assert!(
        err("[limits]\nrounds = 4294967295\n")
            .2
            .contains("at most 100")
    );
    assert!(err("secrets = [\"PATH\"]\n").2.contains("PATH is one"));
    assert!(err("secrets = [\"\"]\n").2.contains("not a variable name"));
    let (_, key, message) = err("secrets = [\"TEST_DB\"]\ngate_env = [\"TEST_DB\"]\n");
    assert_eq!(key.as_deref(), Some("gate_env"));
    assert!(
        message.contains("`secrets`") && message.contains("TEST_DB"),
        "{message}"
    );
    assert!(
        parse(
            Path::new("t"),
            "secrets = [\"OPENAI_API_KEY\"]\n[limits]\nrounds = 100\n"
        )
        .is_ok()
    );
}

#[test]
fn bad_duration_names_line() {
    let (line, _, message) = err("[limits]\nagent_timeout = \"soon\"\n");
    assert_eq!(line, 2);
    assert!(
        message.contains("agent_timeout") && message.contains("45m"),
        "{message}"
    );
}

#[test]
fn bad_types_and_values() {
    assert_eq!(err("[limits]\nrounds = \"x\"\n").0, 2);
    assert_eq!(err("\n[limits]\nrounds = 0\n").0, 3);
    assert_eq!(err("deadline = \"7am\"\n").0, 1);
    assert_eq!(
        err("timezone = \"Mars/Base\"\n").1.as_deref(),
        Some("timezone")
    );
    assert_eq!(err("[writer]\nkind = \"gpt\"\n").0, 2);
    assert_eq!(
        err("github_repo = \"nope\"\n").1.as_deref(),
        Some("github_repo")
    );
    assert!(!err("base = [\n").2.is_empty());
}

#[test]
fn type_errors_and_duplicates_name_the_key() {
    let (line, key, message) = err("[limits]\nrounds = \"3\"\n");
    assert_eq!((line, key.as_deref()), (2, Some("rounds")));
    assert!(message.starts_with("`rounds`"), "{message}");
    let (line, _, message) = err("base = \"a\"\nbase = \"b\"\n");
    assert_eq!(line, 2);
    assert!(message.contains("base"), "{message}");
}

#[test]
fn paths_stay_inside_the_repository_and_commands_are_not_empty() {
    assert_eq!(
        err("backlog = \"../../etc/hostname\"\n").1.as_deref(),
        Some("backlog")
    );
    assert_eq!(
        err("backlog = \"/etc/hostname\"\n").1.as_deref(),
        Some("backlog")
    );
    assert_eq!(
        err("[[recipes]]\nprefix = \"x\"\nprompt = \"/etc/shadow\"\n")
            .1
            .as_deref(),
        Some("prompt")
    );
    assert_eq!(err("verify = [\"\"]\n").1.as_deref(), Some("verify"));
}

#[test]
fn agent_output_caps_are_sizes() {
    let cap = |toml: &str| parse(Path::new("c.toml"), toml).map(|c| c.max_agent_output);
    assert_eq!(cap("").unwrap(), 1 << 30);
    assert_eq!(cap("max_agent_output = \"1GiB\"\n").unwrap(), 1 << 30);
    assert_eq!(cap("max_agent_output = \"500MB\"\n").unwrap(), 500_000_000);
    assert_eq!(cap("max_agent_output = \"64 KiB\"\n").unwrap(), 65536);
    assert_eq!(cap("max_agent_output = 4096\n").unwrap(), 4096);
    let (line, key, message) = err("\nmax_agent_output = \"lots\"\n");
    assert_eq!((line, key.as_deref()), (2, Some("max_agent_output")));
    assert!(message.contains("\"1GiB\""), "{message}");
    let (_, key, message) = err("max_agent_output = \"10B\"\n");
    assert_eq!(key.as_deref(), Some("max_agent_output"), "{message}");
}

#[test]
fn durations() {
    assert_eq!(parse_duration("45m").unwrap(), Duration::from_secs(2700));
    assert_eq!(parse_duration("1h30m").unwrap(), Duration::from_secs(5400));
    assert!(
        parse_duration("120").is_err(),
        "a bare number needs its unit"
    );
    assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
    assert!(parse_duration("0s").is_err());
    assert!(parse_duration("5x").is_err());
    assert!(parse_duration("m").is_err());
    assert_eq!(format_duration(Duration::from_secs(5400)), "1h30m");
}

#[test]
fn the_sandbox_tmpfs_cap_is_a_size_of_at_least_a_mebibyte() {
    let cap = |toml: &str| parse(Path::new("c.toml"), toml).map(|c| c.sandbox.tmp_size);
    assert_eq!(cap("").unwrap(), None, "absent: the default");
    assert_eq!(
        cap("[sandbox]\ntmp_size = \"2GiB\"\n").unwrap(),
        Some(2 << 30)
    );
    assert_eq!(
        cap("[sandbox]\ntmp_size = 1048576\n").unwrap(),
        Some(1 << 20)
    );
    let (line, key, message) = err("[sandbox]\n\ntmp_size = \"64KiB\"\n");
    assert_eq!((line, key.as_deref()), (3, Some("tmp_size")), "{message}");
    assert!(message.contains("tmp_size = \"2GiB\""), "{message}");
    let (_, key, message) = err("[sandbox]\ntmp_size = \"lots\"\n");
    assert_eq!(key.as_deref(), Some("tmp_size"), "{message}");
    // Left out of the sealed JSON while absent: old contracts keep their SHA.
    let default = crate::config::SandboxConfig::default();
    assert_eq!(
        serde_json::to_value(&default).unwrap().get("tmp_size"),
        None
    );
    let set = crate::config::SandboxConfig {
        tmp_size: Some(1 << 30),
        ..default
    };
    assert_eq!(serde_json::to_value(&set).unwrap()["tmp_size"], "1.0 GiB");
}
