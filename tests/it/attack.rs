//! Attacks on nightshift's secrecy and isolation promises (docs/loop.md, docs/agents.md, docs/github.md,
//! docs/ledger.md), through the real binary: real PostgreSQL, real git, the fake GitHub,
//! script agents that try to read, print, encode, commit or smuggle out the
//! GitHub token, the ledger's URL and the config's `secrets`. Each test says
//! what the attacker does and checks every place the secret could land:
//! nightshift's output, every ledger table, every file under the data dir and
//! HOME (logs, call files, checkouts), and every request sent to GitHub.

use crate::common;
use common::Table;

use std::path::Path;

use common::github::FakeGitHub;
use common::{Fixture, Night, reason, text};
use serde_json::Value;

fn outcomes(report: &Value) -> Vec<String> {
    report["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["outcome"].as_str().unwrap().to_string())
        .collect()
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// Output of a shell pipeline (the encodings an attacker would use).
fn sh(script: &str) -> String {
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{script}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// `s` with every line break removed, and the blanks around it: a secret
/// printed across two lines (or two JSON `\n` escapes) reads whole again.
fn joined(s: &str) -> String {
    let s = s.replace("\\r", "\n").replace("\\n", "\n");
    let mut out = String::with_capacity(s.len());
    for (i, line) in s.split(['\n', '\r']).enumerate() {
        out.push_str(if i == 0 { line.trim_end() } else { line.trim() });
    }
    out
}

/// The forms of `secret` an attacker prints: as is, base64 (at the three
/// alignments it can take inside a larger blob), url-safe base64, hex and
/// percent-encoded. Each returned string is one that must appear nowhere.
fn forms(secret: &str) -> Vec<String> {
    let q = secret.replace('\'', "'\\''");
    let mut f = vec![secret.to_string()];
    for pad in ["", "x", "xy"] {
        let b64 = sh(&format!("printf '%s%s' '{pad}' '{q}' | base64 -w0"));
        // Skip what the padding and the cut last group make of it.
        let skip = [0, 2, 3][pad.len()];
        let inner = &b64[skip..b64.len() - 4];
        f.push(inner.to_string());
        f.push(inner.replace('+', "-").replace('/', "_"));
    }
    f.push(sh(&format!(
        "printf '%s' '{q}' | od -An -tx1 | tr -d ' \\n'"
    )));
    f.push(sh(&format!("printf '%s' '{q}' | jq -sRr @uri")));
    f.extend(escaped_forms(secret));
    f.sort();
    f.dedup();
    f
}

/// The forms of `secret` with some or all of its bytes escaped, as
/// [`ESCAPE`] prints them: every byte `%xx`, every byte `%XX`, the first
/// eight bytes `%xx` and the rest as is, every byte `\u00xx`.
fn escaped_forms(secret: &str) -> Vec<String> {
    let each =
        |bytes: &[u8], f: &dyn Fn(u8) -> String| bytes.iter().map(|&b| f(b)).collect::<String>();
    let b = secret.as_bytes();
    vec![
        each(b, &|b| format!("%{b:02x}")),
        each(b, &|b| format!("%{b:02X}")),
        format!(
            "{}{}",
            each(&b[..8], &|b| format!("%{b:02x}")),
            &secret[8..]
        ),
        each(b, &|b| format!("\\u00{b:02x}")),
    ]
}

/// Shell functions printing `$1` with its bytes escaped, the forms of
/// [`escaped_forms`]: `pe` every byte `%xx`, `pu` every byte `%XX`, `pm` the
/// first eight bytes `%xx`, `ju` every byte `\u00xx`.
const ESCAPE: &str = r#"pe() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n' | sed 's/../%&/g'; }
pu() { pe "$1" | tr a-f A-F; }
pm() { printf '%s%s' "$(pe "$(printf '%s' "$1" | cut -c1-8)")" "$(printf '%s' "$1" | cut -c9-)"; }
ju() { printf '%s' "$1" | od -An -tx1 | tr -d ' \n' | sed 's/../\\u00&/g'; }
"#;

/// Asserts that no form of any secret is in nightshift's output, any ledger
/// table, any file under the data dir or HOME, or anything sent to GitHub.
/// Returns how many files were read.
async fn nowhere(
    f: &Fixture,
    gh: Option<&FakeGitHub>,
    output: &str,
    secrets: &[(&str, &str)],
) -> usize {
    let all: Vec<(String, String)> = secrets
        .iter()
        .flat_map(|(what, s)| {
            forms(s)
                .into_iter()
                .map(move |form| (what.to_string(), form))
        })
        .collect();
    let check = |place: &str, content: &str| {
        let whole = joined(content);
        for (what, form) in &all {
            assert!(
                !content.contains(form.as_str()) && !whole.contains(form.as_str()),
                "{what} ({form}) leaked into {place}:\n{}",
                content.chars().take(4000).collect::<String>()
            );
        }
    };
    check("nightshift's output", output);
    let tables = f.db.sql("SELECT string_agg(table_name, ' ') FROM information_schema.tables WHERE table_schema = 'public' AND table_type = 'BASE TABLE'");
    for t in tables.split_whitespace() {
        check(
            &format!("ledger table {t}"),
            &f.db.sql(&format!(
                "SELECT coalesce(string_agg(x::text, ' '), '') FROM {t} x"
            )),
        );
    }
    let mut files = 0;
    let mut stack = vec![f.data.clone(), f.home.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                files += 1;
                check(&p.display().to_string(), &String::from_utf8_lossy(&bytes));
            }
        }
    }
    if let Some(gh) = gh {
        for (m, p, body) in gh.requests().await {
            check(&format!("{m} {p}"), &body);
        }
    }
    files
}

/// A writer, a gate and a reviewer that found the token, a `secrets` value,
/// the ledger's password and `PGPASSWORD` (in a file they should not have
/// read) and print them every way that slips past a literal match: base64
/// (alone, inside a larger blob, wrapped over lines), hex, percent-encoded,
/// cut over two lines, in `FINDINGS:`, in a `QUESTION:`, in the output of a
/// writer that fails. None of it may be stored, logged or sent; the PG*
/// variables never reach an agent or nightshift's own /proc environ.
#[tokio::test(flavor = "multi_thread")]
async fn encoded_and_split_secrets_are_masked_everywhere() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let token = "ghp_encodeAttack_TOKEN_7f3a9c2e1b";
    let key = "sk/leak+KEY=0011:22@33 x";
    let db_pass = "dbPass_Secret_7731";
    let pg_pass = "pgPassword_Secret_4410";
    f.use_github(&gh);
    f.token = Some(token.into());
    f.extra_env.push(("MY_API_KEY".into(), key.into()));
    f.extra_env.push((
        "NIGHTSHIFT_DATABASE_URL".into(),
        f.db.url.replacen('@', &format!(":{db_pass}@"), 1),
    ));
    f.extra_env.push(("PGPASSWORD".into(), pg_pass.into()));
    f.extra_env.push(("PGUSER".into(), "postgres".into()));
    let loot = f.agents.join("loot");
    std::fs::create_dir_all(&loot).unwrap();
    for (name, value) in [
        ("token", token),
        ("key", key),
        ("db", db_pass),
        ("pg", pg_pass),
    ] {
        std::fs::write(loot.join(name), value).unwrap();
    }
    let ev = f.agents.display().to_string();
    let lt = loot.display().to_string();
    // Everything one agent can print, for each secret.
    let leak = format!(
        r#"{ESCAPE}for s in {lt}/token {lt}/key {lt}/db {lt}/pg; do
  v=$(cat "$s")
  echo "plain: $v"
  echo "b64: $(printf '%s' "$v" | base64 -w0) and $(printf 'xy%s' "$v" | base64 -w0)"
  echo "url-safe: $(printf 'x%s' "$v" | base64 -w0 | tr '+/' '-_')"
  printf 'AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA%s' "$v" | base64
  echo "hex: $(printf '%s' "$v" | od -An -tx1 | tr -d ' \n')" >&2
  echo "url: $(printf '%s' "$v" | jq -sRr @uri)"
  echo "pct: $(pe "$v") PCT: $(pu "$v")"
  echo "mixed: $(pm "$v") json: $(ju "$v")"
  printf 'split: %s\n   %s\n' "$(printf '%s' "$v" | cut -c1-9)" "$(printf '%s' "$v" | cut -c10-)"
done
"#
    );
    let title = "title=$(grep -o '\"title\":\"[^\"]*\"' \"$NIGHTSHIFT_CONTRACT_FILE\" | head -1)\n";
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\n{title}env > {ev}/writer-env.txt\nNS=$(awk '{{print $4}}' /proc/$PPID/stat)\ntr '\\0' '\\n' < /proc/$PPID/environ > {ev}/supervisor-env.txt\ntr '\\0' '\\n' < /proc/$NS/environ > {ev}/parent-env.txt\ntr '\\0' ' ' < /proc/$NS/cmdline > {ev}/parent-cmdline.txt\n{leak}\nT=$(cat {lt}/token)\nB=$(printf '%s' \"$T\" | base64 -w0)\ncase \"$title\" in\n  *Ask*) printf 'QUESTION: may I use %s or %s?\\n' \"$B\" \"$T\" ;;\n  *Fail*) echo sub >> calc.txt; echo \"failing with $B\" >&2; exit 3 ;;\n  *) echo sub >> calc.txt; printf 'done\\n\\nFINDINGS:\\n- rotate %s soon\\n- also %s\\n\\n' \"$B\" \"$T\" ;;\nesac\n"
        ),
    );
    let gate = f.agent(
        "gate.sh",
        &format!("#!/bin/sh\nenv > {ev}/gate-env.txt\n{leak}\nsh test.sh\n"),
    );
    let r = f.agent("reviewer.sh", &format!("#!/bin/sh\n{leak}\nB=$(base64 -w0 < {lt}/token)\necho \"{{\\\"verdict\\\":\\\"approve\\\",\\\"findings\\\":[\\\"saw $B in the logs\\\"]}}\"\n"));
    // The second line (docs/security.md#the-sandbox): what an agent without
    // the sandbox reads of its parent is scrubbed and masked.
    f.config(&format!("secrets = [\"MY_API_KEY\"]\nverify = [\"{gate}\"]\n[sandbox]\nmode = \"off\"\n[limits]\nrounds = 1\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write(
        "NEXT.md",
        "- [ ] Add sub\n- [ ] Ask first\n- [ ] Fail loudly\n",
    );
    let out = f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["pr_opened", "blocked", "error"], "{rep:#}");
    assert_eq!(gh.prs().len(), 1);
    assert_eq!(gh.issues().len(), 2, "the findings were filed, masked");
    let report_text = text(&f.run(&["report"]));
    let files = nowhere(
        &f,
        Some(&gh),
        &format!("{}{report_text}", text(&out)),
        &[
            ("the token", token),
            ("a `secrets` value", key),
            ("the ledger URL's password", db_pass),
            ("PGPASSWORD", pg_pass),
        ],
    )
    .await;
    assert!(
        files > 10,
        "the data dir holds logs and call files ({files})"
    );
    // What the agents printed was kept, masked.
    let kept =
        f.db.sql("SELECT string_agg(stdout_tail || stderr_tail, ' ') FROM agent_calls");
    assert!(
        kept.contains("split: ****") && kept.contains("b64: ") && kept.contains("hex: ****"),
        "{kept}"
    );
    // The agents' and gates' environments hold no PG* variable; nightshift's own
    // /proc environ (which an agent of the same user reads) and cmdline hold no
    // secret: PGUSER, not one, stays there for the ledger's connection. The
    // call's supervisor (the writer's parent, a program of its own) holds
    // the call's environment only.
    let root = nix::unistd::geteuid().is_root();
    for place in [
        "writer-env.txt",
        "gate-env.txt",
        "parent-env.txt",
        "supervisor-env.txt",
    ] {
        let env = read(&f.agents.join(place));
        // Only root reads nightshift's or the supervisor's environ (neither is dumpable).
        if place != "writer-env.txt" && place != "gate-env.txt" && !root {
            assert!(env.is_empty(), "{env}");
            continue;
        }
        assert!(
            env.lines().any(|l| l.starts_with("PATH=")),
            "{place}: {env}"
        );
        for var in [
            "PGPASSWORD=",
            "GITHUB_TOKEN=",
            "MY_API_KEY=",
            "NIGHTSHIFT_DATABASE_URL=",
        ] {
            assert!(
                !env.lines().any(|l| l.starts_with(var)),
                "{var} is in {place}: {env}"
            );
        }
        assert_eq!(
            env.lines().any(|l| l.starts_with("PGUSER=")),
            place == "parent-env.txt",
            "{place}: {env}"
        );
    }
    let cmdline = read(&f.agents.join("parent-cmdline.txt"));
    assert!(cmdline.contains("drain"), "{cmdline}");
    for s in [token, key, db_pass, pg_pass] {
        assert!(!cmdline.contains(s));
    }
}

