//! The network an item reaches under `sandbox.network: [hosts…]`: only those hosts, through a
//! proxy runner serves.
//!
//! The item has a network namespace of its own with loopback only, so it reaches nothing by
//! itself. Before it runs its program, the child listens on `127.0.0.1:3128` there and hands
//! the listening socket to runner (with the denial recorder's, see `denials.rs`); the item's
//! environment names it as its proxy (`HTTPS_PROXY`, `HTTP_PROXY`, `ALL_PROXY`, lower case too,
//! and `NODE_USE_ENV_PROXY=1` for Node's own `fetch`). runner accepts there, in its own
//! network, and serves HTTP proxy requests: `CONNECT host:port` (what every HTTPS client
//! sends: the TLS stays end to end, runner sees only the host) and plain `http://` requests.
//! A host the list names is connected to; any other is refused with `403` and recorded as a
//! denied access (`connect host:port`). The check is on the name the client asked for, and
//! runner resolves it itself: the item cannot reach an address by a name it made up, nor
//! anything without asking runner.
//!
//! A list entry is `host`, `host:port`, `*.domain` (any name under the domain) or an IP
//! address (`[::1]:8080` for IPv6 with a port); without a port, 443 and 80.
//!
//! Hand-written: the proxy is a request line and a splice, and a crate serving one would bring
//! a whole HTTP stack for it.

use super::denials::DeniedAccess;
pub use crate::support::hosts::Allow;
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The port the item's proxy listens on, in its own network namespace (so no other process's).
pub const PROXY_PORT: u16 = 3128;

/// The environment that points an item's clients at its proxy.
pub fn proxy_env() -> Vec<(String, String)> {
    let url = format!("http://127.0.0.1:{PROXY_PORT}");
    let mut env: Vec<(String, String)> = [
        "HTTPS_PROXY",
        "https_proxy",
        "HTTP_PROXY",
        "http_proxy",
        "ALL_PROXY",
        "all_proxy",
    ]
    .iter()
    .map(|k| (k.to_string(), url.clone()))
    .collect();
    // Nothing is reached around the proxy (there is nothing around it to reach).
    env.push(("NO_PROXY".into(), String::new()));
    env.push(("no_proxy".into(), String::new()));
    env.push(("NODE_USE_ENV_PROXY".into(), "1".into()));
    env
}

/// The longest request head read before a request is refused.
const MAX_HEAD: usize = 16 * 1024;

/// Connections one item's proxy serves at once; past them, a new one is refused at once.
const MAX_CONNECTIONS: usize = 64;

/// The answer to a connection past [`MAX_CONNECTIONS`].
const TOO_MANY: &str = "HTTP/1.1 503 Service Unavailable\r\nContent-Length: 37\r\nConnection: close\r\n\r\nrunner: too many connections at once\n";

/// How long a client may take to send its request's head.
const HEAD_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// How long a connection to an allowed host may take to open.
const CONNECT_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

/// Serve the item's proxy on `listener` until the task is dropped, recording every refused
/// host in `denied` (distinct ones, at most [`super::denials::KEPT`]; `more` counts the rest).
pub async fn serve(
    listener: std::net::TcpListener,
    allow: Arc<Allow>,
    denied: Arc<Mutex<super::denials::Denied>>,
) {
    if listener.set_nonblocking(true).is_err() {
        return;
    }
    let Ok(listener) = tokio::net::TcpListener::from_std(listener) else {
        return;
    };
    let mut tasks = tokio::task::JoinSet::new();
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else {
                    // Out of descriptors, say: the next try after a pause, not a spin.
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                };
                if tasks.len() >= MAX_CONNECTIONS {
                    // Each connection holds a descriptor of runner's: an item may not take
                    // them all (runner's ledger, logs and other items need theirs).
                    let _ = stream.try_write(TOO_MANY.as_bytes());
                    continue;
                }
                let allow = allow.clone();
                let denied = denied.clone();
                tasks.spawn(async move {
                    let _ = one(stream, &allow, &denied).await;
                });
            }
            Some(_) = tasks.join_next(), if !tasks.is_empty() => {}
        }
    }
}

