//! The history store: ingest rate against raw SQLite inserts of the same rows, routing
//! throughput with a store against without, and query latency against a full scan.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use padres_broker::history::writer::History;
use padres_broker::history::{Durability, Reader, Record, Store, StoreOptions};
use padres_broker::router::{Input, Output, Router};
use padres_lang::{Message, Name, Publication, Stamp, Subscription, Timestamp, matches};

use crate::{fmt, percentiles};

const START: i64 = 1_763_632_800_000;
const MINUTE: i64 = 60_000;

fn dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("padres-bench-history-{}-{what}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn options(durability: Durability) -> StoreOptions {
    StoreOptions {
        durability,
        indexed: vec![Name::new("appl").expect("name"), Name::new("gid").expect("name")],
        ..StoreOptions::default()
    }
}

/// `apps` applications × `generations` generations × `jobs` job statuses; generation `g`
/// of every application runs at START + 10g minutes, its jobs a second apart.
fn workload(apps: usize, generations: usize, jobs: usize) -> Vec<Record> {
    let origin = Name::new("B1").expect("name");
    let mut out = Vec::with_capacity(apps * generations * jobs);
    let mut seq = 0;
    for g in 0..generations {
        for a in 0..apps {
            for j in 0..jobs {
                let at = START
                    + i64::try_from(g).expect("small") * 10 * MINUTE
                    + i64::try_from(j).expect("small") * 1000;
                let time = Timestamp::from_millis(at).expect("in range");
                let status = if j % 17 == 3 { "FAILED" } else { "SUCCESS" };
                let p: Publication = format!(
                    "[class,'job_status'],[appl,'app{a}'],[gid,'app{a}-{g}'],[job,'J{j}'],[status,'{status}'],[agent,'agent-{}'],[rc,{}]",
                    j % 8,
                    u8::from(status == "FAILED")
                )
                .parse()
                .expect("valid");
                seq += 1;
                let stamp = Stamp::new(u64::try_from(at).expect("after 1970"), origin.clone(), seq);
                out.push(Record { stamp, publication: Arc::new(p.with_time(time)) });
            }
        }
    }
    out
}

