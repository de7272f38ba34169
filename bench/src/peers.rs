//! nats-server and mosquitto as comparison points: started as child processes on loopback
//! ports chosen here, and driven by minimal pipelined protocol clients (NATS text protocol;
//! MQTT 3.1.1 with QoS 0). A load generator needs only connect, subscribe, publish and
//! receive, without the per-message bookkeeping of full client libraries, which would
//! measure the client rather than the server.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use padres_lang::Publication;
use padres_lang::wire::codec::DEFAULT_MAX_FRAME;
use padres_lang::wire::{self, Frame};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader, BufWriter};
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// A publication as a peer's message body: the padres wire frame.
pub(crate) fn encode(publication: &Publication) -> Vec<u8> {
    let mut out = Vec::new();
    let frame = Frame::Publish { publication: Arc::new(publication.clone()) };
    wire::encode(&frame, DEFAULT_MAX_FRAME, &mut out).expect("encodes");
    out
}

/// The publication in a peer's message body.
pub(crate) fn decode(body: &[u8]) -> Option<Publication> {
    match wire::decode(body, DEFAULT_MAX_FRAME) {
        Ok((Frame::Publish { publication }, _)) => Some(Arc::unwrap_or_clone(publication)),
        _ => None,
    }
}

/// Which server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PeerKind {
    Nats,
    Mosquitto,
}

impl PeerKind {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Self::Nats => "nats-server",
            Self::Mosquitto => "mosquitto",
        }
    }

    /// The server's executable, looked for on PATH and in the sbin directories Debian
    /// installs it into.
    fn binary(self) -> Option<PathBuf> {
        let name = self.label();
        let path = std::env::var_os("PATH").unwrap_or_default();
        std::env::split_paths(&path)
            .chain(["/usr/sbin".into(), "/usr/local/sbin".into(), "/usr/bin".into()])
            .map(|dir| dir.join(name))
            .find(|p| p.is_file())
    }

    pub(crate) fn available(self) -> bool {
        self.binary().is_some()
    }
}

/// A running server, killed when dropped.
#[derive(Debug)]
pub(crate) struct Peer {
    kind: PeerKind,
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl Drop for Peer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

static CLIENTS: AtomicU64 = AtomicU64::new(0);

impl Peer {
    /// Starts the server on a free loopback port; `None` if it is not installed or does
    /// not come up.
    pub(crate) fn start(kind: PeerKind) -> Option<Self> {
        let binary = kind.binary()?;
        let port = std::net::TcpListener::bind("127.0.0.1:0").ok()?.local_addr().ok()?.port();
        let dir =
            std::env::temp_dir().join(format!("padres-bench-{}-{}-{port}", kind.label(), std::process::id()));
        std::fs::create_dir_all(&dir).ok()?;
        let mut command = Command::new(binary);
        match kind {
            PeerKind::Nats => {
                command.args(["-a", "127.0.0.1", "-p", &port.to_string()]);
            }
            PeerKind::Mosquitto => {
                let config = dir.join("mosquitto.conf");
                std::fs::write(
                    &config,
                    format!("listener {port} 127.0.0.1\nallow_anonymous true\nset_tcp_nodelay true\n"),
                )
                .ok()?;
                command.arg("-c").arg(config);
            }
        }
        let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().ok()?;
        let peer = Self { kind, child, port, dir };
        let deadline = Instant::now() + Duration::from_secs(5);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            if Instant::now() > deadline {
                eprintln!("{} did not come up on port {port}", kind.label());
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Some(peer)
    }

    pub(crate) async fn connect(&self) -> std::io::Result<PeerClient> {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).await?;
        stream.set_nodelay(true)?;
        let (read, write) = stream.into_split();
        let mut client = PeerClient {
            kind: self.kind,
            reader: BufReader::with_capacity(256 * 1024, read),
            writer: BufWriter::with_capacity(64 * 1024, write),
            packet_id: 0,
        };
        client.handshake().await?;
        Ok(client)
    }
}

fn protocol_error(what: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, what)
}

/// One connection to a peer server.
#[derive(Debug)]
pub(crate) struct PeerClient {
    kind: PeerKind,
    reader: BufReader<OwnedReadHalf>,
    writer: BufWriter<OwnedWriteHalf>,
    packet_id: u16,
}

/// MQTT's variable-length "remaining length".
fn mqtt_length(mut n: usize, out: &mut Vec<u8>) {
    loop {
        let byte = u8::try_from(n % 128).unwrap_or(0);
        n /= 128;
        if n > 0 {
            out.push(byte | 0x80);
        } else {
            out.push(byte);
            return;
        }
    }
}

fn mqtt_string(text: &str, out: &mut Vec<u8>) {
    out.extend_from_slice(&u16::try_from(text.len()).unwrap_or(0).to_be_bytes());
    out.extend_from_slice(text.as_bytes());
}

fn mqtt_packet(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut out = vec![kind];
    mqtt_length(body.len(), &mut out);
    out.extend_from_slice(body);
    out
}