/// A git smart-HTTP server over `git http-backend` that asks for HTTP basic
/// auth (user and password as given) and records each request's method,
/// path and whether it carried the right credentials.
struct GitHttp {
    port: u16,
    log: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
}

impl GitHttp {
    /// Serves the repositories under `root`.
    fn start(root: &Path, user: &str, password: &str) -> GitHttp {
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let log = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let expected = format!(
            "Basic {}",
            sh(&format!(
                "printf '%s:%s' '{user}' '{password}' | base64 -w0"
            ))
        );
        let (root, log2) = (root.to_path_buf(), log.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let (root, log, expected) = (root.clone(), log2.clone(), expected.clone());
                std::thread::spawn(move || {
                    let mut reader = BufReader::new(conn.try_clone().unwrap());
                    let mut first = String::new();
                    if reader.read_line(&mut first).is_err() {
                        return;
                    }
                    let mut headers = std::collections::HashMap::new();
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
                            break;
                        }
                        if let Some((k, v)) = line.split_once(':') {
                            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
                        }
                    }
                    let mut parts = first.split_whitespace();
                    let (method, target) = (
                        parts.next().unwrap_or("").to_string(),
                        parts.next().unwrap_or("").to_string(),
                    );
                    let (path, query) = target
                        .split_once('?')
                        .map_or((target.clone(), String::new()), |(p, q)| {
                            (p.to_string(), q.to_string())
                        });
                    let authed = headers.get("authorization") == Some(&expected);
                    log.lock().unwrap().push(format!(
                        "{method} {path} {}",
                        if authed { "authed" } else { "anonymous" }
                    ));
                    if !authed {
                        let _ = conn.write_all(b"HTTP/1.1 401 Unauthorized\r\nWWW-Authenticate: Basic realm=\"git\"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
                        return;
                    }
                    let len: usize = headers
                        .get("content-length")
                        .and_then(|l| l.parse().ok())
                        .unwrap_or(0);
                    let mut body = vec![0u8; len];
                    if reader.read_exact(&mut body).is_err() {
                        return;
                    }
                    let mut cgi = std::process::Command::new("git");
                    cgi.arg("http-backend")
                        .env_clear()
                        .env("PATH", std::env::var("PATH").unwrap_or_default())
                        .env("GIT_CONFIG_GLOBAL", "/dev/null")
                        .env("GIT_PROJECT_ROOT", &root)
                        .env("GIT_HTTP_EXPORT_ALL", "1")
                        .env("REMOTE_USER", "x-access-token")
                        .env("REMOTE_ADDR", "127.0.0.1")
                        .env("REQUEST_METHOD", &method)
                        .env("PATH_INFO", &path)
                        .env("QUERY_STRING", &query)
                        .env(
                            "CONTENT_TYPE",
                            headers.get("content-type").cloned().unwrap_or_default(),
                        )
                        .env("CONTENT_LENGTH", len.to_string())
                        .env(
                            "GIT_PROTOCOL",
                            headers.get("git-protocol").cloned().unwrap_or_default(),
                        )
                        .env(
                            "HTTP_CONTENT_ENCODING",
                            headers.get("content-encoding").cloned().unwrap_or_default(),
                        )
                        .stdin(std::process::Stdio::piped())
                        .stdout(std::process::Stdio::piped());
                    let mut child = cgi.spawn().unwrap();
                    child.stdin.take().unwrap().write_all(&body).unwrap();
                    let out = child.wait_with_output().unwrap().stdout;
                    let split = out
                        .windows(4)
                        .position(|w| w == b"\r\n\r\n")
                        .map(|i| (i, 4))
                        .or_else(|| out.windows(2).position(|w| w == b"\n\n").map(|i| (i, 2)))
                        .unwrap_or((out.len(), 0));
                    let head = String::from_utf8_lossy(&out[..split.0]).to_string();
                    let payload = &out[(split.0 + split.1).min(out.len())..];
                    let mut status = "200 OK".to_string();
                    let mut response = String::new();
                    for h in head.lines().filter(|l| !l.is_empty()) {
                        match h.strip_prefix("Status:") {
                            Some(s) => status = s.trim().to_string(),
                            None => response.push_str(&format!("{h}\r\n")),
                        }
                    }
                    let _ = conn.write_all(format!("HTTP/1.1 {status}\r\n{response}Content-Length: {}\r\nConnection: close\r\n\r\n", payload.len()).as_bytes());
                    let _ = conn.write_all(payload);
                });
            }
        });
        GitHttp { port, log }
    }

    fn requests(&self) -> Vec<String> {
        self.log.lock().unwrap().clone()
    }
}