/// Stores `records` in batches as the writer thread does; returns publications/s.
fn ingest(records: &[Record], durability: Durability) -> f64 {
    let dir = dir("ingest");
    let mut store = Store::open(&dir, options(durability)).expect("opens");
    let start = Instant::now();
    for batch in records.chunks(padres_broker::history::writer::MAX_BATCH) {
        store.insert(batch).expect("stored");
    }
    let rate = records.len() as f64 / start.elapsed().as_secs_f64();
    drop(store);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

/// A row as the store writes it: time, class, stamp time, origin, counter, bytes, appl, gid.
type RawRow = (i64, String, i64, String, i64, Vec<u8>, String, String);

/// The same rows, prepared beforehand, inserted one row per publication with one prepared
/// statement, in transactions of the same size, with the store's settings: a table with
/// the store's columns and indexes on (class, time) and on (class, key, time) for `appl` and
/// `gid` (how the store kept publications before it wrote them in blocks).
fn raw_ingest(records: &[Record], durability: Durability) -> f64 {
    let dir = dir("raw");
    std::fs::create_dir_all(&dir).expect("dir");
    let rows: Vec<RawRow> = records
        .iter()
        .map(|r| {
            let mut bytes = Vec::new();
            padres_broker::history::encode(&r.publication, &mut bytes).expect("encodes");
            let p = &r.publication;
            let s = |a: &str| p.get(a).and_then(|v| v.as_str()).unwrap_or_default().to_owned();
            let time = p.time().expect("timed").millis();
            (
                time,
                s("class"),
                time,
                r.stamp.origin.to_string(),
                i64::try_from(r.stamp.seq).expect("fits"),
                bytes,
                s("appl"),
                s("gid"),
            )
        })
        .collect();
    let mut conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
    conn.pragma_update(None, "page_size", 16_384).expect("page size");
    conn.pragma_update(None, "journal_mode", "WAL").expect("wal");
    let sync = if durability == Durability::Full { "FULL" } else { "NORMAL" };
    conn.pragma_update(None, "synchronous", sync).expect("sync");
    // The store's own settings, so that the ratio is what the store adds.
    conn.pragma_update(None, "cache_size", -65_536).expect("cache");
    let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0)).expect("page size");
    conn.pragma_update(None, "wal_autocheckpoint", 40_960_000 / page).expect("checkpoints");
    conn.execute_batch(
        "CREATE TABLE publications (row INTEGER PRIMARY KEY, time INTEGER NOT NULL, class TEXT NOT NULL,
             stamp_time INTEGER NOT NULL, origin TEXT NOT NULL, seq INTEGER NOT NULL, bytes BLOB NOT NULL,
             k0, k1);
         CREATE INDEX publications_by_class_time ON publications (class, time);
         CREATE INDEX publications_by_k0 ON publications (class, k0, time);
         CREATE INDEX publications_by_k1 ON publications (class, k1, time);",
    )
    .expect("schema");
    let start = Instant::now();
    for batch in rows.chunks(padres_broker::history::writer::MAX_BATCH) {
        let tx = conn.transaction().expect("tx");
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO publications (time, class, stamp_time, origin, seq, bytes, k0, k1) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
                )
                .expect("prepared");
            for r in batch {
                stmt.execute(rusqlite::params![r.0, r.1, r.2, r.3, r.4, r.5, r.6, r.7]).expect("inserted");
            }
        }
        tx.commit().expect("committed");
    }
    let rate = rows.len() as f64 / start.elapsed().as_secs_f64();
    drop(conn);
    let _ = std::fs::remove_dir_all(&dir);
    rate
}

/// Publications/s through a sans-IO router (one publisher, one subscriber of a tenth of
/// the traffic), with or without a store keeping every job status (its outputs offered
/// to the writer thread as the broker's router task does); and, with the store, how long
/// the writer took to have everything on disk.
fn routing(records: &[Record], with_store: bool) -> (f64, Option<(Duration, u64, u64)>) {
    let mut router = Router::new(Name::new("B1").expect("name"));
    let mut out = Vec::new();
    let adv = "[class,eq,'job_status'],[appl,isPresent,''],[gid,isPresent,''],[job,isPresent,''],[status,isPresent,''],[agent,isPresent,''],[rc,isPresent,0]";
    router.handle(
        0,
        Input::Client { client: 1, req: Some(1), message: Message::Advertise(adv.parse().expect("valid")) },
        &mut out,
    );
    let sub: Subscription = "[class,eq,'job_status'],[agent,eq,'agent-3']".parse().expect("valid");
    router.handle(0, Input::Client { client: 2, req: Some(1), message: Message::Subscribe(sub) }, &mut out);
    let dir = dir("routing");
    let history = with_store.then(|| {
        router.handle(0, Input::KeepHistory("[class,eq,'job_status']".parse().expect("valid")), &mut out);
        History::start(Store::open(&dir, options(Durability::Normal)).expect("opens"), 65_536)
    });
    out.clear();
    let publications: Vec<Publication> = records.iter().map(|r| r.publication.without_time()).collect();
    let start = Instant::now();
    for (n, p) in publications.into_iter().enumerate() {
        let now = u64::try_from(START).expect("positive") + n as u64;
        router.handle(now, Input::Client { client: 1, req: None, message: Message::Publish(p) }, &mut out);
        for o in out.drain(..) {
            if let (Output::Store { stamp, publication, .. }, Some(h)) = (o, &history) {
                let _ = h.offer(Record { stamp, publication }, None);
            }
        }
    }
    let routed = start.elapsed();
    let rate = records.len() as f64 / routed.as_secs_f64();
    let written = history.map(|mut h| {
        h.close();
        let stats = h.stats();
        (start.elapsed(), stats.stored, stats.dropped)
    });
    let _ = std::fs::remove_dir_all(&dir);
    (rate, written)
}

