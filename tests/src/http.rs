//! A plain HTTP/1.1 client for the tests of a broker's HTTP listener: one request per
//! connection, read to its end.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Sends one HTTP/1.1 `request` (closing the connection after it); returns the status
/// code, the headers (lower-case names) and the body.
pub async fn exchange(addr: SocketAddr, request: &str) -> (u16, HashMap<String, String>, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects to the HTTP listener");
    stream.write_all(request.as_bytes()).await.expect("sends the request");
    let mut response = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut response))
        .await
        .expect("answers within 10 s")
        .expect("reads the response");
    let (head, body) = response.split_once("\r\n\r\n").expect("a head and a body");
    let mut lines = head.lines();
    let status =
        lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).expect("a status");
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}

/// One GET.
pub async fn get(addr: SocketAddr, path: &str) -> (u16, HashMap<String, String>, String) {
    exchange(addr, &format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n")).await
}

/// One POST of `body` as `content_type`; returns the status and the body.
pub async fn post(addr: SocketAddr, path: &str, content_type: &str, body: &str) -> (u16, String) {
    let request = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let (status, _, body) = exchange(addr, &request).await;
    (status, body)
}

/// One GET that must answer 200 with JSON; the JSON.
pub async fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, _, body) = get(addr, path).await;
    assert_eq!(status, 200, "GET {path}: {body}");
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("GET {path}: not JSON ({e}): {body}"))
}

/// Sends `request` and reads the answer's status and head; the body too unless the status
/// is 200 (a stream of server-sent events, which does not end).
pub async fn status_of(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(addr).await.expect("connects to the HTTP listener");
    stream.write_all(request.as_bytes()).await.expect("sends the request");
    let mut response = Vec::new();
    let mut buf = [0_u8; 4096];
    let read = async {
        loop {
            let n = stream.read(&mut buf).await.expect("reads the response");
            response.extend_from_slice(&buf[..n]);
            let text = String::from_utf8_lossy(&response).into_owned();
            let head_done = text.contains("\r\n\r\n");
            let status: u16 = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
            if n == 0 || (head_done && status == 200) {
                return (status, text);
            }
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read).await.expect("answers within 10 s")
}

/// A request of `method` to `path` with `headers` (each `Name: value`) and `body`.
pub fn request(method: &str, addr: SocketAddr, path: &str, headers: &[String], body: &str) -> String {
    let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for header in headers {
        text.push_str(header);
        text.push_str("\r\n");
    }
    if !body.is_empty() {
        text.push_str(&format!("Content-Type: text/plain\r\nContent-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    text
}