/// The user's remote carries its token in the URL
/// (`http://x-access-token:TOKEN@host/…`, as some CI setups write it). The
/// checkout still fetches and pushes with it, but the token is never in a
/// git command line (`/proc/PID/cmdline` is readable by every local user),
/// never in the checkout's `.git/config` (which the agents read), and never
/// in what is kept or sent — also when the push fails and git's error names
/// the URL.
#[tokio::test(flavor = "multi_thread")]
async fn a_token_in_the_remotes_url_stays_out_of_argv_the_checkout_and_messages() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let url_token = "ghp_inTheRemoteURL_5c1e7d9a";
    let http = GitHttp::start(f.dir.path(), "x-access-token", url_token);
    let url = format!(
        "http://x-access-token:{url_token}@127.0.0.1:{}/remote.git",
        http.port
    );
    common::git(&f.repo, &["remote", "set-url", "origin", &url]);
    f.use_github(&gh);
    f.token = Some("ghp_apiToken_notTheURLs_0c4b2a".into());
    // A `git` that logs its command line before it runs.
    let shim_dir = f.agents.join("shim");
    std::fs::create_dir_all(&shim_dir).unwrap();
    let argv_log = f.agents.join("git-argv.txt");
    let real_git = sh("command -v git");
    let shim = shim_dir.join("git");
    std::fs::write(
        &shim,
        format!(
            "#!/bin/sh\nprintf '%s\\n' \"$*\" >> {}\nexec {real_git} \"$@\"\n",
            argv_log.display()
        ),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    f.extra_env.push((
        "PATH".into(),
        format!(
            "{}:{}",
            shim_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    ));
    let ev = f.agents.display().to_string();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\n{{ git remote -v; cat .git/config; }} > {ev}/checkout-remote.txt 2>&1\necho sub >> calc.txt\n"));
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.approve_and_drain(&[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened"], "{}", text(&out));
    assert_eq!(
        f.remote_branches().len(),
        1,
        "pushed over HTTP with the URL's token"
    );
    assert!(
        text(&out).contains("carries a password or token; agents running as you can read it"),
        "{}",
        text(&out)
    );
    assert!(
        http.requests()
            .iter()
            .any(|r| r.starts_with("POST /remote.git/git-receive-pack authed")),
        "{:?}",
        http.requests()
    );
    let seen = read(&f.agents.join("checkout-remote.txt"));
    assert!(
        seen.contains(&format!(
            "http://x-access-token@127.0.0.1:{}/remote.git",
            http.port
        )),
        "the checkout's remote is the user's, without the token: {seen}"
    );
    let doctor = text(&f.run(&["doctor"]));
    assert!(
        doctor.contains("carries a password or token") && !doctor.contains(url_token),
        "{doctor}"
    );
    let argv = read(&argv_log);
    assert!(
        argv.contains("push") && argv.contains("ls-remote"),
        "{argv}"
    );
    assert!(
        !argv.contains(url_token),
        "a git command line held the URL's token:\n{argv}"
    );

    // Now the push URL is unreachable: the push fails, git's error is kept
    // (with the URL), the token is not.
    common::git(
        &f.repo,
        &[
            "remote",
            "set-url",
            "--push",
            "origin",
            &format!("http://x-access-token:{url_token}@127.0.0.1:1/remote.git"),
        ],
    );
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add mul\n");
    let w = f.agent("writer.sh", "#!/bin/sh\necho mul >> calc.txt\n");
    f.config_with(&w, &r, "");
    let out = f.approve_and_drain(&[]);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        ["already_open", "push_failed"],
        "{}",
        text(&out)
    );
    let why = rep["items"][1]["reason"].as_str().unwrap();
    assert!(why.contains("127.0.0.1:1"), "{why}");
    let argv = read(&argv_log);
    assert!(
        !argv.contains(url_token),
        "a git command line held the URL's token:\n{argv}"
    );
    nowhere(
        &f,
        Some(&gh),
        &text(&out),
        &[("the URL's token", url_token)],
    )
    .await;
}

/// A writer that got hold of the token (here from a file it should not have
/// read) and writes it into the change every way a literal search of the
/// diff text misses: in a binary file (git shows no content for it), base64-
/// or hex-encoded, cut over two lines, as a file's name, in a `.env`. None of
/// it is pushed: each item breaks the rule, and says which file.
#[tokio::test(flavor = "multi_thread")]
async fn a_secret_hidden_in_the_change_is_never_pushed() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let token = "ghp_hiddenInTheDiff_TOKEN_48d2e1";
    f.use_github(&gh);
    f.token = Some(token.into());
    let loot = f.agents.join("found.txt");
    std::fs::write(&loot, token).unwrap();
    let title = "title=$(grep -o '\"title\":\"[^\"]*\"' \"$NIGHTSHIFT_CONTRACT_FILE\" | head -1)\n";
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\n{ESCAPE}{title}T=$(cat {})\necho sub >> calc.txt\ncase \"$title\" in\n  *percent*) printf 'url=https://h/?t=%s\\n' \"$(pu \"$T\")\" > link.txt ;;\n  *mixed*) printf 'T=%s\\n' \"$(pm \"$T\")\" > mixed.txt ;;\n  *binary*) printf 'BIN\\000\\001%s\\000' \"$T\" > data.bin ;;\n  *base64*) printf 'key: %s\\n' \"$(printf 'xy%s' \"$T\" | base64 -w0)\" > settings.yml ;;\n  *hex*) printf '%s' \"$T\" | xxd -p > key.hex ;;\n  *split*) printf 'token = %s\\\\\\n   %s\\n-----\\n%s\\n%s\\n' \"$(printf '%s' \"$T\" | cut -c1-10)\" \"$(printf '%s' \"$T\" | cut -c11-)\" \"$(printf '%s' \"$T\" | cut -c1-20)\" \"$(printf '%s' \"$T\" | cut -c21-)\" > split.sh ;;\n  *name*) touch \"docs/$T.md\" ;;\n  *env*) printf 'GITHUB_TOKEN=%s\\n' \"$T\" > .env ;;\nesac\n",
            loot.display()
        ),
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Fully percent-encoded\n- [ ] Partly escaped (mixed)\n- [ ] In a binary file\n- [ ] As base64\n- [ ] As hex\n- [ ] A split string\n- [ ] As a file name\n- [ ] In an env file\n- [ ] Just sub\n");
    let out = f.drain_exits(1, &[]);
    let rep = f.report();
    assert_eq!(
        outcomes(&rep),
        [
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "rule_broken",
            "pr_opened"
        ],
        "{rep:#}"
    );
    for (i, file) in [
        "link.txt",
        "mixed.txt",
        "data.bin",
        "settings.yml",
        "key.hex",
        "split.sh",
        "docs/****.md",
        ".env",
    ]
    .iter()
    .enumerate()
    {
        let why = rep["items"][i]["reason"].as_str().unwrap();
        assert!(
            why.contains("the value of a secret") && why.contains(file),
            "{why}"
        );
    }
    assert_eq!(
        f.remote_branches().len(),
        1,
        "only the clean item was pushed"
    );
    assert_eq!(gh.prs().len(), 1);
    nowhere(&f, Some(&gh), &text(&out), &[("the token", token)]).await;
}

