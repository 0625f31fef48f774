//! The proxy's judgement and relaying (`proxy.rs`): allow lists, request
//! parsing, local addresses, the ledger kept out, kept-alive plain HTTP.

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
    assert!(a.permits("api.anthropic.com", 443, true).is_ok());
    assert!(a.permits("api.anthropic.com", 80, false).is_ok());
    assert!(a.permits("api.anthropic.com", 8443, true).is_err());
    assert!(a.permits("registry.npmjs.org", 443, true).is_ok());
    assert!(a.permits("127.0.0.1", 8080, false).is_ok());
    assert!(a.permits("127.0.0.1", 5432, true).is_err());
    assert!(a.permits("::1", 9, true).is_ok());
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

#[test]
fn the_ledger_is_refused_unless_named_exactly() {
    let mut a = Allow::default();
    a.add("db.example.com").unwrap();
    a.keep_out_ledger("DB.example.com", 443);
    assert_eq!(
        a.permits("db.example.com", 443, true).map(|_| ()),
        Err("the ledger")
    );
    assert!(a.permits("db.example.com", 80, false).is_ok());
    let entry = a.permits("db.example.com", 80, false).unwrap().clone();
    assert_eq!(a.ledger_for(&entry), Some(("db.example.com", 443)));
    a.add("db.example.com:443").unwrap();
    let exact = a.permits("db.example.com", 443, true).unwrap().clone();
    assert_eq!(a.ledger_for(&exact), None, "named exactly: reachable");
}

/// A server on 127.0.0.1 answering each request `200 ok` on a
/// kept-alive connection; keeps each request line it got.
async fn server() -> (u16, Arc<Mutex<Vec<String>>>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    let lines = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&lines);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = l.accept().await {
            let kept = Arc::clone(&kept);
            tokio::spawn(async move {
                let mut buf = Vec::new();
                while let Ok(head) = read_head(&mut s, &mut buf).await {
                    let text = String::from_utf8_lossy(&head).to_lowercase();
                    let length = (text.lines())
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .map_or(0, |n| n.trim().parse::<usize>().unwrap());
                    while buf.len() < length {
                        let mut more = [0u8; 4096];
                        match s.read(&mut more).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => buf.extend_from_slice(&more[..n]),
                        }
                    }
                    buf.drain(..length);
                    let line = String::from_utf8_lossy(&head)
                        .lines()
                        .next()
                        .unwrap()
                        .to_string();
                    kept.lock().unwrap().push(line);
                    let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                    if s.write_all(ok).await.is_err() {
                        return;
                    }
                }
            });
        }
    });
    (port, lines)
}

/// `sent` through the proxy's handling of one connection (the client
/// then ends its side); what the client read, and what was refused.
async fn through(allow: Allow, sent: String) -> (String, Vec<String>) {
    let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = l.local_addr().unwrap();
    let refused = Arc::new(Mutex::new(Vec::new()));
    let kept = Arc::clone(&refused);
    let proxy = tokio::spawn(async move {
        let (c, _) = l.accept().await.unwrap();
        let _ = handle(c, &allow, &kept).await;
    });
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(sent.as_bytes()).await.unwrap();
    c.shutdown().await.unwrap();
    let mut got = Vec::new();
    tokio::time::timeout(Duration::from_secs(20), c.read_to_end(&mut got))
        .await
        .unwrap()
        .unwrap();
    proxy.await.unwrap();
    let refused = refused.lock().unwrap().clone();
    (String::from_utf8_lossy(&got).to_string(), refused)
}

#[tokio::test]
async fn each_request_on_a_kept_alive_connection_is_judged() {
    let ((a, at_a), (b, at_b)) = (server().await, server().await);
    let mut allow = Allow::default();
    allow.add(&format!("127.0.0.1:{a}")).unwrap();
    let get = |port: u16, path: &str| {
        format!("GET http://127.0.0.1:{port}/{path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
    };
    let body = "POST http://127.0.0.1:1/ HTTP/1.1\r\n\r\n";
    let post = format!(
        "POST http://127.0.0.1:{a}/post HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let (got, refused) = through(allow.clone(), format!("{}{post}", get(a, "one"))).await;
    assert_eq!(got.matches("200 OK").count(), 2, "{got}");
    assert!(refused.is_empty(), "{refused:?}");
    assert_eq!(
        *at_a.lock().unwrap(),
        ["GET /one HTTP/1.1", "POST /post HTTP/1.1"],
        "a body is forwarded, never judged as a request"
    );
    at_a.lock().unwrap().clear();
    let (got, refused) = through(allow, format!("{}{}", get(a, "two"), get(b, "x"))).await;
    assert_eq!(refused, [format!("127.0.0.1:{b}")]);
    assert_eq!(got.matches("200 OK").count(), 1, "{got}");
    assert_eq!(*at_a.lock().unwrap(), ["GET /two HTTP/1.1"]);
    assert!(at_b.lock().unwrap().is_empty());
}

#[tokio::test]
async fn the_ledgers_address_is_refused_through_another_name() {
    let (port, got) = server().await;
    let connect = format!("CONNECT localhost:{port} HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n");
    let mut allow = Allow::default();
    allow.add(&format!("localhost:{port}")).unwrap();
    let (said, refused) = through(allow.clone(), connect.clone()).await;
    assert!(said.starts_with("HTTP/1.1 200"), "{said}");
    assert!(refused.is_empty());
    assert_eq!(*got.lock().unwrap(), ["GET / HTTP/1.1"]);
    got.lock().unwrap().clear();
    allow.keep_out_ledger("127.0.0.1", port);
    let (said, refused) = through(allow, connect).await;
    assert!(said.starts_with("HTTP/1.1 403"), "{said}");
    assert_eq!(refused, [format!("localhost:{port}")]);
    assert!(got.lock().unwrap().is_empty());
}

/// A later request on a kept-alive connection to a host not allowed is
/// refused as a first one is: answered `403` (after the answers to the
/// requests before it), logged and counted; then the connection closes.
#[tokio::test]
async fn a_later_request_not_allowed_is_answered_403_after_the_earlier_answers() {
    let ((a, at_a), (b, at_b)) = (server().await, server().await);
    let mut allow = Allow::default();
    allow.add(&format!("127.0.0.1:{a}")).unwrap();
    let get = |port: u16| {
        format!("GET http://127.0.0.1:{port}/x HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n")
    };
    let (got, refused) = through(allow, format!("{}{}{}", get(a), get(b), get(a))).await;
    assert_eq!(refused, [format!("127.0.0.1:{b}")]);
    let (ok, forbidden) = (got.find("200 OK"), got.find("HTTP/1.1 403 Forbidden"));
    assert!(
        ok.is_some() && forbidden.is_some() && ok < forbidden,
        "the answer to the first request, then the refusal: {got:?}"
    );
    assert!(got.ends_with("Connection: close\r\n\r\n"), "{got:?}");
    assert_eq!(
        *at_a.lock().unwrap(),
        ["GET /x HTTP/1.1"],
        "nothing after the refusal"
    );
    assert!(at_b.lock().unwrap().is_empty());
}
