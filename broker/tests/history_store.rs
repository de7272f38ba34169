//! The history store on its own: what it keeps, what a query returns (checked against the
//! reference `matches` over everything stored), retention across a restart, and the
//! errors a broker must refuse to start with.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;

use padres_broker::history::writer::History;
use padres_broker::history::{Durability, HistoryError, Reader, Record, Store, StoreOptions};
use padres_lang::{Name, Publication, Stamp, Subscription, Timestamp, Value, matches};

fn dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("padres-history-{}-{test}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn options(indexed: &[&str]) -> StoreOptions {
    StoreOptions {
        durability: Durability::Normal,
        indexed: indexed.iter().map(|a| Name::new(a).expect("name")).collect(),
        ..StoreOptions::default()
    }
}

/// Job-status-like publications: `n` of them, one a second from `start`, over 4
/// applications and 3 jobs, some with a float `ms` and some without `gid`.
fn records(n: u64, start: i64, seed: u64) -> Vec<Record> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let origin = Name::new("B1").expect("name");
    (0..n)
        .map(|i| {
            let time =
                Timestamp::from_millis(start + i64::try_from(i).expect("small") * 1000).expect("in range");
            let class = if rng.u8(..10) == 0 { "trigger" } else { "job_status" };
            let mut text = format!("[class,'{class}'],[appl,'app{}'],[job,'J{}']", rng.u8(..4), rng.u8(..3));
            if rng.bool() {
                text.push_str(&format!(",[gid,'g{}']", rng.u8(..5)));
            }
            if rng.bool() {
                text.push_str(&format!(",[ms,{}.5]", rng.u16(..2000)));
            }
            let publication: Publication = text.parse().expect("valid");
            // Half stamped by the broker (no time of their own), half given a time.
            let publication = if i % 2 == 0 { publication.with_time(time) } else { publication };
            let millis = u64::try_from(time.millis()).expect("after 1970");
            Record { stamp: Stamp::new(millis, origin.clone(), i), publication: Arc::new(publication) }
        })
        .collect()
}

/// What the reference selects: every stored publication `sub` matches, by time.
fn reference(all: &[Record], sub: &Subscription) -> Vec<String> {
    let mut selected: Vec<(i64, u64, String)> = all
        .iter()
        .map(|r| {
            let p = r.publication.as_ref().clone().with_time(
                Timestamp::from_millis(i64::try_from(r.stamp.time).expect("fits")).expect("in range"),
            );
            (p, r)
        })
        .filter(|(p, _)| matches(sub, p))
        .map(|(p, r)| (p.time().expect("timed").millis(), r.stamp.seq, p.to_string()))
        .collect();
    selected.sort();
    selected.into_iter().map(|(_, _, text)| text).collect()
}

/// What a query returned, as text.
fn texts(stored: &[padres_lang::Stamped]) -> Vec<String> {
    stored.iter().map(|s| s.publication.to_string()).collect()
}

