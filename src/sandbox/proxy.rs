//! The filtering proxy of a sandboxed call (docs/security.md#the-network):
//! nightshift runs it outside the sandbox, on the host's network, and
//! accepts on a listening socket the sandbox made inside its own network
//! namespace and sent out (`enter.rs`). HTTPS `CONNECT host:port` is
//! tunnelled only to an allowed host and port, a plain HTTP request in
//! absolute form (`GET http://host/…`) only to an allowed host; anything
//! else is answered `403` and counted. Names are resolved here (the
//! sandbox has no resolver), so a name not allowed never resolves inside.
//! A name that resolves to a local address (loopback, private, link-local)
//! is refused too: only an entry that is itself an address or `localhost`
//! reaches one.
//!
//! Not for deciding which hosts a call needs (the run's `sandbox.rs`).

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The port the proxy listens on inside every sandbox (on its own
/// loopback: each sandbox has a network namespace of its own).
pub const PROXY_PORT: u16 = 3128;

/// How long the sandbox may take to send its listening socket.
const RECEIVE_FOR: Duration = Duration::from_secs(30);
/// How long a client may take to send its request's head.
const HEAD_FOR: Duration = Duration::from_secs(30);
/// How long a name may take to resolve, and a connection to open.
const CONNECT_FOR: Duration = Duration::from_secs(10);
/// The longest request head read (request line and headers).
const HEAD_MAX: usize = 64 * 1024;

/// The variables that point a call's HTTP clients at the proxy: the upper
/// and lower case spellings (curl reads `http_proxy` only in lower case;
/// Node's and Rust's clients read either), and an empty `NO_PROXY` so that
/// nothing, a loopback address included, bypasses it (a direct connection
/// could not leave the sandbox anyway).
pub fn proxy_env() -> Vec<(&'static str, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut v: Vec<(&'static str, String)> = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .into_iter()
    .map(|k| (k, url.clone()))
    .collect();
    v.extend([("NO_PROXY", String::new()), ("no_proxy", String::new())]);
    v
}

/// One allowed host: a name (lower case) or an address, and its port
/// (`None`: 443 for `CONNECT`, 80 for plain HTTP).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Entry {
    host: String,
    port: Option<u16>,
}

/// The hosts a sandboxed call may reach through the proxy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Allow {
    entries: Vec<Entry>,
}

impl Allow {
    /// Adds `entry` (`name`, `name:port`, an IPv4 address with or without
    /// a port, `[v6]:port`).
    ///
    /// # Errors
    /// The entry is not a host: the text says what is expected.
    pub fn add(&mut self, entry: &str) -> Result<(), String> {
        let e = parse_entry(entry).ok_or_else(|| {
            format!("`{entry}` is not a host: write a name or address, optionally with a port (`registry.npmjs.org`, `127.0.0.1:8080`)")
        })?;
        if !self.entries.contains(&e) {
            self.entries.push(e);
            self.entries.sort();
        }
        Ok(())
    }

    /// Whether `entry` is a host [`Allow::add`] takes.
    pub fn is_host(entry: &str) -> bool {
        parse_entry(entry).is_some()
    }

    /// Whether nothing is allowed.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The entries as written back (`host` or `host:port`), for a person.
    pub fn shown(&self) -> Vec<String> {
        self.entries
            .iter()
            .map(|e| match e.port {
                Some(p) => format!("{}:{p}", e.host),
                None => e.host.clone(),
            })
            .collect()
    }

    /// The entry that lets a connection to `host:port` through (`tunnel`:
    /// a `CONNECT`), if any.
    fn permits(&self, host: &str, port: u16, tunnel: bool) -> Option<&Entry> {
        let default = if tunnel { 443 } else { 80 };
        let host = host.to_ascii_lowercase();
        self.entries
            .iter()
            .find(|e| e.host == host && e.port.unwrap_or(default) == port)
    }
}