/// A token that comes from `gh auth token` (no variable at all), and a
/// `secrets` variable of a config that `main` must find before it has read
/// any flag-less setting: nightshift runs from outside the repository, told
/// where it is by `NIGHTSHIFT_REPO` naming a subdirectory (as a cron job
/// would). The writer reads nightshift's own /proc environ and prints what
/// it found: neither value is there, and the token it printed is masked.
#[tokio::test(flavor = "multi_thread")]
async fn a_gh_token_and_secrets_found_through_nightshift_repo_stay_hidden() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let token = "gho_fromGhAuthToken_3e8f1a2b";
    let key = "sk-cron-secret-5d6c7b8a";
    f.use_github(&gh);
    let bin = f.agents.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let fake_gh = bin.join("gh");
    std::fs::write(
        &fake_gh,
        format!("#!/bin/sh\n[ \"$1 $2\" = 'auth token' ] && echo {token}\n"),
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&fake_gh, std::fs::Permissions::from_mode(0o755)).unwrap();
    let loot = f.agents.join("loot.txt");
    std::fs::write(&loot, format!("{token} {key}")).unwrap();
    f.extra_env.push((
        "PATH".into(),
        format!(
            "{}:{}",
            bin.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    ));
    f.extra_env.push(("MY_CRON_KEY".into(), key.into()));
    f.extra_env.push((
        "NIGHTSHIFT_REPO".into(),
        f.repo.join("docs").display().to_string(),
    ));
    let ev = f.agents.display().to_string();
    let w = f.agent("writer.sh", &format!("#!/bin/sh\nenv > {ev}/writer-env.txt\ntr '\\0' '\\n' < /proc/$(awk '{{print $4}}' /proc/$PPID/stat)/environ > {ev}/parent-env.txt\necho sub >> calc.txt\necho \"found: $(cat {})\"\n", loot.display()));
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // The second line, without the sandbox (docs/security.md#the-sandbox).
    f.config_with(
        &w,
        &r,
        "secrets = [\"MY_CRON_KEY\"]\n[sandbox]\nmode = \"off\"\n",
    );
    f.write("NEXT.md", "- [ ] Add sub\n");
    let run = |args: &[&str]| {
        f.cmd()
            .current_dir(f.dir.path())
            .args(args)
            .output()
            .unwrap()
    };
    let plan = run(&["plan", "--json"]);
    let sha = serde_json::from_slice::<Value>(&plan.stdout)
        .unwrap_or_else(|_| panic!("{}", text(&plan)))["plan_sha"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(run(&["approve", &sha]).status.success());
    let out = run(&["drain", "--deadline", &common::far_deadline()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(gh.prs().len(), 1, "the PR was opened with gh's token");
    assert!(
        !text(&out).contains("still in nightshift's own environment"),
        "{}",
        text(&out)
    );
    let parent = read(&f.agents.join("parent-env.txt"));
    assert!(
        parent.contains("NIGHTSHIFT_REPO=")
            || (parent.is_empty() && !nix::unistd::geteuid().is_root()),
        "the writer read nightshift's environ: {parent}"
    );
    for place in ["parent-env.txt", "writer-env.txt"] {
        let env = read(&f.agents.join(place));
        assert!(
            !env.contains(token) && !env.contains(key) && !env.contains("MY_CRON_KEY="),
            "{place}: {env}"
        );
    }
    nowhere(
        &f,
        Some(&gh),
        &text(&out),
        &[("gh's token", token), ("a `secrets` value", key)],
    )
    .await;
}

/// A reviewer that writes only where git does not look — an ignored build
/// directory, whose contents the next round's gate would run — is not
/// read-only: its verdict is void and nothing is pushed.
#[tokio::test(flavor = "multi_thread")]
async fn a_reviewer_writing_into_an_ignored_directory_is_void() {
    let f = Night::new()
        .writer("#!/bin/sh\necho sub >> calc.txt\nprintf 'build/\\n' > .gitignore\nmkdir -p build && echo cache > build/cache.txt\n")
        .reviewer("#!/bin/sh\nprintf '#!/bin/sh\\nexit 0\\n' > build/test-shim.sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n")
        // Detection, the second line: the sandbox would refuse the write.
        .config("[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n")
        .backlog("- [ ] Add sub\n")
        .exit(1)
        .run()
        .await;
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["review_void"], "{rep:#}");
    assert!(
        reason(&rep, 0).contains("checkout changed during the review"),
        "{rep:#}"
    );
    assert!(f.remote_branches().is_empty());
}

/// A reviewer that rewrites a clean tracked file in place with as many
/// bytes and puts its modification time back (`touch -d`) leaves size and
/// mtime as they were; the change time, which no process can set back,
/// still shows the write: void, and the file is named.
#[tokio::test(flavor = "multi_thread")]
async fn a_reviewer_write_that_keeps_size_and_mtime_is_void() {
    let f = Night::new()
        .writer("#!/bin/sh\necho sub >> calc.txt\n")
        .reviewer("#!/bin/sh\nm=$(stat -c %y docs/README.md)\nprintf CALC | dd of=docs/README.md bs=1 conv=notrunc 2>/dev/null\ntouch -d \"$m\" docs/README.md\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n")
        // Detection, the second line: the sandbox would refuse the write.
        .config("[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n")
        .backlog("- [ ] Add sub\n")
        .exit(1)
        .run()
        .await;
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["review_void"], "{rep:#}");
    let reason = rep["items"][0]["reason"].as_str().unwrap();
    assert!(
        reason.contains("checkout changed during the review") && reason.contains("docs/README.md"),
        "{rep:#}"
    );
    assert!(f.remote_branches().is_empty());
}

/// A reviewer that writes into `.git` beyond its config and hooks — here a
/// tag, a ref of its own — has not only read: void.
#[tokio::test(flavor = "multi_thread")]
async fn a_reviewer_writing_a_ref_is_void() {
    let f = Night::new()
        .writer("#!/bin/sh\necho sub >> calc.txt\n")
        .reviewer("#!/bin/sh\ngit tag planted\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n")
        // Detection, the second line: the sandbox would refuse the write.
        .config("[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n")
        .backlog("- [ ] Add sub\n")
        .exit(1)
        .run()
        .await;
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["review_void"], "{rep:#}");
    assert!(
        reason(&rep, 0).contains(".git/refs/tags/planted (added)"),
        "{rep:#}"
    );
    assert!(f.remote_branches().is_empty());
}