/// CPU time (ns) the threads named `name` have been on a CPU, from Linux's
/// `/proc/self/task/*/schedstat`; `None` where that cannot be read.
fn thread_cpu_ns(name: &str) -> Option<u64> {
    let mut total = None;
    for task in std::fs::read_dir("/proc/self/task").ok()?.flatten() {
        let path = task.path();
        if std::fs::read_to_string(path.join("comm")).ok().as_deref().map(str::trim) == Some(name) {
            let stat = std::fs::read_to_string(path.join("schedstat")).ok()?;
            *total.get_or_insert(0) += stat.split_whitespace().next()?.parse::<u64>().ok()?;
        }
    }
    total
}

/// The writer thread's CPU time per stored row when `records` are offered at `rate` per
/// second (a millisecond's worth at a time), and how many were dropped.
fn paced_writer_cost(records: &[Record], rate: usize) -> (Option<f64>, u64) {
    let dir = dir("paced");
    let history = History::start(Store::open(&dir, options(Durability::Normal)).expect("opens"), 65_536);
    let start = Instant::now();
    for (tick, chunk) in records.chunks((rate / 1000).max(1)).enumerate() {
        let due = start + Duration::from_millis(tick as u64);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
        for record in chunk {
            let _ = history.offer(record.clone(), None);
        }
    }
    while history.stats().queued > 0 {
        std::thread::sleep(Duration::from_millis(1));
    }
    let cpu = thread_cpu_ns("history-writer");
    let stats = history.stats();
    drop(history);
    let _ = std::fs::remove_dir_all(&dir);
    (cpu.map(|ns| ns as f64 / stats.stored.max(1) as f64), stats.dropped)
}

