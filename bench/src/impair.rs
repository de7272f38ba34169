//! `padres-bench impair`: a UDP relay that delays and drops packets, for links between
//! brokers on machines whose kernel has no `netem` (the `scripts/netns-federation`
//! harness uses it then, and says so).
//!
//! The relay listens on one address and forwards to another. The first peer that sends to
//! it is the dialling side; what the far side answers goes back to the latest such peer
//! (a redial from the same endpoint keeps its address; one from elsewhere takes over).
//! Each packet, either way, is dropped with probability `loss` or else sent `delay` after
//! it arrived, in arrival order, which is what `netem delay D loss L` does without jitter.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::UdpSocket;
use tokio::sync::{Mutex, mpsc};
use tokio::time::Instant;

/// Runs the relay until the process is stopped.
pub(crate) fn run(listen: SocketAddr, to: SocketAddr, delay: Duration, loss: f64) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async move {
        let outside =
            Arc::new(UdpSocket::bind(listen).await.unwrap_or_else(|e| panic!("binds {listen}: {e}")));
        let any: SocketAddr = if to.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { ([0_u16; 8], 0).into() };
        let inside = Arc::new(UdpSocket::bind(any).await.expect("binds a port toward the far side"));
        inside.connect(to).await.unwrap_or_else(|e| panic!("reaches {to}: {e}"));
        println!("impair: {listen} -> {to}, delay {delay:?}, loss {:.2}%", loss * 100.0);
        let peer: Arc<Mutex<Option<SocketAddr>>> = Arc::default();

        // Toward the far side.
        let (forward, mut forwards) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
        let sender = inside.clone();
        tokio::spawn(async move {
            while let Some((due, packet)) = forwards.recv().await {
                tokio::time::sleep_until(due).await;
                let _ = sender.send(&packet).await;
            }
        });
        // Back toward the dialling side.
        let (back, mut backs) = mpsc::unbounded_channel::<(Instant, Vec<u8>)>();
        let (replier, to_peer) = (outside.clone(), peer.clone());
        tokio::spawn(async move {
            while let Some((due, packet)) = backs.recv().await {
                tokio::time::sleep_until(due).await;
                if let Some(addr) = *to_peer.lock().await {
                    let _ = replier.send_to(&packet, addr).await;
                }
            }
        });
        tokio::spawn(async move {
            let mut buf = vec![0_u8; 65_536];
            loop {
                let Ok(n) = inside.recv(&mut buf).await else { continue };
                if fastrand::f64() >= loss {
                    let _ = back.send((Instant::now() + delay, buf[..n].to_vec()));
                }
            }
        });
        let mut buf = vec![0_u8; 65_536];
        let mut last = None;
        loop {
            let Ok((n, from)) = outside.recv_from(&mut buf).await else { continue };
            if last != Some(from) {
                *peer.lock().await = Some(from);
                last = Some(from);
            }
            if fastrand::f64() >= loss {
                let _ = forward.send((Instant::now() + delay, buf[..n].to_vec()));
            }
        }
    });
}