#[test]
fn queries_return_what_the_reference_selects_in_time_order() {
    let dir = dir("query");
    let start = 1_763_632_800_000;
    let all = records(2_000, start, 7);
    // Untimed records get their stamp's time when stored, as at a broker.
    let stored: Vec<Record> = all
        .iter()
        .map(|r| {
            let at = Timestamp::from_millis(i64::try_from(r.stamp.time).expect("fits")).expect("in range");
            Record {
                stamp: r.stamp.clone(),
                publication: Arc::new(r.publication.as_ref().clone().with_time(at)),
            }
        })
        .collect();
    let mut store = Store::open(&dir, options(&["appl", "gid"])).expect("opens");
    store.insert(&stored[..1_000]).expect("stored");
    store.insert(&stored[1_000..]).expect("stored");
    let reader = Reader::open(&dir).expect("a reader beside the writer");
    let at = |s: i64| Timestamp::from_millis(start + s * 1000).expect("in range").to_rfc3339();
    let first_status = all.iter().position(|r| r.publication.class() == "job_status").expect("one");
    let first_status = i64::try_from(first_status).expect("small");
    let queries = [
        "[class,eq,'job_status']".to_owned(),
        "[class,eq,'job_status'],[appl,eq,'app2']".to_owned(),
        format!("[class,eq,'job_status'],[appl,eq,'app1'],[time,>=,{}],[time,<,{}]", at(100), at(700)),
        format!("[class,eq,'trigger'],[time,>,{}]", at(1_500)),
        "[class,eq,'job_status'],[gid,eq,'g3'],[job,neq,'J1']".to_owned(),
        "[class,eq,'job_status'],[gid,isPresent,''],[ms,>,1000]".to_owned(),
        "[class,eq,'job_status'],[appl,str-prefix,'app'],[ms,<,10.5]".to_owned(),
        format!("[class,eq,'job_status'],[time,=,{}]", at(first_status)),
        format!("[class,eq,'job_status'],[time,>=,{}],[time,<=,{}]", at(42), at(46)),
        "[class,eq,'nothing']".to_owned(),
    ];
    for text in &queries {
        let sub: Subscription = text.parse().expect("valid");
        let expected = reference(&all, &sub);
        assert!(!expected.is_empty() || text.contains("nothing"), "{text} selects something");
        let got = reader.query(&sub, usize::MAX).expect("a query");
        let times: Vec<i64> = got.iter().map(|s| s.publication.time().expect("timed").millis()).collect();
        assert!(times.windows(2).all(|w| w[0] <= w[1]), "{text}: not in time order");
        let got: Vec<String> = got.iter().map(|s| s.publication.to_string()).collect();
        assert_eq!(got, expected, "{text}");
        assert_eq!(store.query(&sub, 5).expect("a query").len(), expected.len().min(5), "{text}: limit");
    }
    // A limit keeps the oldest.
    let first: Subscription = queries[0].parse().expect("valid");
    let one: Vec<String> =
        reader.query(&first, 1).expect("query").iter().map(|s| s.publication.to_string()).collect();
    assert_eq!(one, reference(&all, &first)[..1]);
}

#[test]
fn retention_removes_old_rows_and_a_restart_keeps_the_rest() {
    let dir = dir("retention");
    let now = 1_763_632_800_000_i64;
    let all = records(100, now - 100_000, 3);
    let by_rows = StoreOptions { max_rows: Some(60), ..options(&["appl"]) };
    let mut store = Store::open(&dir, by_rows).expect("opens");
    store.insert(&all).expect("stored");
    let clock = u64::try_from(now).expect("fits");
    assert_eq!(store.apply_retention(clock).expect("retention"), 40);
    assert_eq!(store.rows().expect("rows"), 60);
    drop(store);
    // Again, by age: rows whose time is over 30 s old go.
    let by_age = StoreOptions { max_age_ms: Some(30_000), ..options(&["appl"]) };
    let mut store = Store::open(&dir, by_age).expect("reopens");
    assert_eq!(store.rows().expect("rows"), 60, "a restart keeps what retention left");
    assert_eq!(store.apply_retention(clock).expect("retention"), 30);
    drop(store);
    let reader = Reader::open(&dir).expect("opens");
    let left = reader.query(&"[class,eq,'job_status']".parse().expect("valid"), usize::MAX).expect("query");
    assert!(left.iter().all(|s| s.stamp.time >= clock - 30_000), "only the last 30 s are left");
}

#[test]
fn max_bytes_keeps_the_pages_in_use_under_it_and_the_newest_rows() {
    let dir = dir("retention-bytes");
    let origin = Name::new("B1").expect("name");
    let all: Vec<Record> = (0..20_000_u64)
        .map(|i| {
            let at = Timestamp::from_millis(1_763_632_800_000 + i64::try_from(i).expect("small"))
                .expect("in range");
            let p: Publication = format!("[class,'blob'],[n,{i}]").parse().expect("valid");
            Record {
                stamp: Stamp::new(u64::try_from(at.millis()).expect("fits"), origin.clone(), i),
                publication: Arc::new(p.with_payload(vec![7_u8; 1_000]).with_time(at)),
            }
        })
        .collect();
    let max = 4_000_000;
    let mut store = Store::open(&dir, StoreOptions { max_bytes: Some(max), ..options(&[]) }).expect("opens");
    for chunk in all.chunks(5_000) {
        store.insert(chunk).expect("stored");
    }
    assert!(store.bytes_in_use().expect("size") > 5 * max, "about 20 MB stored");
    while store.apply_retention(0).expect("retention") > 0 {}
    let used = store.bytes_in_use().expect("size");
    assert!(used <= max, "{used} bytes in use");
    let kept = store.rows().expect("rows");
    assert!((1_000..20_000).contains(&kept), "{kept} rows kept");
    // The newest are kept.
    let left = store.query(&"[class,eq,'blob']".parse().expect("valid"), usize::MAX).expect("query");
    let first_kept = 20_000 - kept;
    assert_eq!(
        left.first().and_then(|s| s.publication.get("n").cloned()),
        Some(Value::Int(first_kept as i64))
    );
}