/// Runs the history benchmarks.
pub(crate) fn run(quick: bool) {
    let n_ingest = if quick { 50_000 } else { 200_000 };
    let records = workload(20, n_ingest / (20 * 50), 50);
    println!(
        "\nhistory store ingest: {} job statuses, batches of {}",
        records.len(),
        padres_broker::history::writer::MAX_BATCH
    );
    for durability in [Durability::Normal, Durability::Full] {
        let mut ours = Vec::new();
        let mut raw = Vec::new();
        for _ in 0..3 {
            ours.push(ingest(&records, durability));
            raw.push(raw_ingest(&records, durability));
        }
        ours.sort_by(f64::total_cmp);
        raw.sort_by(f64::total_cmp);
        println!(
            "  {durability:?}: store {:>9.0}/s, raw SQLite inserts of the same rows {:>9.0}/s, ratio {:.2} (medians of 3)",
            ours[1],
            raw[1],
            ours[1] / raw[1]
        );
    }
    println!("\nrouting with a store keeping every publication (sans-IO router, writer thread beside it):");
    let mut without = Vec::new();
    let mut with = Vec::new();
    let mut drained = None;
    for _ in 0..3 {
        without.push(routing(&records, false).0);
        let (rate, written) = routing(&records, true);
        with.push(rate);
        drained = written;
    }
    without.sort_by(f64::total_cmp);
    with.sort_by(f64::total_cmp);
    println!(
        "  without {:>9.0}/s, with {:>9.0}/s, ratio {:.2} (medians of 3)",
        without[1],
        with[1],
        with[1] / without[1]
    );
    if let Some((all, stored, dropped)) = drained {
        println!(
            "  last run: {stored} stored, {dropped} dropped (queue full); everything on disk after {}",
            fmt(all)
        );
    }

    println!("\nthe writer thread's CPU time per stored row, publications offered at a steady rate:");
    for rate in [20_000, 100_000] {
        let mut costs = Vec::new();
        let mut dropped = 0;
        for _ in 0..3 {
            let (cost, d) = paced_writer_cost(&records[..rate.min(records.len())], rate);
            costs.extend(cost);
            dropped += d;
        }
        costs.sort_by(f64::total_cmp);
        match costs.get(costs.len() / 2) {
            Some(ns) => println!(
                "  {rate:>7}/s: {:.2} µs per row (median of {}), {dropped} dropped",
                ns / 1000.0,
                costs.len()
            ),
            None => println!("  {rate:>7}/s: the thread's CPU time cannot be read here"),
        }
    }

    // Query latency.
    let generations = if quick { 100 } else { 1_000 };
    let records = workload(20, generations, 50);
    let dir = dir("query");
    let mut store = Store::open(&dir, options(Durability::Normal)).expect("opens");
    let start = Instant::now();
    for batch in records.chunks(padres_broker::history::writer::MAX_BATCH) {
        store.insert(batch).expect("stored");
    }
    println!(
        "\nhistory query: {} stored (20 applications, {generations} generations of 50 jobs, one every 10 minutes), loaded in {}",
        records.len(),
        fmt(start.elapsed())
    );
    drop(store);
    let size = std::fs::metadata(dir.join(padres_broker::history::FILE)).map_or(0, |m| m.len());
    let start = Instant::now();
    drop(Reader::open(&dir).expect("opens, checked whole"));
    println!(
        "  database {:.1} MB; opening it with the integrity check (what a start after a crash does) took {}",
        size as f64 / 1e6,
        fmt(start.elapsed())
    );
    let reader = Reader::open_with(&dir, false).expect("opens");
    let mut rng = fastrand::Rng::with_seed(7);
    let span = i64::try_from(generations).expect("small") * 10 * MINUTE;
    let queries: Vec<Subscription> = (0..25)
        .map(|_| {
            let from = START + rng.i64(0..span - 60 * MINUTE);
            let at = |t: i64| Timestamp::from_millis(t).expect("in range").to_rfc3339();
            format!(
                "[class,eq,'job_status'],[appl,eq,'app{}'],[time,>=,{}],[time,<,{}]",
                rng.usize(0..20),
                at(from),
                at(from + 60 * MINUTE)
            )
            .parse()
            .expect("valid")
        })
        .collect();
    let mut times = Vec::new();
    let mut found = 0;
    for q in &queries {
        let t = Instant::now();
        found += reader.query(q, usize::MAX).expect("query").len();
        times.push(t.elapsed());
    }
    let (p50, p99) = percentiles(times);
    // The baseline: read every stored publication and check it with the reference
    // semantics.
    let scan = |q: &Subscription| {
        let conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
        let mut stmt = conn.prepare("SELECT bytes FROM blocks").expect("prepared");
        let blocks = stmt.query_map([], |r| r.get::<_, Vec<u8>>(0)).expect("query");
        let mut n = 0;
        for bytes in blocks {
            let bytes = bytes.expect("row");
            for entry in padres_broker::history::block::entries(&bytes).expect("a block") {
                if let Ok(publication) = padres_broker::history::decode(entry.frame)
                    && matches(q, &publication)
                {
                    n += 1;
                }
            }
        }
        n
    };
    let mut scans = Vec::new();
    let mut scanned = 0;
    for q in queries.iter().take(3) {
        let t = Instant::now();
        scanned += scan(q);
        scans.push(t.elapsed());
    }
    let expected: usize =
        queries.iter().take(3).map(|q| reader.query(q, usize::MAX).expect("query").len()).sum();
    assert_eq!(scanned, expected, "the indexed query and the full scan disagree");
    let (scan50, _) = percentiles(scans);
    println!(
        "  one application, a 1-hour window: p50 {} p99 {} ({} rows per query on average; 25 queries), full scan p50 {} (3 queries), ratio {:.0}x",
        fmt(p50),
        fmt(p99),
        found / queries.len(),
        fmt(scan50),
        scan50.as_secs_f64() / p50.as_secs_f64()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