/// `entry` as an [`Entry`], or `None` when it is not a host.
fn parse_entry(entry: &str) -> Option<Entry> {
    let (host, port) = split_host_port(entry)?;
    let port = match port {
        Some(p) => Some(p.parse::<u16>().ok().filter(|p| *p > 0)?),
        None => None,
    };
    let is_name = !host.is_empty()
        && host.len() <= 253
        && !host.starts_with(['.', '-'])
        && host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '.');
    (is_name || host.parse::<IpAddr>().is_ok()).then(|| Entry {
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// `host[:port]` or `[v6][:port]` split; `None` for an unclosed bracket.
fn split_host_port(s: &str) -> Option<(&str, Option<&str>)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        return match after {
            "" => Some((host, None)),
            _ => Some((host, Some(after.strip_prefix(':')?))),
        };
    }
    Some(match s.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => (h, Some(p)),
        _ => (s, None),
    })
}

/// The proxy of one call: accepts on the sandbox's listener until
/// [`Proxy::finish`]; each refusal is logged and kept.
#[derive(Debug)]
pub struct Proxy {
    refused: Arc<Mutex<Vec<String>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Waits (on a task of its own, at most 30 s) for the sandbox to send
    /// its listening socket over `socket`, then serves it with `allow`.
    /// Must be called inside a tokio runtime.
    pub fn serve(socket: UnixStream, allow: Allow) -> Proxy {
        let refused = Arc::new(Mutex::new(Vec::new()));
        let kept = Arc::clone(&refused);
        let task = tokio::spawn(async move {
            let received = tokio::task::spawn_blocking(move || receive_fd(&socket)).await;
            let listener = match received {
                Ok(Ok(fd)) => listener(fd),
                Ok(Err(e)) => Err(e),
                Err(e) => Err(io::Error::other(e)),
            };
            match listener {
                Ok(l) => accept_loop(l, Arc::new(allow), kept).await,
                Err(e) => tracing::warn!(error = %e, "the sandbox's proxy got no listener"),
            }
        });
        Proxy { refused, task }
    }