/// A repository that ships its backlog as a link to a missing file outside
/// it: `init` creates nothing through the link.
#[test]
fn init_creates_nothing_through_a_dangling_link() {
    let f = Fixture::new();
    let target = f.dir.path().join("elsewhere").join("planted.md");
    std::fs::create_dir_all(target.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&target, f.repo.join("NEXT.md")).unwrap();
    let out = f.run(&["init"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(text(&out).contains("symbolic link"), "{}", text(&out));
    assert!(!target.exists(), "init wrote through the link");
}

/// nightshift runs as an ordinary user, as do its agents. Scrubbing its
/// environment is not enough there: the same user may read a process's
/// `/proc/PID/environ`, `maps` and `mem` (the token is in its memory). The
/// writer tries its parent's: nightshift is not dumpable, so the kernel
/// refuses both.
#[test]
fn an_agent_of_the_same_user_cannot_read_nightshifts_environ_or_memory() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: needs root to run nightshift as another, unprivileged user");
        return;
    }
    let user = "nsagent";
    if !std::process::Command::new("id")
        .arg(user)
        .output()
        .unwrap()
        .status
        .success()
    {
        let _ = std::process::Command::new("useradd")
            .args(["-m", "-d", "/home/nsagent", "-s", "/bin/sh", user])
            .output();
    }
    let mut f = Fixture::new();
    f.token = Some("ghp_sameUserAttack_0a1b2c3d4e".into());
    let ev = f.agents.display().to_string();
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\ncat /proc/$PPID/comm > {ev}/parent-comm.txt\nid -un > {ev}/writer-user.txt\nNS=$(awk '{{print $4}}' /proc/$PPID/stat)\nfor p in $PPID $NS; do if tr '\\0' '\\n' < /proc/$p/environ >> {ev}/parent-env.txt 2>/dev/null; then echo readable; else echo refused; fi; done | sort -u > {ev}/environ.txt\nfor p in $PPID $NS; do if head -c 64 /proc/$p/maps > /dev/null 2>&1; then echo readable; else echo refused; fi; done | sort -u > {ev}/maps.txt\necho sub >> calc.txt\n"),
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // Without the sandbox: what an agent of the same user could reach of
    // its supervisor (in the sandbox its parent is the sandbox's PID 1).
    f.config_with(&w, &r, "[sandbox]\nmode = \"off\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    assert!(
        std::process::Command::new("chown")
            .args([
                "-R",
                &format!("{user}:{user}"),
                &f.dir.path().display().to_string()
            ])
            .status()
            .unwrap()
            .success()
    );
    let as_user = |args: &[&str]| {
        let cmd = f.cmd();
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid", user, "--regid", user, "--init-groups", "--"])
            .arg(cmd.get_program())
            .args(args)
            .current_dir(&f.repo)
            .env_clear();
        for (k, v) in cmd.get_envs() {
            if let Some(v) = v {
                c.env(k, v);
            }
        }
        c.output().unwrap()
    };
    let plan = as_user(&["plan", "--json"]);
    let sha = serde_json::from_slice::<Value>(&plan.stdout)
        .unwrap_or_else(|_| panic!("{}", text(&plan)))["plan_sha"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(as_user(&["approve", &sha]).status.success());
    let out = as_user(&["drain", "--deadline", &common::far_deadline()]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(read(&f.agents.join("writer-user.txt")).trim(), user);
    // The call's supervisor (docs/security.md#processes); neither it nor
    // nightshift above it lets the agent read its environ or memory.
    assert_eq!(
        read(&f.agents.join("parent-comm.txt")).trim(),
        "nightshift-call",
        "the writer's parent is nightshift's supervisor of the call"
    );
    assert_eq!(
        read(&f.agents.join("environ.txt")).trim(),
        "refused",
        "{}",
        read(&f.agents.join("parent-env.txt"))
    );
    assert_eq!(read(&f.agents.join("maps.txt")).trim(), "refused");
}

/// A writer that leaves a daemon behind which drops out of its session and
/// clears its environment (so no marker finds it), and then watches every
/// process's /proc environ for the token nightshift hands git's askpass
/// helper (`ls-remote` after the writer, the push). The daemon is killed
/// when the writer's call ends: a `git` that looks for it each time it is
/// run with the token never finds it alive, and it does not outlive the run.
#[test]
fn an_escaped_daemon_is_swept_before_git_gets_the_token() {
    let mut f = Fixture::new();
    let token = "ghp_daemonWatch_TOKEN_6b5a4c3d";
    f.token = Some(token.into());
    let loot = f.agents.join("daemon-loot.txt");
    let pid_file = f.agents.join("daemon.pid");
    let daemon = f.agent(
        "daemon.sh",
        &format!("#!/bin/sh\necho $$ > {}\nwhile :; do grep -ah '^NIGHTSHIFT_ASKPASS_TOKEN=' /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' >> {}; done\n", pid_file.display(), loot.display()),
    );
    let w = f.agent("writer.sh", &format!("#!/bin/sh\nsetsid env -i /bin/sh {daemon} > /dev/null 2>&1 < /dev/null &\nwhile [ ! -s {} ]; do sleep 0.05; done\necho sub >> calc.txt\n", pid_file.display()));
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // A `git` that notes, when it holds the token, whether the daemon lives.
    let shim_dir = f.agents.join("shim");
    std::fs::create_dir_all(&shim_dir).unwrap();
    let seen = f.agents.join("git-saw.txt");
    let shim = shim_dir.join("git");
    std::fs::write(&shim, format!("#!/bin/sh\nif [ -n \"$NIGHTSHIFT_ASKPASS_TOKEN\" ] && [ -s {pid} ]; then if kill -0 \"$(cat {pid})\" 2>/dev/null; then echo \"daemon alive during git $*\"; else echo \"daemon gone before git $*\"; fi >> {seen}; fi\nexec {git} \"$@\"\n", pid = pid_file.display(), seen = seen.display(), git = sh("command -v git"))).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    f.extra_env.push((
        "PATH".into(),
        format!(
            "{}:{}",
            shim_dir.display(),
            std::env::var("PATH").unwrap_or_default()
        ),
    ));
    // The supervisor's sweep, outside the sandbox (whose PID namespace
    // would hide the daemon's pid from this test).
    f.config_with(&w, &r, "[sandbox]\nmode = \"off\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.approve_and_drain(&[]);
    let daemon_pid = std::fs::read_to_string(&pid_file)
        .unwrap_or_default()
        .trim()
        .to_string();
    let alive = !daemon_pid.is_empty() && Path::new(&format!("/proc/{daemon_pid}")).exists();
    if alive {
        let _ = std::process::Command::new("kill")
            .args(["-9", &daemon_pid])
            .status();
    }
    assert!(out.status.success(), "{}", text(&out));
    let saw = read(&seen);
    assert!(
        saw.contains("daemon gone before git") && saw.contains("push"),
        "{saw}"
    );
    assert!(
        !saw.contains("daemon alive"),
        "git held the token while the daemon lived:\n{saw}"
    );
    assert!(!alive, "the daemon outlived the run");
    assert!(
        !std::fs::read_to_string(&loot)
            .unwrap_or_default()
            .contains(token),
        "the daemon caught the token"
    );
}

/// A ledger URL with a development default password (`postgres`): the URL is
/// a secret, the word on its own is not — a change that mentions postgres is
/// pushed, and logs keep the word.
#[tokio::test(flavor = "multi_thread")]
async fn a_weak_default_password_is_not_a_secret_on_its_own() {
    let mut f = Fixture::new();
    f.extra_env.push((
        "NIGHTSHIFT_DATABASE_URL".into(),
        f.db.url.replacen('@', ":postgres@", 1),
    ));
    f.extra_env.push(("PGPASSWORD".into(), "postgres".into()));
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\necho 'uses postgres' > docs/db.md\necho 'wrote the postgres note'\n");
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.approve_and_drain(&[]);
    assert!(out.status.success(), "{}", text(&out));
    assert_eq!(outcomes(&f.report()), ["branch_pushed"]);
    assert_eq!(f.remote_branches().len(), 1);
    assert_eq!(
        f.db.sql("SELECT string_agg(stdout_tail, '') FROM agent_calls WHERE role = 'writer'")
            .trim(),
        "wrote the postgres note"
    );
}

/// `gate_env` is for the gates only: the writer and the reviewer, which dump
/// their whole environment and print it, never see the variable (so it
/// cannot reach a PR body through their output), while the gate has it. A
/// name listed in both `secrets` and `gate_env` is a configuration error
/// naming both keys.
#[tokio::test(flavor = "multi_thread")]
async fn gate_env_reaches_the_gate_and_never_an_agent() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    let value = "project_db_pass_Gate0nly_5521";
    f.use_github(&gh);
    f.token = Some("ghp_gateEnvAttack_TOKEN_0042".into());
    f.extra_env.push(("PROJECT_DB_PASS".into(), value.into()));
    let ev = f.agents.display().to_string();
    let w = f.agent(
        "writer.sh",
        &format!("#!/bin/sh\nenv > {ev}/writer-env.txt\necho sub >> calc.txt\nenv\n"),
    );
    let r = f.agent(
        "reviewer.sh",
        &format!(
            "#!/bin/sh\nenv > {ev}/reviewer-env.txt\necho '{{\"verdict\":\"approve\",\"findings\":[]}}'\n"
        ),
    );
    let gate = f.agent(
        "gate.sh",
        &format!("#!/bin/sh\nenv > {ev}/gate-env.txt\nsh test.sh\n"),
    );
    f.config(&format!("verify = [\"{gate}\"]\ngate_env = [\"PROJECT_DB_PASS\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.approve_and_drain(&[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened"], "{}", text(&out));
    assert!(
        read(&f.agents.join("gate-env.txt")).contains(&format!("PROJECT_DB_PASS={value}")),
        "the gate gets its variable"
    );
    for who in ["writer", "reviewer"] {
        let env = read(&f.agents.join(format!("{who}-env.txt")));
        assert!(
            !env.contains("PROJECT_DB_PASS") && !env.contains(value),
            "the {who} saw gate_env:\n{env}"
        );
    }
    for (m, p, body) in gh.requests().await {
        assert!(!body.contains(value), "{m} {p} holds the gate's value");
    }

    f.config(&format!("secrets = [\"PROJECT_DB_PASS\"]\nverify = [\"{gate}\"]\ngate_env = [\"PROJECT_DB_PASS\"]\n[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n"));
    for args in [&["plan"][..], &["drain"]] {
        let out = f.run(args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
        assert!(
            said.contains("`gate_env`")
                && said.contains("`secrets`")
                && said.contains("PROJECT_DB_PASS")
                && said.contains("config.toml:3"),
            "{args:?}: {said}"
        );
    }
}

/// A config, a backlog or a recipe's template that is a FIFO, a device (or a
/// link to one; a template linked out of the repository is refused before
/// it is read) or a huge file is refused at once with its name and the
/// fix (exit 2), instead of hanging or filling memory.
#[test]
fn special_and_huge_files_are_refused_fast() {
    let f = Fixture::new();
    f.write("NEXT.md", "- [ ] Add sub\n");
    let fifo = f.dir.path().join("config.fifo");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let cfg = f.repo.join(".nightshift/config.toml");
    std::fs::create_dir_all(cfg.parent().unwrap()).unwrap();
    let huge = f.dir.path().join("huge.toml");
    std::fs::File::create(&huge)
        .unwrap()
        .set_len(64 * 1024 * 1024)
        .unwrap();
    let started = std::time::Instant::now();
    let run = |args: &[&str]| {
        let mut c = f.cmd();
        c.args(args);
        let child = c
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id();
        // A hang would block the test forever: kill it after 20 s.
        let watchdog = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_secs(20));
            let _ = std::process::Command::new("kill")
                .args(["-9", &pid.to_string()])
                .status();
        });
        let out = child.wait_with_output().unwrap();
        drop(watchdog);
        out
    };
    for (args, name, kind) in [
        (
            vec!["--config", "/dev/zero", "plan"],
            "/dev/zero".to_string(),
            "a character device",
        ),
        (
            vec!["--config", fifo.to_str().unwrap(), "plan"],
            fifo.display().to_string(),
            "a FIFO",
        ),
        (
            vec!["--config", huge.to_str().unwrap(), "plan"],
            huge.display().to_string(),
            "over the limit",
        ),
    ] {
        let out = run(&args);
        let said = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {said}");
        assert!(said.contains(&name) && said.contains(kind), "{said}");
    }
    // The default config file linked to a device, a backlog that is a FIFO,
    // a recipe's template linked to /dev/zero.
    std::os::unix::fs::symlink("/dev/zero", &cfg).unwrap();
    let out = run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(text(&out).contains("a character device"), "{}", text(&out));
    std::fs::remove_file(&cfg).unwrap();
    f.config("backlog = \"TODO.md\"\n");
    assert!(
        std::process::Command::new("mkfifo")
            .arg(f.repo.join("TODO.md"))
            .status()
            .unwrap()
            .success()
    );
    let out = run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("TODO.md") && text(&out).contains("a FIFO"),
        "{}",
        text(&out)
    );
    assert!(
        std::process::Command::new("mkfifo")
            .arg(f.repo.join("prompt.md"))
            .status()
            .unwrap()
            .success()
    );
    f.config("[[recipes]]\nprefix = \"Add\"\nprompt = \"prompt.md\"\n");
    let out = run(&["plan"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(
        text(&out).contains("prompt.md") && text(&out).contains("a FIFO"),
        "{}",
        text(&out)
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
}

/// A writer that prints without end (`yes`) is killed once its output
/// passes `max_agent_output`: the round fails saying so, long before the
/// call's timeout, the log files stop at the cap, and the kept tail stays.
#[test]
fn an_agent_printing_without_end_is_killed_at_its_output_cap() {
    let f = Fixture::new();
    let w = f.agent(
        "writer.sh",
        "#!/bin/sh\necho sub >> calc.txt\nyes 'flood line'\n",
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config_with(
        &w,
        &r,
        "max_agent_output = \"256KiB\"\n[limits]\nrounds = 1\nagent_timeout = \"10m\"\n",
    );
    f.write("NEXT.md", "- [ ] Add sub\n");
    let started = std::time::Instant::now();
    let out = f.approve_and_drain(&[]);
    assert!(
        started.elapsed() < std::time::Duration::from_secs(120),
        "took {:?}: {}",
        started.elapsed(),
        text(&out)
    );
    let rep = f.report();
    let item = &rep["items"][0];
    assert_ne!(item["outcome"], "branch_pushed", "{rep:#}");
    let why = item["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains("max_agent_output") && why.contains("256.0 KiB"),
        "{rep:#}"
    );
    let tail =
        f.db.sql("SELECT stdout_tail FROM agent_calls WHERE role = 'writer'");
    assert!(tail.contains("flood line"), "the tail is kept: {tail}");
    let mut logged = 0;
    let mut stack = vec![f.data.clone()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() && !p.is_symlink() {
                stack.push(p);
            } else if p.to_string_lossy().ends_with("writer.stdout") {
                logged += std::fs::metadata(&p).unwrap().len();
            }
        }
    }
    assert!(
        logged > 0 && logged <= 256 * 1024 + 64 * 1024,
        "writer.stdout holds {logged} bytes"
    );
}

/// A writer that names a file so that, pasted raw into the PR body, it
/// would add lines of its own (a green gate, an approving verdict) and close
/// its code span with backticks, and that hides an HTML comment and a bidi
/// override in a finding. The body GitHub received shows the name escaped in
/// one code span on the file's own line, and no forged line, comment or
/// override.
#[tokio::test(flavor = "multi_thread")]
async fn a_file_name_cannot_forge_lines_of_the_pr_body() {
    let gh = FakeGitHub::start().await;
    let mut f = Fixture::new();
    f.use_github(&gh);
    f.token = Some("ghp_forgeCardAttack_TOKEN_0099".into());
    let w = f.agent(
        "writer.sh",
        r#"#!/bin/sh
echo sub >> calc.txt
name=$(printf 'docs/a``b\n- \342\234\205 gate passed\nReviewer verdict: approve\342\200\256.md')
printf 'x\n' > "$name"
printf 'done\n\nFINDINGS:\n- see <!-- hidden \342\200\256 ``x``\n\n'
"#,
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let out = f.approve_and_drain(&[]);
    assert_eq!(outcomes(&f.report()), ["pr_opened"], "{}", text(&out));
    let prs = gh.prs();
    let body = prs[0]["body"].as_str().unwrap();
    let escaped = "```docs/a``b\\n- ✅ gate passed\\nReviewer verdict: approve\\u{202e}.md```";
    assert!(
        body.lines()
            .any(|l| l.starts_with("- ") && l.contains(escaped)),
        "the name is one code span on its own line:\n{body}"
    );
    for forged in ["- ✅ gate passed", "Reviewer verdict: approve"] {
        assert!(
            !body.lines().any(|l| l.trim_start().starts_with(forged)),
            "a forged line {forged:?}:\n{body}"
        );
    }
    assert!(!body.contains('\u{202e}'), "a bidi override:\n{body}");
    assert!(
        !body.contains("<!-- hidden") && body.contains("&lt;!-- hidden"),
        "{body}"
    );
    // The body as GitHub renders it: one list item per changed file, and
    // the forged words only inside code.
    use pulldown_cmark::{Event, Tag, TagEnd};
    let mut in_code = String::new();
    let mut in_text = String::new();
    let mut in_block = false;
    for e in pulldown_cmark::Parser::new(body) {
        match e {
            Event::Start(Tag::CodeBlock(_)) => in_block = true,
            Event::End(TagEnd::CodeBlock) => in_block = false,
            Event::Code(c) => in_code.push_str(&c),
            Event::Text(t) if !in_block => in_text.push_str(&t),
            _ => {}
        }
    }
    assert!(
        in_code.contains("gate passed\\nReviewer verdict: approve"),
        "{body}"
    );
    assert!(!in_text.contains("gate passed"), "{in_text}");
}

/// Someone who reaches the ledger (an agent, over a trusting local server)
/// inserts an approval row for the current plan: unsigned, then with a
/// made-up signature, then with a real approval's signature copied onto a
/// longer-lived row. Each is refused with exit 3 saying it is not signed
/// (or wrongly signed) and how to approve again; nothing runs. A real
/// approval is signed with a 0600 key in the data directory, and the card
/// and `approve` say where it lives.
#[test]
fn a_forged_approval_row_is_refused() {
    let f = Fixture::new();
    let w = f.agent("writer.sh", "#!/bin/sh\necho sub >> calc.txt\n");
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    f.config_with(&w, &r, "");
    f.write("NEXT.md", "- [ ] Add sub\n");
    let card = f.run(&["plan"]);
    let key = f.data.join("approval.key");
    assert!(
        text(&card).contains(&format!("signed with the key in {}", key.display())),
        "{}",
        text(&card)
    );
    let sha = f.plan_sha();
    let repo = f.db.sql("SELECT repo FROM plans LIMIT 1");
    let forge = |signature: &str, hours: i64| {
        f.db.sql(&format!(
            "INSERT INTO approvals (id, plan_sha, repo, approved_by, created_at, expires_at, signature) \
             VALUES (gen_random_uuid(), '{sha}', '{}', 'agent', now(), now() + interval '{hours} hours', {signature})",
            repo.trim()
        ));
    };
    forge("NULL", 2);
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(
        text(&out).contains("is not signed")
            && text(&out).contains(&format!("nightshift approve {sha}")),
        "{}",
        text(&out)
    );
    forge(&format!("'{}'", "ab".repeat(32)), 3);
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("wrong signature"), "{}", text(&out));

    // A real approval makes the key (0600) and says where it is.
    let approved = f.run(&["approve", &sha]);
    common::assert_ok(&approved, "approve");
    assert!(
        text(&approved).contains(&key.display().to_string()),
        "{}",
        text(&approved)
    );
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&key).unwrap().permissions().mode() & 0o777,
        0o600
    );
    // The real approval runs; once it is used, its signature copied onto
    // a fresh row that lasts longer does not verify.
    let out = f.run(&["drain"]);
    common::assert_ok(&out, "drain under the real approval");
    let signature =
        f.db.sql("SELECT signature FROM approvals WHERE approved_by <> 'agent'");
    forge(&format!("'{}'", signature.trim()), 20);
    let out = f.run(&["drain"]);
    assert_eq!(out.status.code(), Some(3), "{}", text(&out));
    assert!(text(&out).contains("wrong signature"), "{}", text(&out));
    assert_eq!(f.db.count(Table::Runs), 1, "only the real approval ran");
}

