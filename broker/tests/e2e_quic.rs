//! Real `padres-broker` processes on loopback ports chosen at run time, and real clients
//! over QUIC.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use padres_client::{Client, ClientError};
use padres_lang::wire::ErrorCode;

/// A broker process, killed when dropped.
struct Broker {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn start_broker(name: &str, test: &str) -> Broker {
    start_linked_broker(name, test, None)
}

/// A broker that dials `neighbor` (trusting its certificate), if given.
fn start_linked_broker(name: &str, test: &str, neighbor: Option<&Broker>) -> Broker {
    let dir = std::env::temp_dir().join(format!("padres-e2e-{test}-{name}-{}", std::process::id()));
    let mut command = Command::new(env!("CARGO_BIN_EXE_padres-broker"));
    command.args(["--name", name, "--listen", "127.0.0.1:0", "--data-dir"]).arg(&dir);
    if let Some(n) = neighbor {
        command
            .arg("--neighbor")
            .arg(format!("quic://{}", n.addr))
            .arg("--peer-cert")
            .arg(n.dir.join("cert.pem"));
    }
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("broker starts");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("reads the listening line");
    let addr = line
        .trim()
        .rsplit_once("quic://")
        .and_then(|(_, a)| a.parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"));
    Broker { child, addr, dir }
}

async fn client(broker: &Broker, name: &str) -> Client {
    Client::connect(broker.addr, "localhost", &broker.dir.join("cert.pem"), name).await.expect("connects")
}

#[tokio::test]
async fn publications_reach_matching_subscribers_over_quic() {
    let broker = start_broker("B1", "deliver");
    let mut subscriber = client(&broker, "sub").await;
    let publisher = client(&broker, "pub").await;

    let sub =
        subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("an id");
    assert_eq!(sub.origin.as_str(), "B1");
    publisher.send("a [class,eq,'stock'],[symbol,isPresent,''],[price,>,0]").await.expect("advertised");
    publisher.send("p [class,'stock'],[symbol,'IBM'],[price,90]").await.expect("published");
    publisher.send("p [class,'stock'],[symbol,'IBM'],[price,120]").await.expect("published");

    let (matched, publication) =
        tokio::time::timeout(Duration::from_secs(10), subscriber.next_notification())
            .await
            .expect("in time")
            .expect("a notification");
    assert_eq!(matched, std::slice::from_ref(&sub));
    assert_eq!(publication.to_string(), "[class,'stock'],[symbol,'IBM'],[price,120]");

    // Errors come back as errors, and the connection goes on.
    let refused = publisher.send("p [class,'bond'],[price,1]").await;
    assert!(
        matches!(refused, Err(ClientError::Refused { code: ErrorCode::NotAdvertised, .. })),
        "{refused:?}"
    );
    let unknown = subscriber.send("unsub B1/999").await;
    assert!(matches!(unknown, Err(ClientError::Refused { code: ErrorCode::UnknownId, .. })), "{unknown:?}");
    subscriber.send(&format!("unsub {sub}")).await.expect("unsubscribed");
    publisher.send("p [class,'stock'],[symbol,'IBM'],[price,130]").await.expect("published");
    let nothing = tokio::time::timeout(Duration::from_millis(300), subscriber.next_notification()).await;
    assert!(nothing.is_err(), "no notification after unsubscribing: {nothing:?}");
}

#[tokio::test]
async fn a_client_that_disconnects_does_not_disturb_the_others() {
    let broker = start_broker("B1", "disconnect");
    let publisher = client(&broker, "pub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0]").await.expect("advertised");
    {
        let gone = client(&broker, "gone").await;
        gone.send("s [class,eq,'stock']").await.expect("subscribed");
    }
    // The broker keeps serving the others.
    let mut other = client(&broker, "other").await;
    other.send("s [class,eq,'stock'],[price,>,5]").await.expect("subscribed");
    publisher.send("p [class,'stock'],[price,10]").await.expect("published");
    let got =
        tokio::time::timeout(Duration::from_secs(10), other.next_notification()).await.expect("in time");
    assert!(got.is_some());
}

#[tokio::test]
async fn a_three_broker_chain_routes_by_content() {
    let b1 = start_linked_broker("B1", "chain", None);
    let b2 = start_linked_broker("B2", "chain", Some(&b1));
    let b3 = start_linked_broker("B3", "chain", Some(&b2));
    let publisher = client(&b1, "pub").await;
    let mut subscriber = client(&b3, "sub").await;
    publisher.send("a [class,eq,'stock'],[price,>,0],[n,isPresent,0]").await.expect("advertised");
    let sub = subscriber.send("s [class,eq,'stock'],[price,>,100]").await.expect("subscribed").expect("id");
    // The links come up and the subscription travels while we publish: publish until the
    // first matching quote arrives (the overlay settles within a few round trips).
    let mut delivered = None;
    for n in 0..100 {
        publisher.send(&format!("p [class,'stock'],[price,50],[n,{n}]")).await.expect("published");
        publisher.send(&format!("p [class,'stock'],[price,150],[n,{n}]")).await.expect("published");
        if let Ok(got) =
            tokio::time::timeout(Duration::from_millis(100), subscriber.next_notification()).await
        {
            delivered = got;
            break;
        }
    }
    let (matched, publication) = delivered.expect("a publication crossed B1 -> B2 -> B3");
    assert_eq!(matched, [sub]);
    assert_eq!(publication.get("price"), Some(&padres_lang::Value::Int(150)));
    // Only matching ones ever arrive.
    while let Ok(Some((_, p))) =
        tokio::time::timeout(Duration::from_millis(300), subscriber.next_notification()).await
    {
        assert_eq!(p.get("price"), Some(&padres_lang::Value::Int(150)), "{p}");
    }
}
