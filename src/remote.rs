//! A git remote's URL, read in one place: every spelling git accepts for a
//! remote (`https://`, `http://`, `ssh://`, `git://`, `git+ssh://`, scp-like
//! `[user@]host:path`, a local path, `file://`) parsed once into its parts.
//! The repository's identity in the ledger, the GitHub repository a remote
//! names, the password a URL carries and whether a remote is a local path
//! are all read from [`RemoteUrl`] (docs/github.md, docs/ledger.md).
//!
//! URLs with a scheme are parsed by the `url` crate (RFC 3986 with WHATWG's
//! rules for `http(s)`); scp-like addresses follow git's own rule, since no
//! URL grammar covers them. This module does not resolve `insteadOf`
//! rewrites (git2 does, see `git::remote_urls`) and does not decide which
//! repository to talk to (see `forge::resolve_repo`).

use std::path::Path;

use url::Url;

/// A remote's URL split into its parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RemoteUrl {
    /// A repository reached over the network.
    Network(NetworkUrl),
    /// A local path as written (absolute or relative to the repository), a
    /// `file://` URL already taken off.
    Local(String),
    /// A URL with a scheme that the URL grammar rejects (a bad port, a bad
    /// host) or that names no host, as written and trimmed.
    Unparsed(String),
}

/// A network remote's parts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkUrl {
    /// The scheme in lower case (`https`, `ssh`, `git+ssh`…); `None` for
    /// an scp-like `[user@]host:path`.
    pub scheme: Option<String>,
    /// The user name, percent-encoded as written; `None` when there is none.
    pub user: Option<String>,
    /// Whether the URL carries a password (`user:PASSWORD@`); the password
    /// itself is only handed out by [`split_password`].
    pub has_password: bool,
    /// The host in lower case, an IPv6 address in brackets (`[::1]`).
    pub host: String,
    /// The port when one is written.
    pub port: Option<u16>,
    /// The repository's path on the host: no leading `/` or `~/`, no
    /// trailing `/` or `.git`, no query or fragment (`owner/repo`).
    pub path: String,
}

/// Schemes git speaks to a repository over the network.
const NETWORK_SCHEMES: &[&str] = &["https", "http", "ssh", "git", "git+ssh", "ssh+git"];

impl RemoteUrl {
    /// Parses a remote URL as git spells them (surrounding whitespace
    /// ignored). A string with `://` is a URL: `file://` is a local path,
    /// any other scheme with a host is [`RemoteUrl::Network`] (a remote
    /// helper's too, see [`NetworkUrl::speaks_git`]). Without `://`, git's rule
    /// applies: a `:` before any `/` makes it scp-like `[user@]host:path`,
    /// unless the "host" is a single letter (a DOS drive, `C:\repo`);
    /// anything else is a local path.
    pub fn parse(url: &str) -> RemoteUrl {
        let url = url.trim();
        if let Some(path) = url.strip_prefix("file://") {
            return RemoteUrl::Local(path.to_string());
        }
        if url.contains("://") {
            return parse_with_scheme(url);
        }
        match url.split_once(':') {
            Some((authority, path)) if !authority.contains('/') => {
                let (user, host) = match authority.rsplit_once('@') {
                    Some((user, host)) => (Some(user.to_string()), host),
                    None => (None, authority),
                };
                if host.chars().count() < 2 {
                    return RemoteUrl::Local(url.to_string());
                }
                RemoteUrl::Network(NetworkUrl {
                    scheme: None,
                    user,
                    has_password: false,
                    host: host.to_ascii_lowercase(),
                    port: None,
                    path: repo_path(path),
                })
            }
            _ => RemoteUrl::Local(url.to_string()),
        }
    }

    /// The network parts, `None` for a local or unparsed remote.
    pub fn network(&self) -> Option<&NetworkUrl> {
        match self {
            RemoteUrl::Network(n) => Some(n),
            RemoteUrl::Local(_) | RemoteUrl::Unparsed(_) => None,
        }
    }

    /// Whether git would read this remote from the local filesystem (a
    /// path, or `file://`).
    pub fn is_local(&self) -> bool {
        matches!(self, RemoteUrl::Local(_))
    }