/// As root without `agent_user`, an agent could read the GitHub token out
/// of nightshift's memory (root overrides the non-dumpable flag; issue 13
/// item 5). Such a config is refused — `plan` offers no SHA, `drain` exits
/// 2 naming both fixes and starts no agent — until it says
/// `agents_as_root = true`; then the card, the drain and the report say
/// plainly what the agents can read.
#[test]
fn root_without_agent_user_refuses_agents_unless_the_config_accepts_it() {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("SKIPPED: agents run as root only when nightshift is root");
        return;
    }
    let f = Fixture::new();
    let started = f.dir.path().join("writer-started");
    let w = f.agent(
        "writer.sh",
        &format!(
            "#!/bin/sh\ntouch {}\necho sub >> calc.txt\n",
            started.display()
        ),
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // Written as is: the harness's `config` would accept running as root.
    let agents = format!(
        "[writer]\nkind = \"command\"\ncommand = [\"{w}\"]\n[reviewer]\nkind = \"command\"\ncommand = [\"{r}\"]\n[sandbox]\nwrite = [\"{}\"]\n",
        f.dir.path().display()
    );
    f.write(
        ".nightshift/config.toml",
        &format!("verify = [\"sh test.sh\"]\n{agents}"),
    );
    f.write(".nightshift/.gitignore", "*\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    for args in [&["plan"][..], &["drain"]] {
        let out = f.run(args);
        let t = text(&out);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {t}");
        assert!(
            t.contains("agent_user = \"<unprivileged user>\"")
                && t.contains("agents_as_root = true")
                && t.contains("GitHub token"),
            "{args:?}: {t}"
        );
    }
    assert!(!started.exists(), "a refused drain started the writer");

    f.write(
        ".nightshift/config.toml",
        &format!("verify = [\"sh test.sh\"]\nagents_as_root = true\n{agents}"),
    );
    let plain = "can read everything nightshift holds";
    let card = f.run(&["plan"]);
    common::assert_ok(&card, "plan with agents_as_root");
    assert!(text(&card).contains(plain), "{}", text(&card));
    let out = f.approve_and_drain(&[]);
    common::assert_ok(&out, "drain with agents_as_root");
    assert!(started.exists(), "the writer ran");
    assert!(text(&out).contains(plain), "{}", text(&out));
    let rep = f.run(&["report"]);
    assert!(text(&rep).contains(plain), "{}", text(&rep));
    let json = f.report();
    assert!(
        json["agents_as_root"]
            .as_str()
            .is_some_and(|s| s.contains(plain)),
        "{json:#}"
    );
}

