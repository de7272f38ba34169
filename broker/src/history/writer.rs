//! The writer thread: the only user of a broker's [`Store`] for writing.
//!
//! The router task offers each publication to store with [`History::offer`], which never
//! blocks: a bounded queue sits between the two, and a publication that finds it full is
//! refused there and counted (`dropped`), so routing never waits on the disk. The thread
//! takes everything queued (up to [`MAX_BATCH`]) into one transaction, commits it, then
//! calls the acknowledgements waiting on that batch (with `full` durability each commit is
//! synced first). A batch that nobody waits for (no acknowledgement, no query) is given
//! up to [`GATHER`] from its first publication to fill before it is written: a transaction
//! writes every page it touched whole, so a few rows cost nearly what hundreds do (at a
//! steady 20,000 publications/s the writer took about 13.5 µs of CPU per row committing
//! what it found, against 7.4–9.2 µs gathering for 20 ms; BENCHMARKS.md). It looks every
//! millisecond for an acknowledgement or a query, which end the wait. Every second it
//! applies the retention settings. A query waits in the same queue until everything
//! offered before it is committed, then goes to a reader thread with a connection of its
//! own (WAL lets it read while the writer writes), so a query that reads much does not
//! hold up ingest. An acknowledgement or answer that the
//! threads drop unanswered (they stopped, or panicked) answers with an error as it goes:
//! no publisher or query waits for ever.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{
    Receiver, RecvTimeoutError, Sender, SyncSender, TryRecvError, TrySendError, channel, sync_channel,
};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use padres_lang::{Stamped, Subscription};

use super::{Durability, Reader, Record, Store, StoreOptions};

/// Most publications written in one transaction.
pub const MAX_BATCH: usize = 8192;
/// How long a batch that nobody waits for gathers publications before it is written.
pub const GATHER: Duration = Duration::from_millis(20);
/// How often a gathering batch looks for what ends the wait.
const GATHER_CHECK: Duration = Duration::from_millis(1);
/// How often retention runs.
const RETENTION_EVERY: Duration = Duration::from_secs(1);

/// A callback given its result once.
pub type Callback<T> = Box<dyn FnOnce(Result<T, String>) + Send>;

/// Called once a publication is stored (`Ok`) or could not be (`Err` with why).
pub type Ack = Callback<()>;

/// Called with a query's answer: the stored publications it selects, in time order.
pub type Answer = Callback<Vec<Stamped>>;

/// A callback that answers with an error if it is dropped without being called.
struct Owed<T: 'static>(Option<Callback<T>>);

impl<T: 'static> Owed<T> {
    fn new(callback: Callback<T>) -> Self {
        Self(Some(callback))
    }

    fn answer(mut self, result: Result<T, String>) {
        if let Some(callback) = self.0.take() {
            callback(result);
        }
    }

    /// The callback back, not called.
    fn take(mut self) -> Option<Callback<T>> {
        self.0.take()
    }
}

impl<T: 'static> Drop for Owed<T> {
    fn drop(&mut self) {
        if let Some(callback) = self.0.take() {
            callback(Err("the history store stopped before it could answer".to_owned()));
        }
    }
}

enum Job {
    Store {
        record: Record,
        ack: Option<Owed<()>>,
    },
    /// Answered once everything queued before it is committed.
    Query {
        sub: Arc<Subscription>,
        limit: usize,
        answer: Owed<Vec<Stamped>>,
    },
}

/// What the writer has done, for `broker stats`.
#[derive(Debug, Default)]
struct Counters {
    stored: AtomicU64,
    dropped: AtomicU64,
    failed: AtomicU64,
    removed: AtomicU64,
    queued: AtomicU64,
    rows: AtomicU64,
}

/// A snapshot of the writer's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HistoryStats {
    /// Publications committed.
    pub stored: u64,
    /// Publications refused because the queue was full.
    pub dropped: u64,
    /// Publications whose transaction failed.
    pub failed: u64,
    /// Rows deleted by retention.
    pub removed: u64,
    /// Publications queued and not yet committed.
    pub queued: u64,
    /// Rows in the store at the last retention pass.
    pub rows: u64,
}

/// A running writer thread and the queue to it.
#[derive(Debug)]
pub struct History {
    tx: Option<SyncSender<Job>>,
    counters: Arc<Counters>,
    durability: Durability,
    /// The store's file and settings, as opened.
    path: PathBuf,
    options: StoreOptions,
    thread: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Job {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Store { record, ack } => {
                f.debug_struct("Store").field("stamp", &record.stamp).field("ack", &ack.is_some()).finish()
            }
            Self::Query { sub, limit, .. } => {
                f.debug_struct("Query").field("sub", sub).field("limit", limit).finish()
            }
        }
    }
}