    /// The repository's identity, one spelling for every way of writing its
    /// address (the ledger's key and the drain lock, docs/ledger.md):
    /// `host/path` for a network remote (no scheme, user or port; the host
    /// in lower case; on `github.com`, whose owner and repository names are
    /// case-insensitive, the path too), so `git@github.com:o/r.git` and
    /// `https://github.com/o/r` are one; a local remote's canonical path
    /// (resolved against `repo`), without `.git`.
    pub fn identity(&self, repo: &Path) -> String {
        match self {
            RemoteUrl::Network(n) => {
                let path = if n.host == "github.com" {
                    n.path.to_ascii_lowercase()
                } else {
                    n.path.clone()
                };
                format!("{}/{path}", n.host)
            }
            RemoteUrl::Local(p) => {
                let p = p.trim_end_matches('/');
                let path = repo.join(p.strip_suffix(".git").unwrap_or(p));
                let canonical = std::fs::canonicalize(&path)
                    .or_else(|_| std::fs::canonicalize(format!("{}.git", path.display())))
                    .unwrap_or(path);
                let shown = canonical.display().to_string();
                shown.strip_suffix(".git").unwrap_or(&shown).to_string()
            }
            RemoteUrl::Unparsed(url) => url.trim_end_matches('/').to_string(),
        }
    }
}

impl NetworkUrl {
    /// Whether git reaches it by one of its own transports (`https`, `http`,
    /// `ssh`, `git`, `git+ssh`, scp-like), not through a remote helper
    /// (`s3://`, `persistent-https://`…), as GitHub is reached.
    pub fn speaks_git(&self) -> bool {
        self.scheme
            .as_deref()
            .is_none_or(|s| NETWORK_SCHEMES.contains(&s))
    }

    /// `(owner, repository)` when the path is exactly two segments, as a
    /// repository on GitHub (github.com or an Enterprise host) is named.
    pub fn owner_and_name(&self) -> Option<(&str, &str)> {
        match self.path.split_once('/') {
            Some((owner, name)) if !name.contains('/') => Some((owner, name)),
            _ => None,
        }
    }
}

/// A URL with a scheme, through the `url` crate.
fn parse_with_scheme(url: &str) -> RemoteUrl {
    let Ok(parsed) = Url::parse(url) else {
        return RemoteUrl::Unparsed(url.to_string());
    };
    let scheme = parsed.scheme().to_ascii_lowercase();
    // `https:///o/r` names no host; WHATWG's parser would take `o` for one.
    let names_host = url
        .split_once("://")
        .is_some_and(|(_, rest)| !rest.starts_with('/'));
    let host = match parsed.host_str() {
        Some(host) if !host.is_empty() && names_host => host,
        _ => return RemoteUrl::Unparsed(url.to_string()),
    };
    RemoteUrl::Network(NetworkUrl {
        user: Some(parsed.username().to_string()).filter(|u| !u.is_empty()),
        has_password: parsed.password().is_some_and(|p| !p.is_empty()),
        host: host.to_ascii_lowercase(),
        port: parsed.port(),
        path: repo_path(parsed.path()),
        scheme: Some(scheme),
    })
}

/// A path as the repository's name on its host: without query or fragment
/// (scp-like addresses keep them in the text), leading `/` or `~/`, and
/// trailing `/` or `.git`.
fn repo_path(path: &str) -> String {
    let path = path.split(['?', '#']).next().unwrap_or(path);
    let path = path.trim_start_matches('/');
    let path = path
        .strip_prefix("~/")
        .unwrap_or(path)
        .trim_end_matches('/');
    path.strip_suffix(".git")
        .unwrap_or(path)
        .trim_end_matches('/')
        .to_string()
}

/// `url` without the password of its user information, and that password
/// percent-decoded (as git would send it); `None` when it carries none (an
/// scp-like address never does). The user name stays
/// (`https://x-access-token@host/o/r`), so git asks only for the password.
pub fn split_password(url: &str) -> Option<(String, String)> {
    if !url.contains("://") {
        return None;
    }
    let mut parsed = Url::parse(url.trim()).ok()?;
    let password = parsed.password().filter(|p| !p.is_empty())?;
    let decoded = crate::secret::percent_decode(password);
    parsed.set_password(None).ok()?;
    Some((parsed.to_string(), decoded))
}