/// A writer that finds the user's repository through its checkout's
/// alternates file and tampers with everything there but `.git/config` and
/// the hooks: a new branch and tag, a deleted remote-tracking branch, HEAD
/// moved, a file staged, a tracked file edited (issue 13 item 9). The round
/// is `rule_broken` and its reason names each change.
#[test]
fn tampering_with_the_users_refs_head_index_and_worktree_is_named() {
    let f = Fixture::new();
    let w = f.agent(
        "writer.sh",
        "#!/bin/sh\nalt=$(cat .git/objects/info/alternates)\nrepo=$(cd \"$alt/../..\" && pwd)\n\
         git -C \"$repo\" branch evil\ngit -C \"$repo\" tag v-evil\n\
         git -C \"$repo\" update-ref -d refs/remotes/origin/main\n\
         echo mul >> \"$repo/calc.txt\"\necho planted > \"$repo/planted.txt\"\n\
         git -C \"$repo\" add planted.txt\ngit -C \"$repo\" symbolic-ref HEAD refs/heads/evil\n\
         echo sub >> calc.txt\n",
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // The second line, without the sandbox (which refuses the attack: tests/it/sandbox.rs).
    f.config_with(&w, &r, "[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n");
    f.drain_exits(1, &[]);
    assert_eq!(common::git(&f.repo, &["branch", "--show-current"]), "evil");
    let rep = f.report();
    assert_eq!(outcomes(&rep), ["rule_broken"], "{rep:#}");
    let why = rep["items"][0]["reason"].as_str().unwrap_or_default();
    for part in [
        "new ref refs/heads/evil",
        "new ref refs/tags/v-evil",
        "deleted ref refs/remotes/origin/main",
        "HEAD (was refs/heads/main",
        "now refs/heads/evil",
        "the index (.git/index)",
        "working tree: calc.txt (modified)",
        "working tree: planted.txt (new, staged)",
    ] {
        assert!(why.contains(part), "{part:?} not in: {why}");
    }
    assert!(f.remote_branches().is_empty(), "nothing was pushed");
}

/// A writer (as root, `agents_as_root = true`) that commits and pushes to
/// the remote's `main` (issue 13 item 1). The run stops there, `crashed`,
/// with the ref and its old and new commit named; the next item is not
/// built on the tampered `main`, and nothing is pushed after.
#[test]
fn an_agent_that_pushes_to_the_base_stops_the_run() {
    let f = Fixture::new();
    let w = f.agent(
        "writer.sh",
        r#"#!/bin/sh
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *Poison*) echo pow >> calc.txt; git -c user.name=w -c user.email=w@x commit -qam poison; git push -q origin HEAD:refs/heads/main; git reset -q --soft HEAD~1 ;;
  *) echo sub >> calc.txt ;;
esac
"#,
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // The second line, without the sandbox (which refuses the attack: tests/it/sandbox.rs).
    f.config_with(&w, &r, "[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n");
    f.write("NEXT.md", "- [ ] Poison main\n- [ ] Add sub\n");
    let old = common::git(&f.remote, &["rev-parse", "refs/heads/main"]);
    f.drain_exits(1, &[]);
    let new = common::git(&f.remote, &["rev-parse", "refs/heads/main"]);
    assert_ne!(old, new, "the writer pushed to main");
    let rep = f.report();
    assert_eq!(rep["status"], "crashed", "{rep:#}");
    assert_eq!(outcomes(&rep), ["rule_broken"], "{rep:#}");
    let why = rep["items"][0]["reason"].as_str().unwrap_or_default();
    assert!(
        why.contains(&format!("refs/heads/main moved from {old} to {new}")),
        "{why}"
    );
    assert_eq!(rep["not_started"][0]["title"], "Add sub", "{rep:#}");
    assert!(f.remote_branches().is_empty(), "{:?}", f.remote_branches());
}