impl History {
    /// Starts the writer thread on `store`, with room for `queue` publications waiting.
    pub fn start(store: Store, queue: usize) -> Self {
        let (tx, rx) = sync_channel(queue.max(1));
        let counters = Arc::new(Counters::default());
        let durability = store.options().durability;
        let (path, options) = (store.path().to_path_buf(), store.options().clone());
        let thread_counters = counters.clone();
        let dir = store.path().parent().map(PathBuf::from).unwrap_or_default();
        let (queries, asked) = channel();
        let damage = store.damage_flag();
        let reader = std::thread::Builder::new()
            .name("history-reader".to_owned())
            .spawn(move || read_loop(&dir, &asked, &damage))
            .expect("a thread can be started");
        let thread = std::thread::Builder::new()
            .name("history-writer".to_owned())
            .spawn(move || {
                write_loop(store, &rx, &thread_counters, &queries);
                // The reader answers what it was given, then ends.
                drop(queries);
                if reader.join().is_err() {
                    tracing::error!("the history reader thread panicked");
                }
            })
            .expect("a thread can be started");
        Self { tx: Some(tx), counters, durability, path, options, thread: Some(thread) }
    }

    /// The store's durability setting.
    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// The store's database file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// How the store is kept.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Queues `record`; `ack` is called once it is committed. When the queue is full the
    /// publication is refused at once (and counted): the `ack` comes back.
    pub fn offer(&self, record: Record, ack: Option<Ack>) -> Result<(), Option<Ack>> {
        let Some(tx) = &self.tx else { return Err(ack) };
        self.counters.queued.fetch_add(1, Ordering::Relaxed);
        match tx.try_send(Job::Store { record, ack: ack.map(Owed::new) }) {
            Ok(()) => Ok(()),
            Err(TrySendError::Full(job) | TrySendError::Disconnected(job)) => {
                self.counters.queued.fetch_sub(1, Ordering::Relaxed);
                self.counters.dropped.fetch_add(1, Ordering::Relaxed);
                match job {
                    Job::Store { ack, .. } => Err(ack.and_then(Owed::take)),
                    Job::Query { .. } => Err(None),
                }
            }
        }
    }

    /// Asks what the store holds that `sub` selects (at most `limit`), answered once the
    /// publications offered before are committed. A full queue answers at once, with an
    /// error.
    pub fn query(&self, sub: Arc<Subscription>, limit: usize, answer: Answer) {
        let Some(tx) = &self.tx else {
            return answer(Err("the history store is closed".to_owned()));
        };
        if let Err(
            TrySendError::Full(Job::Query { answer, .. })
            | TrySendError::Disconnected(Job::Query { answer, .. }),
        ) = tx.try_send(Job::Query { sub, limit, answer: Owed::new(answer) })
        {
            answer.answer(Err("the history store's queue is full".to_owned()));
        }
    }

    /// The counters now.
    pub fn stats(&self) -> HistoryStats {
        let c = &self.counters;
        HistoryStats {
            stored: c.stored.load(Ordering::Relaxed),
            dropped: c.dropped.load(Ordering::Relaxed),
            failed: c.failed.load(Ordering::Relaxed),
            removed: c.removed.load(Ordering::Relaxed),
            queued: c.queued.load(Ordering::Relaxed),
            rows: c.rows.load(Ordering::Relaxed),
        }
    }

    /// Writes what is queued, then stops the thread (and releases the store).
    pub fn close(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take()
            && thread.join().is_err()
        {
            tracing::error!("the history writer thread panicked");
        }
    }
}

impl Drop for History {
    fn drop(&mut self) {
        self.close();
    }
}

/// Writes `records` in one transaction and answers their acknowledgements.
fn commit(
    store: &mut Store,
    records: &mut Vec<Record>,
    acks: &mut Vec<Option<Owed<()>>>,
    counters: &Counters,
) {
    if records.is_empty() {
        return;
    }
    let n = records.len() as u64;
    let result = store.insert(records).map_err(|e| e.to_string());
    records.clear();
    let refused = match &result {
        Ok(refused) => {
            let bad = refused.len() as u64;
            counters.stored.fetch_add(n - bad, Ordering::Relaxed);
            counters.failed.fetch_add(bad, Ordering::Relaxed);
            refused.as_slice()
        }
        Err(e) => {
            tracing::error!(error = %e, publications = n, "history store: a batch was not written");
            counters.failed.fetch_add(n, Ordering::Relaxed);
            &[]
        }
    };
    counters.queued.fetch_sub(n, Ordering::Relaxed);
    for (at, ack) in acks.drain(..).enumerate() {
        let Some(ack) = ack else { continue };
        let answer = match &result {
            Ok(_) if refused.contains(&at) => Err("over the frame ceiling: not stored".to_owned()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.clone()),
        };
        ack.answer(answer);
    }
}

