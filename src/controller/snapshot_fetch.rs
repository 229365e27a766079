//! Reading a live snapshot, for `muster snapshot` and `muster what-if`. The controller serves
//! /snapshot on loopback only (`http`), so from outside its pod it is reached by a port-forward
//! through the hub's API server (which checks the caller's right to `create pods/portforward`
//! in the controller's namespace): to the replica holding the leader Lease first, then to every
//! other controller pod (a standby answers 503). `--url` reads a listener directly (an
//! out-of-cluster controller, or a `kubectl port-forward`). Owns that client side only.

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

/// Label of the controller's pods (set by the chart).
pub const POD_SELECTOR: &str = "app.kubernetes.io/component=controller";

/// Where `muster snapshot` and `muster what-if` read a live snapshot from.
#[derive(Clone, Debug)]
pub enum Live {
    /// A snapshot listener, e.g. `http://127.0.0.1:8081` (plain HTTP).
    Url(String),
    /// A port-forward to the controller's pods in `namespace`, port `port` (`--snapshot-addr`).
    Hub {
        kubeconfig: Option<std::path::PathBuf>,
        namespace: String,
        port: u16,
        /// The leader-election Lease, whose holder is asked first.
        lease: String,
    },
}

/// Reads the live scenario YAML.
pub async fn fetch(live: &Live) -> anyhow::Result<String> {
    match live {
        Live::Url(url) => fetch_url(url).await,
        Live::Hub {
            kubeconfig,
            namespace,
            port,
            lease,
        } => {
            let client = match kubeconfig {
                Some(p) => {
                    let text = std::fs::read_to_string(p)
                        .map_err(|e| anyhow::anyhow!("{}: {e}", p.display()))?;
                    super::members::client_from_kubeconfig("hub", &text).await?
                }
                None => kube::Client::try_default().await?,
            };
            fetch_forwarded(&client, namespace, *port, lease).await
        }
    }
}

/// The controller pods of `namespace`, the Lease holder first.
async fn candidates(client: &kube::Client, namespace: &str, lease: &str) -> Vec<String> {
    let mut out = Vec::new();
    let leases: Api<Lease> = Api::namespaced(client.clone(), namespace);
    if let Ok(l) = leases.get(lease).await
        && let Some(holder) = l.spec.and_then(|s| s.holder_identity)
    {
        out.push(holder);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    if let Ok(list) = pods.list(&ListParams::default().labels(POD_SELECTOR)).await {
        for p in list.items {
            let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
            let name = p.metadata.name.unwrap_or_default();
            if running && !name.is_empty() && !out.contains(&name) {
                out.push(name);
            }
        }
    }
    out
}

async fn fetch_forwarded(
    client: &kube::Client,
    namespace: &str,
    port: u16,
    lease: &str,
) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let names = candidates(client, namespace, lease).await;
    if names.is_empty() {
        return Err(anyhow::anyhow!(
            "no controller pod in namespace {namespace} (no Lease {lease} holder, no running pod labelled {POD_SELECTOR})"
        ));
    }
    let mut tried = Vec::new();
    for name in names {
        let answer = async {
            let mut pf = pods.portforward(&name, &[port]).await?;
            let stream = pf
                .take_stream(port)
                .ok_or_else(|| anyhow::anyhow!("no stream for port {port}"))?;
            let got = get_snapshot(stream, "localhost").await;
            pf.abort();
            got
        }
        .await;
        match answer {
            Ok((200, body)) => return Ok(body),
            Ok((status, body)) => tried.push(format!("{name}: {status}: {}", body.trim())),
            Err(e) => tried.push(format!("{name}: {e:#}")),
        }
    }
    Err(anyhow::anyhow!(
        "pods/portforward to port {port} in {namespace}: no controller answered: {}",
        tried.join("; ")
    ))
}

async fn fetch_url(url: &str) -> anyhow::Result<String> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        anyhow::anyhow!("--url {url:?}: only http:// URLs (the snapshot listener)")
    })?;
    let (host, _) = rest.split_once('/').unwrap_or((rest, ""));
    let s = tokio::net::TcpStream::connect(host)
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
    match get_snapshot(s, host)
        .await
        .map_err(|e| anyhow::anyhow!("{url}: {e:#}"))?
    {
        (200, body) => Ok(body),
        (status, body) => Err(anyhow::anyhow!("{url}/snapshot: {status}: {}", body.trim())),
    }
}

/// `GET /snapshot` over `stream`: the status code and the body. Reads the body by its
/// Content-Length when given (a port-forwarded stream may not close), else to the end.
async fn get_snapshot<S: AsyncRead + AsyncWrite + Unpin>(
    mut s: S,
    host: &str,
) -> anyhow::Result<(u16, String)> {
    let req = format!("GET /snapshot HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let (head, body_start) = loop {
        let n = s.read(&mut chunk).await?;
        if n == 0 {
            return Err(anyhow::anyhow!(
                "not an HTTP answer (closed before its headers)"
            ));
        }
        buf.extend_from_slice(&chunk[..n]);
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break (String::from_utf8_lossy(&buf[..at]).to_string(), at + 4);
        }
    };
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("not an HTTP answer: {head:?}"))?;
    let lower = head.to_ascii_lowercase();
    let length = lower
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse::<usize>().ok());
    let mut body = buf[body_start..].to_vec();
    match length {
        Some(len) => {
            while body.len() < len {
                let n = s.read(&mut chunk).await?;
                if n == 0 {
                    break;
                }
                body.extend_from_slice(&chunk[..n]);
            }
            body.truncate(len);
        }
        None => {
            s.read_to_end(&mut body).await?;
        }
    }
    let body = String::from_utf8_lossy(&body).to_string();
    if lower.contains("transfer-encoding: chunked") {
        return Ok((status, dechunk(&body)));
    }
    Ok((status, body))
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(n) = usize::from_str_radix(size.trim(), 16) else {
            break;
        };
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    async fn answer(raw: &'static str) -> anyhow::Result<(u16, String)> {
        let (client, mut server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(async move {
            let mut req = [0u8; 1024];
            let _ = server.read(&mut req).await;
            let _ = server.write_all(raw.as_bytes()).await;
            // Held open: a port-forwarded stream need not close after the answer.
            tokio::time::sleep(std::time::Duration::from_secs(30)).await;
        });
        get_snapshot(client, "localhost").await
    }

    #[tokio::test]
    async fn a_body_is_read_by_its_length_on_a_stream_that_stays_open() {
        let got = answer("HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello")
            .await
            .expect("an answer");
        assert_eq!(got, (200, "hello".to_string()));
        let got = answer("HTTP/1.1 503 Service Unavailable\r\nContent-Length: 4\r\n\r\nlead")
            .await
            .expect("an answer");
        assert_eq!(got, (503, "lead".to_string()));
    }

    #[test]
    fn chunked_bodies_are_joined() {
        assert_eq!(dechunk("5\r\nhello\r\n3\r\n ok\r\n0\r\n\r\n"), "hello ok");
    }
}