/// One client connection: its request's head, the check, then the splice.
async fn one(
    mut client: tokio::net::TcpStream,
    allow: &Allow,
    denied: &Mutex<super::denials::Denied>,
) -> std::io::Result<()> {
    let mut head = Vec::with_capacity(1024);
    let mut buf = [0u8; 4096];
    let end = loop {
        let Ok(n) = tokio::time::timeout(HEAD_TIMEOUT, client.read(&mut buf)).await else {
            return Ok(());
        };
        let n = n?;
        if n == 0 {
            return Ok(());
        }
        head.extend_from_slice(&buf[..n]);
        if let Some(end) = find(&head, b"\r\n\r\n") {
            break end + 4;
        }
        if head.len() > MAX_HEAD {
            return refuse(&mut client, 431, "request head too large").await;
        }
    };
    let line_end = find(&head, b"\r\n").unwrap_or(end);
    let line = String::from_utf8_lossy(&head[..line_end]).into_owned();
    let mut words = line.split(' ');
    let (Some(method), Some(target), Some(version)) = (words.next(), words.next(), words.next())
    else {
        return refuse(&mut client, 400, "not an HTTP proxy request").await;
    };
    let connect = method.eq_ignore_ascii_case("CONNECT");
    let (host, port, path) = if connect {
        match split_host_port(target, 443) {
            Some((h, p)) => (h, p, String::new()),
            None => return refuse(&mut client, 400, "CONNECT needs host:port").await,
        }
    } else {
        let Some(rest) = target.strip_prefix("http://") else {
            return refuse(
                &mut client,
                400,
                "only CONNECT and http:// requests go through this proxy",
            )
            .await;
        };
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], rest[i..].to_string()),
            None => (rest, "/".to_string()),
        };
        match split_host_port(authority, 80) {
            Some((h, p)) => (h, p, path),
            None => return refuse(&mut client, 400, "no host in the request").await,
        }
    };
    if !allow.allows(&host, port) {
        record(denied, &host, port);
        return refuse(
            &mut client,
            403,
            &format!("{host}:{port} is not in the manifest's sandbox.network"),
        )
        .await;
    }
    let lookup = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    let upstream = tokio::time::timeout(
        CONNECT_TIMEOUT,
        tokio::net::TcpStream::connect((lookup, port)),
    )
    .await;
    let mut upstream = match upstream {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return refuse(&mut client, 502, &format!("{host}:{port}: {e}")).await,
        Err(_) => return refuse(&mut client, 504, &format!("{host}:{port}: no answer")).await,
    };
    if connect {
        client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .await?;
        // What the client sent after its head already belongs to the tunnel.
        upstream.write_all(&head[end..]).await?;
    } else {
        // The request as the host expects it: its path, not the whole URL.
        let mut forwarded = format!("{method} {path} {version}").into_bytes();
        forwarded.extend_from_slice(&head[line_end..]);
        upstream.write_all(&forwarded).await?;
    }
    tokio::io::copy_bidirectional(&mut client, &mut upstream).await?;
    Ok(())
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// `host:port`, `[v6]:port` or a bare host (then `default`).
fn split_host_port(s: &str, default: u16) -> Option<(String, u16)> {
    if let Some(rest) = s.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        let port = match after.strip_prefix(':') {
            Some(p) => p.parse().ok()?,
            None if after.is_empty() => default,
            None => return None,
        };
        return Some((format!("[{h}]"), port));
    }
    match s.rsplit_once(':') {
        Some((h, p)) if !h.is_empty() => Some((h.to_string(), p.parse().ok()?)),
        Some(_) => None,
        None if !s.is_empty() => Some((s.to_string(), default)),
        None => None,
    }
}

fn record(denied: &Mutex<super::denials::Denied>, host: &str, port: u16) {
    let Ok(mut d) = denied.lock() else {
        return;
    };
    let path = format!("{host}:{port}");
    if d.accesses.iter().any(|a| a.path == path) {
        return;
    }
    if d.accesses.len() < super::denials::KEPT {
        d.accesses.push(DeniedAccess {
            access: "connect".into(),
            path,
            program: "?".into(),
        });
    } else {
        d.more += 1;
    }
}

async fn refuse(client: &mut tokio::net::TcpStream, status: u16, why: &str) -> std::io::Result<()> {
    let reason = match status {
        400 => "Bad Request",
        403 => "Forbidden",
        431 => "Request Header Fields Too Large",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        _ => "Gateway Timeout",
    };
    let body = format!("runner: {why}\n");
    let answer = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: text/plain\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    client.write_all(answer.as_bytes()).await?;
    client.shutdown().await
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A worker that opens connection after connection, sending nothing, holds no more than
    /// [`MAX_CONNECTIONS`] of runner's descriptors: the next is refused at once.
    #[tokio::test]
    async fn connections_past_the_limit_are_refused_at_once() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let allow = Arc::new(Allow::parse(&["127.0.0.1:1".to_string()]).unwrap());
        let server = tokio::spawn(serve(listener, allow, Arc::default()));
        let mut held = Vec::new();
        for _ in 0..MAX_CONNECTIONS {
            held.push(tokio::net::TcpStream::connect(addr).await.unwrap());
        }
        // Let the proxy take them all in.
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        let mut extra = tokio::net::TcpStream::connect(addr).await.unwrap();
        let mut answer = String::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            extra.read_to_string(&mut answer),
        )
        .await;
        assert!(
            read.is_ok(),
            "the connection past the limit was left waiting"
        );
        assert!(answer.starts_with("HTTP/1.1 503"), "{answer:?}");
        server.abort();
    }

    #[test]
    fn a_request_target_splits_into_host_and_port() {
        assert_eq!(
            split_host_port("example.com:8443", 443),
            Some(("example.com".into(), 8443))
        );
        assert_eq!(
            split_host_port("example.com", 80),
            Some(("example.com".into(), 80))
        );
        assert_eq!(split_host_port("[::1]:9", 443), Some(("[::1]".into(), 9)));
        assert_eq!(split_host_port(":9", 443), None);
    }
}
