//! The history store in real `padres-broker` processes: durability under SIGKILL,
//! what `padres-broker history` reads back, and the stores a broker refuses to start with.

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use padres_lang::{Publication, Value};
use padres_tests::binary;
use padres_tests::broker::{client, data_dir, start_with};

/// Runs `padres-broker history` on `dir` and returns the `n` of every line it prints.
fn stored_numbers(dir: &std::path::Path, filter: &str) -> Vec<i64> {
    let output = Command::new(binary("padres-broker"))
        .args(["history", "--data-dir"])
        .arg(dir)
        .arg(filter)
        .output()
        .expect("padres-broker history runs");
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout)
        .expect("utf-8")
        .lines()
        .map(|line| {
            let p: Publication = line.parse().unwrap_or_else(|e| panic!("{line}: {e}"));
            assert!(p.time().is_some(), "stored with its time: {line}");
            match p.get("n") {
                Some(Value::Int(n)) => *n,
                other => panic!("no n in {line}: {other:?}"),
            }
        })
        .collect()
}

#[tokio::test]
async fn with_full_durability_no_acknowledged_publication_is_lost_to_sigkill() {
    let flags: Vec<String> = ["--history", "[class,eq,'job_status']", "--history-durability", "full"]
        .iter()
        .map(|s| (*s).to_owned())
        .chain(["--history-index".to_owned(), "appl".to_owned()])
        .collect();
    let mut broker = start_with("B1", "history-kill", &flags);
    let acked: Arc<Mutex<Vec<i64>>> = Arc::default();
    let mut next = 0_i64;
    let kills = 20;
    for round in 0..kills {
        let publisher = client(&broker, "pub").await;
        publisher
            .send("a [class,eq,'job_status'],[appl,isPresent,''],[n,isPresent,0]")
            .await
            .expect("advertised");
        let first = next;
        next += 1_000_000;
        let acked_here = acked.clone();
        // Publishes, each waiting for its acknowledgement, until the broker dies.
        let publishing = tokio::spawn(async move {
            for n in first.. {
                let p: Publication =
                    format!("[class,'job_status'],[appl,'a{round}'],[n,{n}]").parse().expect("valid");
                if publisher.publish_acked(p).await.is_err() {
                    break;
                }
                acked_here.lock().expect("not poisoned").push(n);
            }
        });
        tokio::time::sleep(Duration::from_millis(100 + 10 * u64::try_from(round % 5).expect("small"))).await;
        broker.kill_and_restart();
        let _ =
            tokio::time::timeout(Duration::from_secs(10), publishing).await.expect("the publisher notices");
    }
    let acked = acked.lock().expect("not poisoned").clone();
    assert!(acked.len() >= kills, "only {} publications acknowledged in {kills} rounds", acked.len());
    let stored: BTreeSet<i64> = stored_numbers(&broker.dir, "[class,eq,'job_status']").into_iter().collect();
    let lost: Vec<&i64> = acked.iter().filter(|n| !stored.contains(n)).collect();
    assert!(lost.is_empty(), "{} of {} acknowledged publications lost: {lost:?}", lost.len(), acked.len());
    // An indexed query reads the same rows back, narrowed.
    let round3 = stored_numbers(&broker.dir, "[class,eq,'job_status'],[appl,eq,'a3']");
    assert!(round3.iter().all(|n| (3_000_000..4_000_000).contains(n)) && !round3.is_empty());
    assert!(round3.windows(2).all(|w| w[0] < w[1]), "in time order");
}

#[tokio::test]
async fn the_store_keeps_what_its_filter_selects_from_other_brokers_and_reports_it() {
    let b1 = start_with(
        "B1",
        "history-remote",
        &["--history".to_owned(), "[class,eq,'log'],[level,eq,'error']".to_owned()],
    );
    let b2 = start_with("B2", "history-remote", &padres_tests::broker::neighbour_of(&b1));
    let publisher = client(&b2, "pub").await;
    publisher.send("a [class,eq,'log'],[level,isPresent,''],[n,isPresent,0]").await.expect("advertised");
    let observer = client(&b2, "obs").await;
    padres_tests::broker::until_routes(&observer, "the store's filter reaches B2", |r| {
        r.prt.iter().any(|e| e.text == "[class,eq,'log'],[level,eq,'error']")
    })
    .await;
    for n in 0..100 {
        let level = if n % 3 == 0 { "error" } else { "info" };
        publisher.send(&format!("p [class,'log'],[level,'{level}'],[n,{n}]")).await.expect("published");
    }
    let b1_client = client(&b1, "stats").await;
    let mut stats = b1_client.stats().await.expect("stats");
    for _ in 0..100 {
        if stats.history_stored == 34 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        stats = b1_client.stats().await.expect("stats");
    }
    assert_eq!((stats.history_stored, stats.history_dropped, stats.history_failed), (34, 0, 0));
    let stored = stored_numbers(&b1.dir, "[class,eq,'log']");
    assert_eq!(stored, (0..100).filter(|n| n % 3 == 0).collect::<Vec<_>>());
}

#[test]
fn a_broker_refuses_to_start_on_a_store_that_is_not_a_database_or_in_use() {
    let start = |dir: &std::path::Path| {
        Command::new(binary("padres-broker"))
            .args(["--name", "B1", "--listen", "127.0.0.1:0", "--history", "[class,eq,'a']", "--data-dir"])
            .arg(dir)
            .output()
            .expect("runs")
    };
    let dir = data_dir("history-corrupt", "B1");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("dir");
    std::fs::write(dir.join("history.sqlite"), b"this is not a database at all, just some text ".repeat(200))
        .expect("written");
    let output = start(&dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("history.sqlite") && stderr.contains("not a database"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);

    let running = start_with("B1", "history-locked", &["--history".to_owned(), "[class,eq,'a']".to_owned()]);
    let output = start(&running.dir);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("in use by another broker process"), "{stderr}");
}