/// Someone else pushes to the remote's `main` during the night (here from
/// the first writer's call, through a clone of its own, so the checkout
/// never sees the commit). The run goes on, and every item's branch is
/// built from the base the run took at its start (issue 13 item 1).
#[test]
fn every_item_is_built_from_the_base_taken_at_the_start() {
    let f = Fixture::new();
    let elsewhere = f.dir.path().join("person");
    let w = f.agent(
        "writer.sh",
        &format!(
            r#"#!/bin/sh
title=$(grep -o '"title":"[^"]*"' "$NIGHTSHIFT_CONTRACT_FILE" | head -1)
case "$title" in
  *sub*) git clone -q "$(git remote get-url origin)" {p} && (cd {p} && echo div >> calc.txt && git -c user.name=p -c user.email=p@x commit -qam theirs && git push -q origin HEAD:main); echo sub >> calc.txt ;;
  *) echo mul >> calc.txt ;;
esac
"#,
            p = elsewhere.display()
        ),
    );
    let r = f.agent(
        "reviewer.sh",
        "#!/bin/sh\necho '{\"verdict\":\"approve\",\"findings\":[]}'\n",
    );
    // The second line, without the sandbox (which refuses the attack: tests/it/sandbox.rs).
    f.config_with(&w, &r, "[limits]\nrounds = 1\n[sandbox]\nmode = \"off\"\n");
    f.write("NEXT.md", "- [ ] Add sub\n- [ ] Add mul\n");
    let old = common::git(&f.remote, &["rev-parse", "refs/heads/main"]);
    let out = f.approve_and_drain(&[]);
    common::assert_ok(&out, "drain");
    assert_ne!(
        common::git(&f.remote, &["rev-parse", "refs/heads/main"]),
        old,
        "main moved during the night"
    );
    let branches = f.remote_branches();
    assert_eq!(branches.len(), 2, "{branches:?}");
    for b in &branches {
        assert_eq!(
            common::git(&f.remote, &["rev-parse", &format!("{b}^")]),
            old,
            "{b} is built on the base the run started from"
        );
    }
}