fn epoch_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A query for the reader thread.
type Asked = (Arc<Subscription>, usize, Owed<Vec<Stamped>>);

/// Answers queries on a connection of its own until the writer stops.
fn read_loop(dir: &Path, asked: &Receiver<Asked>, damage: &std::sync::atomic::AtomicBool) {
    let mut reader: Option<Reader> = None;
    while let Ok((sub, limit, answer)) = asked.recv() {
        if reader.is_none() {
            match Reader::open_with(dir, false) {
                Ok(opened) => reader = Some(opened),
                Err(e) => {
                    answer.answer(Err(e.to_string()));
                    continue;
                }
            }
        }
        let result = reader.as_ref().expect("opened above").query(&sub, limit);
        super::note_damage(&result, damage);
        answer.answer(result.map_err(|e| e.to_string()));
    }
}

fn write_loop(mut store: Store, rx: &Receiver<Job>, counters: &Counters, queries: &Sender<Asked>) {
    let mut last_retention: Option<Instant> = None;
    let mut batch: Vec<Job> = Vec::with_capacity(MAX_BATCH);
    let mut records: Vec<Record> = Vec::with_capacity(MAX_BATCH);
    loop {
        match rx.recv_timeout(RETENTION_EVERY) {
            Ok(job) => batch.push(job),
            Err(RecvTimeoutError::Timeout) => {}
            Err(RecvTimeoutError::Disconnected) => break,
        }
        // Gathers until the batch is full, `GATHER` has passed, someone waits for it, or
        // the broker is closing.
        let waited_for = |job: &Job| matches!(job, Job::Query { .. } | Job::Store { ack: Some(_), .. });
        let started = Instant::now();
        let mut waited = batch.iter().any(waited_for);
        loop {
            let mut closing = false;
            while batch.len() < MAX_BATCH {
                match rx.try_recv() {
                    Ok(job) => {
                        waited |= waited_for(&job);
                        batch.push(job);
                    }
                    Err(TryRecvError::Empty) => break,
                    Err(TryRecvError::Disconnected) => {
                        closing = true;
                        break;
                    }
                }
            }
            let gathered = started.elapsed();
            if batch.is_empty() || batch.len() >= MAX_BATCH || gathered >= GATHER || waited || closing {
                break;
            }
            std::thread::sleep((GATHER - gathered).min(GATHER_CHECK));
        }
        // Stores up to each query are committed before it runs, so that it sees them.
        let mut acks: Vec<Option<Owed<()>>> = Vec::new();
        for job in batch.drain(..) {
            match job {
                Job::Store { record, ack } => {
                    records.push(record);
                    acks.push(ack);
                }
                Job::Query { sub, limit, answer } => {
                    // Committed first, so that the reader sees it. A reader that is gone
                    // drops the answer, which then says so.
                    commit(&mut store, &mut records, &mut acks, counters);
                    let _ = queries.send((sub, limit, answer));
                }
            }
        }
        commit(&mut store, &mut records, &mut acks, counters);
        if last_retention.is_none_or(|at| at.elapsed() >= RETENTION_EVERY) {
            last_retention = Some(Instant::now());
            match store.apply_retention(epoch_millis()) {
                Ok(removed) => {
                    counters.removed.fetch_add(removed, Ordering::Relaxed);
                }
                Err(e) => tracing::error!(error = %e, "history store: retention failed"),
            }
            if let Ok(rows) = store.rows() {
                counters.rows.store(rows, Ordering::Relaxed);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_callback_dropped_unanswered_answers_with_an_error() {
        let (tx, rx) = channel();
        let sent = tx.clone();
        drop(Owed::<()>::new(Box::new(move |r| drop(sent.send(r)))));
        assert!(rx.recv().expect("answered").is_err());
        let owed = Owed::<()>::new(Box::new(move |r| drop(tx.send(r))));
        owed.answer(Ok(()));
        assert_eq!(rx.iter().collect::<Vec<_>>(), [Ok(())], "answered once");
    }
}