/// `url` for a message: with any user information replaced by `****`.
pub fn without_userinfo(url: &str) -> String {
    if let Ok(mut parsed) = Url::parse(url.trim())
        && (!parsed.username().is_empty() || parsed.password().is_some())
        && parsed.set_password(None).is_ok()
        && parsed.set_username("****").is_ok()
    {
        return parsed.to_string();
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(url: &str) -> NetworkUrl {
        match RemoteUrl::parse(url) {
            RemoteUrl::Network(n) => n,
            other => panic!("{url}: {other:?}"),
        }
    }

    #[test]
    fn https_ssh_scp_and_git_urls_give_host_and_path() {
        for (url, host, port, path) in [
            ("https://github.com/o/r.git", "github.com", None, "o/r"),
            ("https://github.com/o/r/", "github.com", None, "o/r"),
            ("https://github.com/o/r.git/", "github.com", None, "o/r"),
            ("http://127.0.0.1:8080/o/r", "127.0.0.1", Some(8080), "o/r"),
            ("ssh://git@github.com/o/r.git", "github.com", None, "o/r"),
            ("ssh://git@github.com:22/o/r", "github.com", Some(22), "o/r"),
            ("git+ssh://git@GitHub.com/o/r", "github.com", None, "o/r"),
            ("git://github.com/o/r.git", "github.com", None, "o/r"),
            ("git@github.com:o/r.git", "github.com", None, "o/r"),
            ("github.com:o/r", "github.com", None, "o/r"),
            (
                "git@GHE.example.com:Team/App.git",
                "ghe.example.com",
                None,
                "Team/App",
            ),
            (
                "https://ghe.example.com/Team/App",
                "ghe.example.com",
                None,
                "Team/App",
            ),
            (
                "ssh://git@gitlab.example.com:2222/~/grp/app.git",
                "gitlab.example.com",
                Some(2222),
                "grp/app",
            ),
            ("ssh://git@[::1]:22/o/r", "[::1]", Some(22), "o/r"),
            (
                "https://github.com/o/r.git?x=1#y",
                "github.com",
                None,
                "o/r",
            ),
            ("  https://github.com/o/r \n", "github.com", None, "o/r"),
        ] {
            let n = net(url);
            assert_eq!(
                (n.host.as_str(), n.port, n.path.as_str()),
                (host, port, path),
                "{url}"
            );
        }
        assert_eq!(net("git@github.com:o/r").scheme, None);
        assert_eq!(net("git@github.com:o/r").user.as_deref(), Some("git"));
        assert_eq!(net("ssh://git@host/o/r").scheme.as_deref(), Some("ssh"));
    }

    #[test]
    fn credentials_are_seen_and_never_part_of_host_or_path() {
        let n = net("https://x-access-token:ghp_abc@github.com/o/r.git");
        assert_eq!(n.user.as_deref(), Some("x-access-token"));
        assert!(n.has_password);
        assert_eq!((n.host.as_str(), n.path.as_str()), ("github.com", "o/r"));
        let n = net("http://:tok@127.0.0.1:8/r");
        assert_eq!((n.user, n.has_password), (None, true));
        assert!(!net("https://user@host/o/r").has_password);
    }

    #[test]
    fn local_paths_file_urls_and_drives_are_local() {
        for url in [
            "/srv/git/r.git",
            "../remote.git",
            "file:///srv/r.git",
            "C:\\repo",
            "./a:b",
        ] {
            assert!(RemoteUrl::parse(url).is_local(), "{url}");
        }
        assert_eq!(
            RemoteUrl::parse("file:///srv/r.git"),
            RemoteUrl::Local("/srv/r.git".into())
        );
        assert!(!net("svn://host/o/r").speaks_git());
        assert!(net("git@host:o/r").speaks_git() && net("git+ssh://h/o/r").speaks_git());
        for url in ["https://host:notaport/o/r", "https:///o/r", "ssh://"] {
            assert!(
                matches!(RemoteUrl::parse(url), RemoteUrl::Unparsed(_)),
                "{url}"
            );
        }
    }

    #[test]
    fn owner_and_name_need_exactly_two_segments() {
        assert_eq!(
            net("git@github.com:o/r.git").owner_and_name(),
            Some(("o", "r"))
        );
        assert_eq!(net("https://ghe.example.com/a/b/c").owner_and_name(), None);
        assert_eq!(net("https://github.com/o").owner_and_name(), None);
    }

    #[test]
    fn passwords_are_split_off_and_decoded() {
        assert_eq!(
            split_password("https://x-access-token:ghs_p%40ss@github.com/o/r.git"),
            Some((
                "https://x-access-token@github.com/o/r.git".into(),
                "ghs_p@ss".into()
            ))
        );
        assert_eq!(
            split_password("http://:tok_123456@127.0.0.1:8/r"),
            Some(("http://127.0.0.1:8/r".into(), "tok_123456".into()))
        );
        assert_eq!(
            split_password("ssh://git:pw_123456@host/o/r"),
            Some(("ssh://git@host/o/r".into(), "pw_123456".into()))
        );
        assert_eq!(split_password("https://user@host/a:b@c"), None);
        assert_eq!(split_password("git@github.com:o/r.git"), None);
        assert_eq!(split_password("/srv/r.git"), None);
        assert_eq!(
            without_userinfo("https://u:pw@github.com/o/r"),
            "https://****@github.com/o/r"
        );
        assert_eq!(without_userinfo("git@github.com:o/r"), "git@github.com:o/r");
    }
}