impl PeerClient {
    async fn handshake(&mut self) -> std::io::Result<()> {
        match self.kind {
            PeerKind::Nats => {
                let mut info = String::new();
                self.reader.read_line(&mut info).await?;
                if !info.starts_with("INFO") {
                    return Err(protocol_error(format!("expected INFO, got {info:?}")));
                }
                self.writer.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false}\r\n").await?;
                self.sync().await
            }
            PeerKind::Mosquitto => {
                let id = format!("padres-bench-{}", CLIENTS.fetch_add(1, Ordering::Relaxed));
                // Protocol "MQTT" level 4, clean session, keep-alive off.
                let mut body = vec![0, 4, b'M', b'Q', b'T', b'T', 4, 0x02, 0, 0];
                mqtt_string(&id, &mut body);
                self.writer.write_all(&mqtt_packet(0x10, &body)).await?;
                self.writer.flush().await?;
                let (kind, body) = self.mqtt_read().await?;
                if kind >> 4 != 2 || body.get(1) != Some(&0) {
                    return Err(protocol_error(format!("CONNACK refused: {kind:#x} {body:?}")));
                }
                Ok(())
            }
        }
    }

    /// Subscribes to `subject` (NATS) or topic (MQTT).
    pub(crate) async fn subscribe(&mut self, subject: &str) -> std::io::Result<()> {
        self.packet_id = self.packet_id.wrapping_add(1).max(1);
        match self.kind {
            PeerKind::Nats => {
                let sid = self.packet_id;
                self.writer.write_all(format!("SUB {subject} {sid}\r\n").as_bytes()).await
            }
            PeerKind::Mosquitto => {
                let mut body = self.packet_id.to_be_bytes().to_vec();
                mqtt_string(subject, &mut body);
                body.push(0);
                self.writer.write_all(&mqtt_packet(0x82, &body)).await?;
                self.writer.flush().await?;
                loop {
                    let (kind, _) = self.mqtt_read().await?;
                    if kind >> 4 == 9 {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Waits until the server has processed everything sent so far (NATS: PING/PONG;
    /// MQTT subscriptions are already acknowledged).
    pub(crate) async fn sync(&mut self) -> std::io::Result<()> {
        match self.kind {
            PeerKind::Nats => {
                self.writer.write_all(b"PING\r\n").await?;
                self.writer.flush().await?;
                let mut line = String::new();
                loop {
                    line.clear();
                    if self.reader.read_line(&mut line).await? == 0 {
                        return Err(protocol_error("closed".into()));
                    }
                    if line.starts_with("PONG") {
                        return Ok(());
                    }
                    if line.starts_with("-ERR") {
                        return Err(protocol_error(line.trim().to_owned()));
                    }
                }
            }
            PeerKind::Mosquitto => self.writer.flush().await,
        }
    }

    /// Queues a message (sent when the buffer fills or on [`PeerClient::flush`]).
    pub(crate) async fn publish(&mut self, subject: &str, body: &[u8]) -> std::io::Result<()> {
        match self.kind {
            PeerKind::Nats => {
                self.writer.write_all(format!("PUB {subject} {}\r\n", body.len()).as_bytes()).await?;
                self.writer.write_all(body).await?;
                self.writer.write_all(b"\r\n").await
            }
            PeerKind::Mosquitto => {
                let mut header = vec![0x30];
                mqtt_length(2 + subject.len() + body.len(), &mut header);
                mqtt_string(subject, &mut header);
                self.writer.write_all(&header).await?;
                self.writer.write_all(body).await
            }
        }
    }

    pub(crate) async fn flush(&mut self) -> std::io::Result<()> {
        self.writer.flush().await
    }

    /// The next message's body; `None` when the server closes the connection.
    pub(crate) async fn next(&mut self) -> std::io::Result<Option<Vec<u8>>> {
        match self.kind {
            PeerKind::Nats => {
                let mut line = String::new();
                loop {
                    line.clear();
                    if self.reader.read_line(&mut line).await? == 0 {
                        return Ok(None);
                    }
                    if let Some(rest) = line.strip_prefix("MSG ") {
                        let len: usize = rest
                            .split_whitespace()
                            .last()
                            .and_then(|n| n.parse().ok())
                            .ok_or_else(|| protocol_error(format!("bad MSG line {line:?}")))?;
                        let mut body = vec![0; len + 2];
                        self.reader.read_exact(&mut body).await?;
                        body.truncate(len);
                        return Ok(Some(body));
                    }
                    if line.starts_with("PING") {
                        self.writer.write_all(b"PONG\r\n").await?;
                        self.writer.flush().await?;
                    } else if line.starts_with("-ERR") {
                        return Err(protocol_error(line.trim().to_owned()));
                    }
                }
            }
            PeerKind::Mosquitto => loop {
                let (kind, body) = match self.mqtt_read().await {
                    Ok(packet) => packet,
                    Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Ok(None),
                    Err(e) => return Err(e),
                };
                if kind >> 4 == 3 {
                    let topic_len = usize::from(u16::from_be_bytes([body[0], body[1]]));
                    // QoS 0: no packet identifier after the topic.
                    return Ok(Some(body[2 + topic_len..].to_vec()));
                }
            },
        }
    }

    async fn mqtt_read(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        let kind = self.reader.read_u8().await?;
        let mut len = 0_usize;
        let mut shift = 0;
        loop {
            let byte = self.reader.read_u8().await?;
            len |= usize::from(byte & 0x7f) << shift;
            shift += 7;
            if byte & 0x80 == 0 || shift > 21 {
                break;
            }
        }
        let mut body = vec![0; len];
        self.reader.read_exact(&mut body).await?;
        Ok((kind, body))
    }
}