#[test]
fn max_rows_keeps_exactly_that_many_when_age_retention_left_gaps() {
    let dir = dir("retention-gaps");
    let now = 1_763_632_800_000_i64;
    // Every other publication carries a time of its own an hour old: age retention takes
    // those from between the others, leaving gaps in the row numbers.
    let origin = Name::new("B1").expect("name");
    let all: Vec<Record> = (0..100_u64)
        .map(|i| {
            let age = if i % 2 == 0 { 3_600_000 } else { 0 };
            let at = now - age + i64::try_from(i).expect("small");
            let time = Timestamp::from_millis(at).expect("in range");
            let p: Publication = format!("[class,'job_status'],[n,{i}]").parse().expect("valid");
            Record {
                stamp: Stamp::new(u64::try_from(at).expect("fits"), origin.clone(), i),
                publication: Arc::new(p.with_time(time)),
            }
        })
        .collect();
    let both = StoreOptions { max_age_ms: Some(60_000), max_rows: Some(30), ..options(&[]) };
    let mut store = Store::open(&dir, both).expect("opens");
    store.insert(&all).expect("stored");
    assert_eq!(store.rows().expect("rows"), 100);
    let clock = u64::try_from(now + 1_000).expect("fits");
    assert_eq!(store.apply_retention(clock).expect("retention"), 70);
    assert_eq!(store.rows().expect("rows"), 30);
    // The newest 30 of the 50 recent ones are left.
    let left = store.query(&"[class,eq,'job_status']".parse().expect("valid"), usize::MAX).expect("query");
    let numbers: Vec<i64> = left
        .iter()
        .map(|s| match s.publication.get("n") {
            Some(Value::Int(n)) => *n,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(numbers, (40..100).filter(|n| n % 2 == 1).collect::<Vec<i64>>());
    drop(store);
    let store = Store::open(&dir, options(&[])).expect("reopens");
    assert_eq!(store.rows().expect("rows"), 30, "counted again at open");
}

#[test]
fn an_attribute_indexed_later_is_filled_in_for_the_rows_already_stored() {
    let dir = dir("index-later");
    let all = records(300, 1_763_632_800_000, 11);
    let mut store = Store::open(&dir, options(&[])).expect("opens");
    store.insert(&all).expect("stored");
    drop(store);
    let store = Store::open(&dir, options(&["gid", "appl"])).expect("reopens, indexing gid and appl");
    let sub: Subscription = "[class,eq,'job_status'],[gid,eq,'g1'],[appl,eq,'app0']".parse().expect("valid");
    let got = store.query(&sub, usize::MAX).expect("query");
    let expected = all.iter().filter(|r| matches(&sub, &r.publication)).count();
    assert!(expected > 0);
    assert_eq!(got.len(), expected);
}

#[test]
fn a_store_in_use_or_not_a_database_is_refused_with_its_path() {
    let dir = dir("refused");
    let store = Store::open(&dir, options(&[])).expect("opens");
    let err = Store::open(&dir, options(&[])).expect_err("locked");
    assert!(matches!(err, HistoryError::Locked { .. }), "{err}");
    assert!(err.to_string().contains("history.sqlite") && err.to_string().contains("in use"), "{err}");
    drop(store);
    Store::open(&dir, options(&[])).expect("free again once closed");

    let bad = dir.join("garbage");
    std::fs::create_dir_all(&bad).expect("dir");
    std::fs::write(bad.join("history.sqlite"), vec![0x42; 8192]).expect("written");
    let err = Store::open(&bad, options(&[])).expect_err("not a database");
    assert!(matches!(err, HistoryError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("garbage/history.sqlite"), "{err}");
    assert!(Reader::open(&bad).is_err());

    // A file that cannot be opened is not called damaged.
    let unopenable = dir.join("unopenable");
    std::fs::create_dir_all(unopenable.join("history.sqlite")).expect("a directory where the file goes");
    let err = Store::open(&unopenable, options(&[])).expect_err("not a file");
    assert!(matches!(err, HistoryError::Open { .. }), "{err}");
    assert!(!err.to_string().contains("move the file away"), "{err}");
}

#[test]
fn a_store_that_did_not_open_whole_is_not_marked_closed_normally() {
    let dir = dir("half-open");
    drop(Store::open(&dir, options(&["appl"])).expect("opens"));
    assert!(dir.join("history.clean").exists(), "closed normally");
    // The key-column table names an attribute no broker would have declared.
    let conn = rusqlite::Connection::open(dir.join("history.sqlite")).expect("opens");
    conn.execute("INSERT INTO key_columns (column, attr) VALUES (7, 'no spaces')", []).expect("written");
    drop(conn);
    let err = Store::open(&dir, options(&["appl"])).expect_err("a bad key column");
    assert!(matches!(err, HistoryError::Corrupt { .. }), "{err}");
    assert!(!dir.join("history.clean").exists(), "the next broker checks it whole");
}

#[test]
fn the_writer_batches_acknowledges_and_counts_what_it_cannot_take() {
    let dir = dir("writer");
    let all = records(5_000, 1_763_632_800_000, 5);
    let store = Store::open(&dir, StoreOptions { durability: Durability::Full, ..options(&["appl"]) })
        .expect("opens");
    let mut history = History::start(store, 1_000_000);
    let (tx, rx) = mpsc::channel();
    for (i, record) in all.iter().enumerate() {
        let tx = tx.clone();
        let ack = Box::new(move |result: Result<(), String>| {
            let _ = tx.send((i, result));
        });
        assert!(history.offer(record.clone(), Some(ack)).is_ok(), "room");
    }
    drop(tx);
    let mut acked: Vec<usize> = rx.iter().map(|(i, result)| result.map(|()| i).expect("stored")).collect();
    acked.sort_unstable();
    assert_eq!(acked, (0..all.len()).collect::<Vec<_>>(), "every publication acknowledged once");
    let stats = history.stats();
    assert_eq!((stats.stored, stats.dropped, stats.queued), (5_000, 0, 0));
    history.close();
    let reader = Reader::open(&dir).expect("opens");
    let stored = reader.query(&"[class,eq,'job_status']".parse().expect("valid"), usize::MAX).expect("query");
    assert_eq!(stored.len(), all.iter().filter(|r| r.publication.class() == "job_status").count());

    // A queue of one, offered faster than it drains: what does not fit is refused and
    // counted, and its acknowledgement comes back to the caller.
    let store = Store::open(&dir, options(&[])).expect("reopens");
    let history = History::start(store, 1);
    let mut refused = 0;
    for record in &all {
        if let Err(ack) = history.offer(record.clone(), Some(Box::new(|_| {}))) {
            assert!(ack.is_some(), "the acknowledgement comes back");
            refused += 1;
        }
    }
    assert!(refused > 0, "a queue of one cannot take 5,000 at once");
    let stats = history.stats();
    assert_eq!(stats.dropped, refused);
}

#[test]
fn a_query_through_the_writer_sees_everything_offered_before_it() {
    let dir = dir("writer-query");
    let all = records(3_000, 1_763_632_800_000, 9);
    let store = Store::open(&dir, options(&["appl"])).expect("opens");
    let mut history = History::start(store, 1_000_000);
    let sub: Arc<Subscription> = Arc::new("[class,eq,'job_status']".parse().expect("valid"));
    let (tx, rx) = mpsc::channel();
    let mut expected = Vec::new();
    for (round, chunk) in all.chunks(1_000).enumerate() {
        for record in chunk {
            assert!(history.offer(record.clone(), None).is_ok(), "room");
        }
        let offered = all[..(round + 1) * 1_000].iter().filter(|r| r.publication.class() == "job_status");
        expected.push(offered.count());
        let tx = tx.clone();
        history.query(sub.clone(), usize::MAX, Box::new(move |answer| drop(tx.send((round, answer)))));
    }
    drop(tx);
    let mut answers: Vec<(usize, usize)> =
        rx.iter().map(|(round, answer)| (round, answer.expect("answered").len())).collect();
    answers.sort_unstable();
    assert_eq!(answers.len(), 3);
    // Each sees everything offered before it; the reader thread may run after the writer
    // has committed the next round too, so it may see more (never what was not offered).
    let all_job_statuses = expected[2];
    for ((round, seen), before) in answers.into_iter().zip(expected) {
        assert!(
            (before..=all_job_statuses).contains(&seen),
            "round {round}: {seen} seen, {before} offered before"
        );
    }
    history.close();
    // A closed store answers at once, with an error.
    let (tx, rx) = mpsc::channel();
    history.query(sub, 10, Box::new(move |answer| drop(tx.send(answer))));
    assert!(rx.recv().expect("answered").is_err());
}

#[test]
fn a_store_damaged_after_a_broker_died_with_it_open_is_refused_at_start() {
    let dir = dir("damaged");
    let clean = dir.join(padres_broker::history::CLEAN);
    let mut store = Store::open(&dir, options(&["appl"])).expect("opens");
    store.insert(&records(2_000, 1_763_632_800_000, 4)).expect("stored");
    assert!(!clean.exists(), "open: not marked closed normally");
    drop(store);
    assert!(clean.exists(), "closed normally");
    // As a broker that died with the store open leaves it: no marker. And its second page
    // (the table's root) overwritten.
    std::fs::remove_file(&clean).expect("removed");
    let path = dir.join(padres_broker::history::FILE);
    let mut bytes = std::fs::read(&path).expect("read");
    bytes[16_384..16_384 + 4_096].fill(0xa5);
    std::fs::write(&path, bytes).expect("written");
    let err = Store::open(&dir, options(&["appl"])).expect_err("damaged");
    assert!(matches!(err, HistoryError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("history.sqlite"), "{err}");
    // A reader that checks refuses it too; one asked not to (`padres-broker history`
    // without --check) opens it, and the query that reads the damaged page fails.
    assert!(Reader::open(&dir).is_err(), "checked at open");
    let reader = Reader::open_with(&dir, false).expect("the header is sound");
    let sub: Subscription = "[class,eq,'job_status']".parse().expect("valid");
    assert!(reader.query(&sub, 10_000).is_err(), "the damage shows when it is read");
}

#[test]
fn a_store_written_before_the_row_count_was_kept_is_counted_once_at_open() {
    let dir = dir("version-1");
    let mut store = Store::open(&dir, options(&[])).expect("opens");
    store.insert(&records(250, 1_763_632_800_000, 2)).expect("stored");
    drop(store);
    // As a version-1 store is: no `meta` table.
    let conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
    conn.execute_batch("DROP TABLE meta; PRAGMA user_version = 1;").expect("made version 1");
    drop(conn);
    let mut store = Store::open(&dir, options(&[])).expect("opens a version-1 store");
    assert_eq!(store.rows().expect("rows"), 250);
    store.insert(&records(50, 1_763_632_900_000, 3)).expect("stored");
    drop(store);
    assert_eq!(Store::open(&dir, options(&[])).expect("reopens").rows().expect("rows"), 300);
}

#[test]
fn a_publication_that_cannot_be_stored_is_not_acknowledged_as_stored() {
    let dir = dir("unstorable");
    let store = Store::open(&dir, options(&[])).expect("opened");
    let origin = Name::new("B1").expect("name");
    let record = |seq: u64, publication: Publication| Record {
        stamp: Stamp::new(1_000 + seq, origin.clone(), seq),
        publication: Arc::new(publication.with_time(Timestamp::from_millis(1_000).expect("in range"))),
    };
    let small: Publication = "[class,'blob'],[n,1]".parse().expect("valid");
    // A frame over the 64 MiB ceiling, however it got here.
    let huge = small.clone().with_payload(vec![0_u8; padres_lang::wire::codec::MAX_FRAME_CEILING]);
    let history = History::start(store, 16);
    let (tx, rx) = mpsc::channel();
    for (seq, p) in [(0, huge), (1, small)] {
        let tx = tx.clone();
        let queued = history.offer(record(seq, p), Some(Box::new(move |r| drop(tx.send((seq, r))))));
        assert!(queued.is_ok(), "queued");
    }
    let mut answers: Vec<(u64, Result<(), String>)> = rx.iter().take(2).collect();
    answers.sort_by_key(|(seq, _)| *seq);
    assert!(answers[0].1.as_ref().is_err_and(|e| e.contains("not stored")), "{answers:?}");
    assert_eq!(answers[1].1, Ok(()));
    let stats = history.stats();
    assert_eq!((stats.stored, stats.failed), (1, 1), "{stats:?}");
}

#[test]
fn damage_a_query_meets_makes_the_next_broker_check_the_store_whole() {
    use std::io::{Seek, SeekFrom, Write};
    let dir = dir("damaged-read");
    let mut store = Store::open(&dir, options(&[])).expect("opens");
    store.insert(&records(5_000, 1_763_632_800_000, 11)).expect("stored");
    drop(store);
    assert!(dir.join("history.clean").exists(), "closed normally");
    let store = Store::open(&dir, options(&[])).expect("reopens");
    // The middle half of the file overwritten while the broker holds it.
    let path = dir.join("history.sqlite");
    let len = std::fs::metadata(&path).expect("a file").len();
    let mut file = std::fs::OpenOptions::new().write(true).open(&path).expect("opens");
    file.seek(SeekFrom::Start(len / 4)).expect("seeks");
    file.write_all(&vec![0x42; usize::try_from(len / 2).expect("small")]).expect("written");
    drop(file);
    let mut history = History::start(store, 16);
    let (tx, rx) = mpsc::channel();
    let sub: Arc<Subscription> = Arc::new("[class,eq,'job_status']".parse().expect("valid"));
    history.query(sub, usize::MAX, Box::new(move |answer| drop(tx.send(answer))));
    let answer = rx.recv().expect("answered");
    assert!(answer.is_err(), "the query meets the damage");
    history.close();
    assert!(!dir.join("history.clean").exists(), "the next broker checks it whole");
}

#[test]
fn out_of_order_times_and_limits_select_what_the_reference_selects() {
    let dir = dir("shuffled");
    let origin = Name::new("B2").expect("name");
    let start = 1_763_632_800_000_i64;
    let mut rng = fastrand::Rng::with_seed(31);
    // Times jittered by minutes around a slow clock, a few far in the past or future,
    // stored in batches of random sizes: blocks overlap in time and cut on their span.
    let all: Vec<Record> = (0..3_000_u64)
        .map(|i| {
            let base = start + i64::try_from(i).expect("small") * 200;
            let at = match rng.u8(..50) {
                0 => base - 86_400_000,
                1 => base + 3_600_000,
                _ => base + rng.i64(-180_000..180_000),
            };
            let class = if rng.u8(..4) == 0 { "trigger" } else { "job_status" };
            let p: Publication =
                format!("[class,'{class}'],[appl,'app{}'],[n,{i}]", rng.u8(..3)).parse().expect("valid");
            let time = Timestamp::from_millis(at).expect("in range");
            Record {
                stamp: Stamp::new(u64::try_from(at).expect("fits"), origin.clone(), i),
                publication: Arc::new(p.with_time(time)),
            }
        })
        .collect();
    let mut store = Store::open(&dir, options(&["appl"])).expect("opens");
    let mut at = 0;
    while at < all.len() {
        let n = rng.usize(1..700).min(all.len() - at);
        store.insert(&all[at..at + n]).expect("stored");
        at += n;
    }
    let reader = Reader::open(&dir).expect("opens");
    let when = |ms: i64| Timestamp::from_millis(ms).expect("in range").to_rfc3339();
    for round in 0..60 {
        let from = start + rng.i64(-90_000_000..700_000);
        let to = from + rng.i64(0..400_000);
        let appl = if rng.bool() { format!(",[appl,eq,'app{}']", rng.u8(..3)) } else { String::new() };
        let class = if rng.u8(..4) == 0 { "trigger" } else { "job_status" };
        let text = match round % 3 {
            0 => format!("[class,eq,'{class}']{appl},[time,>=,{}],[time,<=,{}]", when(from), when(to)),
            1 => format!("[class,eq,'{class}']{appl},[time,>,{}]", when(from)),
            _ => format!("[class,eq,'{class}']{appl},[time,<,{}]", when(to)),
        };
        let sub: Subscription = text.parse().expect("valid");
        let expected = reference(&all, &sub);
        let got = texts(&reader.query(&sub, usize::MAX).expect("query"));
        assert_eq!(got, expected, "{text}");
        let limit = rng.usize(1..40);
        let got = texts(&reader.query(&sub, limit).expect("query"));
        assert_eq!(got, expected[..expected.len().min(limit)], "{text}, limit {limit}");
    }
}

/// Writes `records` as a store of schema 2 kept them, one row per publication, with the
/// key columns `indexed` (what brokers before blocks left on disk).
fn write_schema_2(dir: &std::path::Path, records: &[Record], indexed: &[&str]) {
    std::fs::create_dir_all(dir).expect("dir");
    let conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
    conn.execute_batch(
        "CREATE TABLE publications (row INTEGER PRIMARY KEY, time INTEGER NOT NULL, class TEXT NOT NULL,
             stamp_time INTEGER NOT NULL, origin TEXT NOT NULL, seq INTEGER NOT NULL, bytes BLOB NOT NULL);
         CREATE INDEX publications_by_class_time ON publications (class, time);
         CREATE TABLE key_columns (column INTEGER PRIMARY KEY, attr TEXT NOT NULL UNIQUE);
         CREATE TABLE meta (rows INTEGER NOT NULL);
         PRAGMA user_version = 2;",
    )
    .expect("schema 2");
    for (column, attr) in indexed.iter().enumerate() {
        conn.execute("INSERT INTO key_columns (column, attr) VALUES (?1, ?2)", (column, attr))
            .expect("column");
        conn.execute_batch(&format!(
            "ALTER TABLE publications ADD COLUMN k{column};
             CREATE INDEX publications_by_k{column} ON publications (class, k{column}, time);"
        ))
        .expect("key column");
    }
    conn.execute_batch("BEGIN").expect("a transaction");
    for r in records {
        let mut bytes = Vec::new();
        padres_broker::history::encode(&r.publication, &mut bytes).expect("encodes");
        let time = r.publication.time().expect("timed").millis();
        conn.execute(
            "INSERT INTO publications (time, class, stamp_time, origin, seq, bytes) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            rusqlite::params![
                time,
                r.publication.class(),
                i64::try_from(r.stamp.time).expect("fits"),
                r.stamp.origin.as_str(),
                i64::try_from(r.stamp.seq).expect("fits"),
                bytes
            ],
        )
        .expect("row");
    }
    conn.execute("INSERT INTO meta (rows) VALUES (?1)", [i64::try_from(records.len()).expect("fits")])
        .expect("count");
    conn.execute_batch("COMMIT").expect("committed");
}

#[test]
fn a_store_of_one_row_per_publication_is_moved_into_blocks_when_a_broker_opens_it() {
    let dir = dir("schema-2");
    let all: Vec<Record> = records(2_500, 1_763_632_800_000, 13)
        .into_iter()
        .map(|r| {
            let at = Timestamp::from_millis(i64::try_from(r.stamp.time).expect("fits")).expect("in range");
            Record { publication: Arc::new(r.publication.as_ref().clone().with_time(at)), stamp: r.stamp }
        })
        .collect();
    write_schema_2(&dir, &all, &["appl"]);
    assert!(Reader::open(&dir).is_err(), "a reader does not read the old layout");
    // Opened for writing, with one more attribute indexed: every row is moved and both
    // attributes narrow queries.
    let store = Store::open(&dir, options(&["appl", "gid"])).expect("opens a schema-2 store");
    assert_eq!(store.rows().expect("rows"), 2_500);
    drop(store);
    let conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
    let old: i64 = conn
        .query_row("SELECT COUNT(*) FROM sqlite_master WHERE name LIKE 'publications%'", [], |r| r.get(0))
        .expect("counted");
    assert_eq!(old, 0, "the old table and its indexes are gone");
    drop(conn);
    let reader = Reader::open(&dir).expect("opens");
    for text in [
        "[class,eq,'job_status']",
        "[class,eq,'job_status'],[appl,eq,'app1']",
        "[class,eq,'job_status'],[gid,eq,'g2']",
        "[class,eq,'trigger'],[appl,eq,'app3'],[gid,eq,'g0']",
    ] {
        let sub: Subscription = text.parse().expect("valid");
        let got = texts(&reader.query(&sub, usize::MAX).expect("query"));
        assert_eq!(got, reference(&all, &sub), "{text}");
    }
    assert_eq!(Store::open(&dir, options(&["appl"])).expect("reopens").rows().expect("rows"), 2_500);
}

/// `n` job statuses a second apart from `start`, their applications taking turns, in one
/// batch: a block grouped by application holds them out of time order.
fn interleaved(n: u64, start: i64, extra: impl Fn(u64) -> String) -> Vec<Record> {
    let origin = Name::new("B1").expect("name");
    (0..n)
        .map(|i| {
            let at = start + i64::try_from(i).expect("small") * 1000;
            let p: Publication = format!("[class,'job_status'],[appl,'app{}'],[n,{i}]{}", i % 4, extra(i))
                .parse()
                .expect("valid");
            Record {
                stamp: Stamp::new(u64::try_from(at).expect("fits"), origin.clone(), i),
                publication: Arc::new(p.with_time(Timestamp::from_millis(at).expect("in range"))),
            }
        })
        .collect()
}

fn numbers(stored: &[padres_lang::Stamped]) -> Vec<i64> {
    let mut n: Vec<i64> = stored
        .iter()
        .map(|s| match s.publication.get("n") {
            Some(Value::Int(n)) => *n,
            other => panic!("{other:?}"),
        })
        .collect();
    n.sort_unstable();
    n
}

#[test]
fn max_rows_removes_the_oldest_by_time_from_a_block_grouped_by_an_indexed_attribute() {
    let dir = dir("rows-by-time");
    let all = interleaved(40, 1_763_632_800_000, |_| String::new());
    let mut store =
        Store::open(&dir, StoreOptions { max_rows: Some(25), ..options(&["appl"]) }).expect("opens");
    store.insert(&all).expect("stored");
    assert_eq!(store.apply_retention(0).expect("retention"), 15);
    let left = store.query(&"[class,eq,'job_status']".parse().expect("valid"), usize::MAX).expect("query");
    assert_eq!(numbers(&left), (15..40).collect::<Vec<i64>>(), "the newest 25 are left");
}

#[test]
fn numbers_equal_across_kinds_in_an_indexed_attribute_are_stored() {
    let (dir, dir2) = (dir("numeric-keys"), dir("numeric-keys-later"));
    // 3 and 3.0, 0.0 and -0.0: SQLite holds them equal.
    let values = ["3", "3.0", "0.0", "-0.0", "'3'"];
    let all = interleaved(10, 1_763_632_800_000, |i| format!(",[gid,{}]", values[i as usize % values.len()]));
    let mut store = Store::open(&dir, options(&["gid", "appl"])).expect("opens");
    store.insert(&all).expect("stored in one batch");
    let sub: Subscription = "[class,eq,'job_status'],[gid,eq,'3']".parse().expect("valid");
    assert_eq!(numbers(&store.query(&sub, usize::MAX).expect("query")), [4, 9]);
    drop(store);
    // Declared later, over what is stored: the same.
    let mut store = Store::open(&dir2, options(&["appl"])).expect("opens");
    store.insert(&all).expect("stored");
    drop(store);
    let store = Store::open(&dir2, options(&["appl", "gid"])).expect("indexes gid at open");
    assert_eq!(numbers(&store.query(&sub, usize::MAX).expect("query")), [4, 9]);
}

#[test]
fn retention_goes_on_past_a_block_that_does_not_decode() {
    let dir = dir("retention-damaged-block");
    let now = 1_763_632_800_000_i64;
    // Two batches: the older block, across the age cutoff (so retention must read it to
    // keep its newer part), is damaged afterwards.
    let old = interleaved(20, now - 70_000, |_| String::new());
    let new = interleaved(20, now - 10_000, |i| format!(",[m,{i}]"));
    let mut store =
        Store::open(&dir, StoreOptions { max_age_ms: Some(60_000), ..options(&["appl"]) }).expect("opens");
    store.insert(&old).expect("stored");
    store.insert(&new).expect("stored");
    drop(store);
    let conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
    let damaged = conn
        .execute("UPDATE blocks SET bytes = x'01ffff' WHERE first_time < ?1", [now - 65_000])
        .expect("damaged");
    assert!(damaged > 0);
    drop(conn);
    let mut store =
        Store::open(&dir, StoreOptions { max_age_ms: Some(60_000), ..options(&["appl"]) }).expect("reopens");
    assert_eq!(store.apply_retention(u64::try_from(now).expect("fits")).expect("retention"), 20);
    assert_eq!(store.rows().expect("rows"), 20);
    let left = store.query(&"[class,eq,'job_status']".parse().expect("valid"), usize::MAX).expect("query");
    assert_eq!(left.len(), 20);
}

#[test]
fn a_row_that_does_not_decode_is_left_behind_when_an_old_store_is_moved_into_blocks() {
    let dir = dir("schema-2-bad-row");
    let all: Vec<Record> = interleaved(30, 1_763_632_800_000, |_| String::new());
    write_schema_2(&dir, &all, &[]);
    let conn = rusqlite::Connection::open(dir.join(padres_broker::history::FILE)).expect("opens");
    conn.execute("UPDATE publications SET bytes = x'00000005ffff' WHERE row = 7", []).expect("damaged");
    drop(conn);
    let store = Store::open(&dir, options(&[])).expect("opens, moving what decodes");
    assert_eq!(store.rows().expect("rows"), 29);
    let left = store.query(&"[class,eq,'job_status']".parse().expect("valid"), usize::MAX).expect("query");
    assert_eq!(numbers(&left), (0..30).filter(|&n| n != 6).collect::<Vec<i64>>());
}