    /// Stops serving (open tunnels are closed) and returns each refused
    /// connection's host (`host:port`), in order.
    pub fn finish(self) -> Vec<String> {
        self.task.abort();
        std::mem::take(&mut *self.refused.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The tokio listener of a received descriptor.
fn listener(fd: OwnedFd) -> io::Result<TcpListener> {
    let std = std::net::TcpListener::from(fd);
    std.set_nonblocking(true)?;
    TcpListener::from_std(std)
}

/// Receives one descriptor (`SCM_RIGHTS`) over `socket`, waiting at most
/// [`RECEIVE_FOR`].
fn receive_fd(socket: &UnixStream) -> io::Result<OwnedFd> {
    use std::os::fd::AsRawFd;
    socket.set_read_timeout(Some(RECEIVE_FOR))?;
    let mut byte = [0u8; 1];
    let mut iov = libc::iovec {
        iov_base: byte.as_mut_ptr().cast(),
        iov_len: 1,
    };
    let mut space = [0u64; 4];
    // SAFETY: a zeroed msghdr pointing at local buffers of the given sizes.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = space.as_mut_ptr().cast();
    msg.msg_controllen = std::mem::size_of_val(&space) as _;
    // SAFETY: recvmsg into the buffers above; our own socket.
    let n = unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the control buffer recvmsg filled, read through the CMSG macros.
    unsafe {
        let cmsg = libc::CMSG_FIRSTHDR(&msg);
        if n == 1
            && !cmsg.is_null()
            && (*cmsg).cmsg_level == libc::SOL_SOCKET
            && (*cmsg).cmsg_type == libc::SCM_RIGHTS
        {
            let mut fd: libc::c_int = -1;
            std::ptr::copy_nonoverlapping(
                libc::CMSG_DATA(cmsg),
                (&mut fd as *mut libc::c_int).cast::<u8>(),
                4,
            );
            if fd >= 0 {
                return Ok(OwnedFd::from_raw_fd(fd));
            }
        }
    }
    Err(io::Error::other(
        "the sandbox closed the proxy's socket without sending its listener",
    ))
}

/// Accepts until aborted; each connection on a task of the set (aborted
/// with it).
async fn accept_loop(l: TcpListener, allow: Arc<Allow>, refused: Arc<Mutex<Vec<String>>>) {
    let mut conns = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = l.accept() => {
                let Ok((client, _)) = accepted else { continue };
                let (allow, refused) = (Arc::clone(&allow), Arc::clone(&refused));
                conns.spawn(async move {
                    if let Err(e) = handle(client, &allow, &refused).await {
                        tracing::debug!(error = %e, "a connection through the sandbox's proxy ended");
                    }
                });
            }
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
        }
    }
}

/// What a request asks for.
#[derive(Debug, PartialEq, Eq)]
struct Target {
    host: String,
    port: u16,
    /// `CONNECT`: a tunnel; otherwise plain HTTP.
    tunnel: bool,
    /// For plain HTTP: the head with its request line in origin form.
    head: Vec<u8>,
}

/// One connection: its request read, judged, and forwarded or refused.
async fn handle(
    mut client: TcpStream,
    allow: &Allow,
    refused: &Mutex<Vec<String>>,
) -> io::Result<()> {
    let (head, rest) = tokio::time::timeout(HEAD_FOR, read_head(&mut client))
        .await
        .map_err(|_| io::Error::other("no request head in time"))??;
    let Some(t) = parse_request(&head) else {
        return answer(&mut client, "400 Bad Request").await;
    };
    let Some(entry) = allow.permits(&t.host, t.port, t.tunnel) else {
        return refuse(&mut client, refused, &t, "not allowed").await;
    };
    let explicit = entry.host == "localhost" || entry.host.parse::<IpAddr>().is_ok();
    let Some(mut upstream) = connect(&t, explicit).await else {
        return refuse(&mut client, refused, &t, "local or unreachable").await;
    };
    if t.tunnel {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
    } else {
        upstream.write_all(&t.head).await?;
    }
    upstream.write_all(&rest).await?;
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

/// Logs and keeps a refusal and answers `403`.
async fn refuse(
    client: &mut TcpStream,
    refused: &Mutex<Vec<String>>,
    t: &Target,
    why: &str,
) -> io::Result<()> {
    let host = format!("{}:{}", t.host, t.port);
    tracing::warn!(host = %host, why, "the sandbox's proxy refused a connection");
    refused.lock().unwrap_or_else(|p| p.into_inner()).push(host);
    answer(client, "403 Forbidden").await
}

/// A bodiless answer that closes the connection.
async fn answer(client: &mut TcpStream, status: &str) -> io::Result<()> {
    let text = format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    client.write_all(text.as_bytes()).await?;
    client.shutdown().await
}

/// Resolves the target and connects to its first address that is not
/// local (any address when `explicit`); `None` when none answers.
async fn connect(t: &Target, explicit: bool) -> Option<TcpStream> {
    let addrs: Vec<SocketAddr> = tokio::time::timeout(
        CONNECT_FOR,
        tokio::net::lookup_host((t.host.as_str(), t.port)),
    )
    .await
    .ok()?
    .ok()?
    .filter(|a| explicit || !is_local(a.ip()))
    .collect();
    for a in addrs {
        if let Ok(Ok(s)) = tokio::time::timeout(CONNECT_FOR, TcpStream::connect(a)).await {
            return Some(s);
        }
    }
    None
}

/// Loopback, private, link-local, unspecified, shared (100.64/10) or
/// unique-local: an address of this host or its local network.
fn is_local(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => {
            v4.is_loopback()
                || v4.is_private()
                || v4.is_link_local()
                || v4.is_unspecified()
                || v4.is_broadcast()
                || (v4.octets()[0] == 100 && (v4.octets()[1] & 0xc0) == 64)
        }
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => is_local(IpAddr::V4(v4)),
            None => {
                v6.is_loopback()
                    || v6.is_unspecified()
                    || (v6.segments()[0] & 0xfe00) == 0xfc00
                    || (v6.segments()[0] & 0xffc0) == 0xfe80
            }
        },
    }
}

/// Reads up to the end of the head (`\r\n\r\n`); returns the head and
/// whatever came after it.
async fn read_head(client: &mut TcpStream) -> io::Result<(Vec<u8>, Vec<u8>)> {
    let mut buf = Vec::with_capacity(4096);
    let mut chunk = [0u8; 4096];
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let rest = buf.split_off(end + 4);
            return Ok((buf, rest));
        }
        if buf.len() > HEAD_MAX {
            return Err(io::Error::other("request head too long"));
        }
        let n = client.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::Error::other("closed before the end of the head"));
        }
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// The request of `head`: `CONNECT host:port`, or an absolute-form
/// `http://` request (rewritten to origin form, its `Proxy-` headers
/// dropped). `None` for anything else.
fn parse_request(head: &[u8]) -> Option<Target> {
    let text = std::str::from_utf8(head).ok()?;
    let (line, headers) = text.split_once("\r\n")?;
    let mut parts = line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || !version.starts_with("HTTP/") {
        return None;
    }
    if method.eq_ignore_ascii_case("CONNECT") {
        let (host, port) = split_host_port(target)?;
        let e = parse_entry(host)?;
        return Some(Target {
            host: e.host,
            port: port?.parse().ok()?,
            tunnel: true,
            head: Vec::new(),
        });
    }
    let rest = target.strip_prefix("http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let (host, port) = split_host_port(authority)?;
    let e = parse_entry(host)?;
    let port = match port {
        Some(p) => p.parse().ok()?,
        None => 80,
    };
    let mut out = format!("{method} {path} {version}\r\n");
    for h in headers.split("\r\n").filter(|h| !h.is_empty()) {
        if !h.to_ascii_lowercase().starts_with("proxy-") {
            out.push_str(h);
            out.push_str("\r\n");
        }
    }
    out.push_str("\r\n");
    Some(Target {
        host: e.host,
        port,
        tunnel: false,
        head: out.into_bytes(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_hosts_with_optional_ports() {
        let mut a = Allow::default();
        for ok in [
            "api.anthropic.com",
            "127.0.0.1:8080",
            "[::1]:9",
            "Registry.NPMjs.org:443",
        ] {
            a.add(ok).unwrap();
        }
        for bad in ["", "http://x", "x:0", "x:99999", "a b", "-x", "[::1"] {
            assert!(a.add(bad).is_err(), "{bad}");
        }
        assert!(a.permits("api.anthropic.com", 443, true).is_some());
        assert!(a.permits("api.anthropic.com", 80, false).is_some());
        assert!(a.permits("api.anthropic.com", 8443, true).is_none());
        assert!(a.permits("registry.npmjs.org", 443, true).is_some());
        assert!(a.permits("127.0.0.1", 8080, false).is_some());
        assert!(a.permits("127.0.0.1", 5432, true).is_none());
        assert!(a.permits("::1", 9, true).is_some());
    }

    #[test]
    fn requests_are_connects_or_absolute_http() {
        let t = parse_request(b"CONNECT Example.com:443 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
        assert_eq!(
            (t.host.as_str(), t.port, t.tunnel),
            ("example.com", 443, true)
        );
        let t = parse_request(
            b"GET http://127.0.0.1:9/v1/x?y HTTP/1.1\r\nHost: 127.0.0.1:9\r\nProxy-Connection: keep-alive\r\n\r\n",
        )
        .unwrap();
        assert_eq!((t.host.as_str(), t.port, t.tunnel), ("127.0.0.1", 9, false));
        assert_eq!(
            String::from_utf8(t.head).unwrap(),
            "GET /v1/x?y HTTP/1.1\r\nHost: 127.0.0.1:9\r\n\r\n"
        );
        for bad in [
            &b"GET /relative HTTP/1.1\r\n\r\n"[..],
            b"CONNECT example.com HTTP/1.1\r\n\r\n",
            b"GET https://x/ HTTP/1.1\r\n\r\n",
        ] {
            assert!(parse_request(bad).is_none());
        }
    }

    #[test]
    fn local_addresses_are_local() {
        for ip in [
            "127.0.0.1",
            "10.1.2.3",
            "192.168.0.1",
            "172.20.0.1",
            "169.254.1.1",
            "::1",
            "fd00::1",
            "fe80::1",
            "::ffff:127.0.0.1",
            "100.64.0.1",
            "0.0.0.0",
        ] {
            assert!(is_local(ip.parse().unwrap()), "{ip}");
        }
        for ip in ["1.1.1.1", "2606:4700::1111", "172.32.0.1"] {
            assert!(!is_local(ip.parse().unwrap()), "{ip}");
        }
    }
}
