//! The history store: this broker's SQLite database of publications.
//!
//! A broker configured with history filters (`[[history]]` in its configuration, or
//! `--history FILTER`) keeps every publication that reaches it and matches one of them. The
//! router treats the store as one more hop ([`Hop::History`](crate::router::Hop::History)):
//! the filters are ordinary subscriptions of that hop, so the publications they select are
//! routed here from anywhere in the federation, and each one that arrives is handed to the
//! shell as an [`Output::Store`](crate::router::Output::Store).
//!
//! - **Blocks** ([`block`]): a batch's publications are sorted by class, by the value of
//!   the first declared indexed attribute, and by `time`, and written as blocks of up to
//!   128 of one class whose times lie within 60 s, one SQLite
//!   row each (class, first and last `time`, count, the publications' wire bytes, `time`s
//!   and stamps): SQLite's cost is per row and per index entry, so a block costs far less
//!   per publication than a row each (BENCHMARKS.md). `blocks` is indexed on (class, first time); `block_keys`
//!   holds, for each attribute the configuration declares as indexed (`index = ["appl",
//!   "gid"]`), each distinct string value a block holds (class, attribute, value, first time,
//!   block), and the block's row keeps the same list so that its entries can be removed
//!   without decoding it. A query finds the blocks that may hold what it selects (by class,
//!   a time range widened by the 60 s span, and an `eq` on a declared attribute), reads the
//!   publications within its range, and checks each with the reference
//!   [`matches`](padres_lang::matches), so stored and live matching can never disagree.
//!   Results come back in `time` order (ties by stamp).
//! - **Writes** happen on a thread of their own ([`writer`]): batched transactions with a
//!   prepared statement, WAL journal. Routing never waits on the disk: the router task
//!   offers each publication to a bounded queue, and a publication that finds it full is
//!   counted (`history_dropped` in `broker stats`) and logged, never silently lost.
//! - **Durability** ([`Durability`]): `full` syncs each batch to disk before it is
//!   acknowledged: a publication acknowledged through `publish_acked` at a storing broker
//!   is on disk. `normal` acknowledges when the publication is queued; a process crash
//!   loses what was queued and not yet committed (at most the queue, typically one batch:
//!   milliseconds), and with WAL's `synchronous = NORMAL` a power failure may also lose the
//!   last transactions committed before it.
//! - **Retention**: publications older than `max_age` (by their `time`; a block across the
//!   cutoff is rewritten with the rest), the oldest stored beyond `max_rows` (blocks in the
//!   order written, within a block by `time`), and the oldest blocks while the pages in use
//!   pass `max_bytes` are deleted, checked every second by the writer.
//! - **Older stores**: one written one row per publication (schema 1 and 2) is moved into
//!   blocks when a broker opens it for writing, a transaction per 10,000 rows.
//! - **Errors at start**: a file that is not a database or fails SQLite's integrity check
//!   (run when the last broker to hold the store did not close it normally: a marker file
//!   says it did), or a store another process holds (a lock file beside it), stops the
//!   broker from starting, with the path and the reason.

pub mod block;
pub mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use block::{Builder, Entry, Fill, Key};
use padres_lang::predicate::{Op, Operand};
use padres_lang::time::TIME;
use padres_lang::wire::Frame;
use padres_lang::wire::codec;
use padres_lang::{Name, Number, Publication, Stamp, Stamped, Subscription, Value, matches};
use rusqlite::{Connection, OpenFlags, OptionalExtension};
use serde::{Deserialize, Serialize};

/// The database's file name in the broker's data directory.
pub const FILE: &str = "history.sqlite";
/// The lock file beside it, held by the broker that writes the store.
pub const LOCK: &str = "history.lock";
/// Beside it while no broker has it open, if the last one closed it normally.
pub const CLEAN: &str = "history.clean";
/// The schema this code writes (kept in the database's `user_version`). 2 added `meta`
/// (the row count); 3 keeps publications in blocks instead of a row each. A store of an
/// earlier version is brought up to date when a broker opens it for writing.
const SCHEMA: i64 = 3;
/// Publications removed per retention step, and old rows moved into blocks per step.
const CHUNK_ROWS: u64 = 10_000;
/// Blocks read per step by retention and by indexing what was stored before.
const CHUNK_BLOCKS: usize = 64;
/// Rows deleted per retention pass at most.
const DELETE_PER_PASS: u64 = 200_000;

/// When an acknowledged publication is safe (see the module docs).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Durability {
    /// Each batch is synced to disk before its publications are acknowledged.
    Full,
    /// Acknowledged when queued; WAL with `synchronous = NORMAL`.
    #[default]
    Normal,
}

/// How a store is kept.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StoreOptions {
    /// When an acknowledged publication is on disk.
    pub durability: Durability,
    /// Attributes whose string values are indexed (each distinct value once per block).
    pub indexed: Vec<Name>,
    /// Rows whose `time` is older than this many milliseconds are deleted.
    pub max_age_ms: Option<u64>,
    /// At most this many rows are kept (the oldest stored go first).
    pub max_rows: Option<u64>,
    /// The database's pages in use are kept under this many bytes (the oldest stored go
    /// first).
    pub max_bytes: Option<u64>,
}

/// Why a store cannot be opened or used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HistoryError {
    /// The file is not a usable database.
    #[error(
        "history store {path}: {message} (move the file away to start with an empty store, or restore it from a backup)"
    )]
    Corrupt {
        /// The database file.
        path: PathBuf,
        /// What SQLite or the check said.
        message: String,
    },
    /// Another process holds the store.
    #[error("history store {path} is in use by another broker process (it holds {lock})")]
    Locked {
        /// The database file.
        path: PathBuf,
        /// The lock file.
        lock: PathBuf,
    },
    /// A file could not be created or opened.
    #[error("history store {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The database could not be opened or read for a reason other than damage.
    #[error("history store {path}: {message}")]
    Open {
        /// The database file.
        path: PathBuf,
        /// What SQLite said.
        message: String,
    },
    /// SQLite failed.
    #[error("history store: {0}")]
    Sql(#[from] rusqlite::Error),
}

/// Sets `flag` if `result` is an error that says the file is damaged.
pub fn note_damage<T>(result: &Result<T, HistoryError>, flag: &AtomicBool) {
    if let Err(HistoryError::Sql(e)) = result
        && damaged(e)
    {
        flag.store(true, Ordering::Relaxed);
    }
}

/// Whether SQLite's error says the file is damaged (or not a database at all).
fn damaged(e: &rusqlite::Error) -> bool {
    matches!(
        e.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase)
    )
}

/// One publication to store.
#[derive(Clone, Debug)]
pub struct Record {
    /// Where and when it entered the federation.
    pub stamp: Stamp,
    /// The publication, with its `time`.
    pub publication: Arc<Publication>,
}

/// The store, open for writing (one per broker; see [`writer`] for the thread that uses it).
#[derive(Debug)]
pub struct Store {
    conn: Connection,
    path: PathBuf,
    /// Declared attributes, in the order declared (their position is their `col` in
    /// `block_keys`).
    columns: Vec<Name>,
    options: StoreOptions,
    /// Rows stored: counted once at open, then kept up to date (a count every second
    /// would read the whole table).
    rows: u64,
    /// Held while the store is open: a second broker on the same directory is refused.
    _lock: File,
    /// Clear once it has opened whole; set again when damage is met while it is open, by
    /// the writer or by a query on the reader's connection. Closing a store without it
    /// marks it closed normally, so that the next broker need not check it whole.
    damage: Arc<AtomicBool>,
}

/// Opens `path`, and with `check` runs SQLite's integrity check on it (which reads the
/// whole file).
fn open_checked(path: &Path, flags: OpenFlags, check: bool) -> Result<Connection, HistoryError> {
    let corrupt =
        |e: &dyn std::fmt::Display| HistoryError::Corrupt { path: path.to_owned(), message: e.to_string() };
    // Only damage is called damage: a file that cannot be opened (permissions, a missing
    // directory) or a database another program has locked is said as what it is.
    let failed = |e: rusqlite::Error| {
        if damaged(&e) {
            corrupt(&e)
        } else {
            HistoryError::Open { path: path.to_owned(), message: e.to_string() }
        }
    };
    let conn = Connection::open_with_flags(path, flags).map_err(failed)?;
    if check {
        let result: String = conn.query_row("PRAGMA quick_check", [], |r| r.get(0)).map_err(failed)?;
        if result != "ok" {
            return Err(corrupt(&format!("integrity check failed: {result}")));
        }
    }
    Ok(conn)
}

impl Drop for Store {
    /// Closed normally: the next broker to open the store need not check it whole (unless
    /// it did not open whole, or met damage while open).
    fn drop(&mut self) {
        if self.damage.load(Ordering::Relaxed) {
            return;
        }
        if let Some(dir) = self.path.parent()
            && let Err(e) = File::create(dir.join(CLEAN))
        {
            tracing::warn!(error = %e, "history store: could not mark it closed normally");
        }
    }
}

impl Store {
    /// Opens (or creates) the store in `dir`, taking its lock, creating the schema, moving
    /// the rows of a store written one row per publication (schema 1 and 2) into blocks, and
    /// indexing each newly declared attribute for the publications already stored.
    pub fn open(dir: &Path, options: StoreOptions) -> Result<Self, HistoryError> {
        std::fs::create_dir_all(dir).map_err(|source| HistoryError::Io { path: dir.to_owned(), source })?;
        let path = dir.join(FILE);
        let lock_path = dir.join(LOCK);
        let lock = File::create(&lock_path)
            .map_err(|source| HistoryError::Io { path: lock_path.clone(), source })?;
        match lock.try_lock() {
            Ok(()) => {}
            Err(std::fs::TryLockError::WouldBlock) => {
                return Err(HistoryError::Locked { path, lock: lock_path });
            }
            Err(std::fs::TryLockError::Error(source)) => {
                return Err(HistoryError::Io { path: lock_path, source });
            }
        }
        // SQLite's integrity check reads the whole file (1,000,000 job statuses: 166 MB, about
        // 2 s from a cold cache): it runs when the last broker to hold the store did not close it
        // normally (a crash, a kill, a power cut), and for a new store. After a normal close
        // only the header is read here; damage done to the file while no broker held it
        // shows when its pages are read (a failed write or query, logged and counted).
        let clean_path = dir.join(CLEAN);
        // No mutex per call: a connection is used by one thread at a time (rusqlite's
        // `Connection` is not `Sync`), and SQLite's serialized mode took a lock around
        // every bind and step (BENCHMARKS.md).
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = open_checked(&path, flags, !clean_path.exists())?;
        // Open from now on: a crash leaves no marker behind.
        if let Err(source) = std::fs::remove_file(&clean_path)
            && source.kind() != std::io::ErrorKind::NotFound
        {
            return Err(HistoryError::Io { path: clean_path, source });
        }
        let corrupt =
            |e: rusqlite::Error| HistoryError::Corrupt { path: path.clone(), message: e.to_string() };
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0)).map_err(corrupt)?;
        if version > SCHEMA {
            return Err(HistoryError::Corrupt {
                path,
                message: format!("schema version {version} is newer than this broker's ({SCHEMA})"),
            });
        }
        // 16 KiB pages for a new store (an existing one keeps its own): about 7% more rows
        // per second than the default 4 KiB, checkpointing the same bytes (BENCHMARKS.md).
        conn.pragma_update(None, "page_size", 16_384)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        let sync = match options.durability {
            Durability::Full => "FULL",
            Durability::Normal => "NORMAL",
        };
        conn.pragma_update(None, "synchronous", sync)?;
        // A larger cache and fewer, larger checkpoints (every 40 MB of journal): the
        // indexes' pages stay in memory between batches.
        conn.pragma_update(None, "cache_size", -65_536)?;
        let page: i64 = conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        conn.pragma_update(None, "wal_autocheckpoint", 40_960_000 / page.max(512))?;
        // `blocks` first: its root is the file's second page.
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS blocks (
                 row INTEGER PRIMARY KEY,
                 class TEXT NOT NULL,
                 first_time INTEGER NOT NULL,
                 last_time INTEGER NOT NULL,
                 count INTEGER NOT NULL,
                 bytes BLOB NOT NULL,
                 keys BLOB
             );
             CREATE INDEX IF NOT EXISTS blocks_by_class_time ON blocks (class, first_time);
             CREATE TABLE IF NOT EXISTS block_keys (
                 class TEXT NOT NULL,
                 col INTEGER NOT NULL,
                 value,
                 first_time INTEGER NOT NULL,
                 block INTEGER NOT NULL,
                 PRIMARY KEY (class, col, value, first_time, block)
             ) WITHOUT ROWID;
             CREATE TABLE IF NOT EXISTS key_columns (column INTEGER PRIMARY KEY, attr TEXT NOT NULL UNIQUE);
             CREATE TABLE IF NOT EXISTS meta (rows INTEGER NOT NULL);",
        )?;
        let rows_before = Self::old_rows(&conn)?;
        // The row count, kept in `meta` by every insert and delete: counting reads every
        // block's header, so it is done once, for a store written before `meta` was.
        let kept: Option<i64> = conn.query_row("SELECT rows FROM meta", [], |r| r.get(0)).optional()?;
        let rows = match kept {
            Some(rows) => rows,
            None => {
                let blocks: i64 =
                    conn.query_row("SELECT COALESCE(SUM(count), 0) FROM blocks", [], |r| r.get(0))?;
                let rows = blocks + rows_before.unwrap_or(0);
                conn.execute("INSERT INTO meta (rows) VALUES (?1)", [rows])?;
                rows
            }
        };
        let rows = u64::try_from(rows).unwrap_or(0);
        let damage = Arc::new(AtomicBool::new(true));
        let mut store = Self { conn, path, columns: Vec::new(), options, rows, _lock: lock, damage };
        // Blocks already written get the keys of newly declared attributes; rows moved
        // into blocks get every declared attribute's keys as they are written.
        store.declare_columns()?;
        if rows_before.is_some() {
            store.move_rows_into_blocks()?;
        }
        store.conn.pragma_update(None, "user_version", SCHEMA)?;
        store.damage.store(false, Ordering::Relaxed);
        Ok(store)
    }

    /// How many rows the one-row-per-publication table of schema 1 and 2 holds, if it is
    /// there.
    fn old_rows(conn: &Connection) -> Result<Option<i64>, HistoryError> {
        let old: Option<String> = conn
            .query_row(
                "SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'publications'",
                [],
                |r| r.get(0),
            )
            .optional()?;
        if old.is_none() {
            return Ok(None);
        }
        Ok(Some(conn.query_row("SELECT COUNT(*) FROM publications", [], |r| r.get(0))?))
    }

    /// Reads the key columns the database has, and adds those newly declared, indexing the
    /// blocks already stored for them in the same transaction (a broker stopped half way
    /// leaves the attribute undeclared, and the next start does it again).
    fn declare_columns(&mut self) -> Result<(), HistoryError> {
        let known: Vec<(i64, String)> = {
            let mut stmt = self.conn.prepare("SELECT column, attr FROM key_columns ORDER BY column")?;
            stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
        };
        let mut columns: Vec<Name> = Vec::new();
        for (_, attr) in &known {
            let name = Name::new(attr).map_err(|e| HistoryError::Corrupt {
                path: self.path.clone(),
                message: format!("key column for '{attr}': {e}"),
            })?;
            columns.push(name);
        }
        let mut added = Vec::new();
        for attr in &self.options.indexed {
            if !columns.contains(attr) {
                added.push(columns.len());
                columns.push(attr.clone());
            }
        }
        if !added.is_empty() {
            let tx = self.conn.transaction()?;
            for &column in &added {
                tx.execute(
                    "INSERT INTO key_columns (column, attr) VALUES (?1, ?2)",
                    (column, columns[column].as_str()),
                )?;
            }
            index_stored(&tx, &self.path, &columns, &added)?;
            tx.commit()?;
        }
        self.columns = columns;
        Ok(())
    }

    /// Moves the rows of a store written one row per publication into blocks, a batch at a
    /// time, each batch in one transaction (a broker stopped half way goes on from there at
    /// its next start), then drops the old table.
    fn move_rows_into_blocks(&mut self) -> Result<(), HistoryError> {
        let mut moved: u64 = 0;
        loop {
            let tx = self.conn.transaction()?;
            let rows: Vec<(i64, i64, i64, String, i64, Vec<u8>)> = {
                let mut read = tx.prepare(
                    "SELECT row, time, stamp_time, origin, seq, bytes FROM publications ORDER BY row LIMIT ?1",
                )?;
                read.query_map([CHUNK_ROWS], |r| {
                    Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?, r.get(5)?))
                })?
                .collect::<Result<_, _>>()?
            };
            let Some(&(last, ..)) = rows.last() else {
                tx.execute_batch("DROP TABLE publications")?;
                tx.commit()?;
                break;
            };
            // A row that does not decode (queries skipped it too) is not moved, and no
            // longer counted.
            let mut decoded = Vec::with_capacity(rows.len());
            let mut skipped: u64 = 0;
            for (row, time, stamp_time, origin, seq, bytes) in &rows {
                match codec::decode(bytes, codec::MAX_FRAME_CEILING) {
                    Ok((Frame::Publish { publication }, used)) => decoded.push((
                        Arc::unwrap_or_clone(publication),
                        *time,
                        *stamp_time,
                        origin.as_str(),
                        *seq,
                        &bytes[..used],
                    )),
                    other => {
                        let why = other.map_or_else(|e| e.to_string(), |_| "not a publication".to_owned());
                        tracing::warn!(row, error = %why, "history row does not decode; not moved into a block");
                        skipped += 1;
                    }
                }
            }
            if skipped > 0 {
                tx.execute("UPDATE meta SET rows = rows - ?1", [i64::try_from(skipped).unwrap_or(i64::MAX)])?;
                self.rows = self.rows.saturating_sub(skipped);
            }
            let mut pending: Vec<Pending<'_>> = decoded
                .iter()
                .map(|(p, time, stamp_time, origin, seq, bytes)| Pending {
                    publication: p,
                    group: None,
                    time: *time,
                    stamp_time: u64::try_from(*stamp_time).unwrap_or(0),
                    seq: u64::try_from(*seq).unwrap_or(0),
                    origin,
                    frame: bytes,
                })
                .collect();
            write_blocks(&tx, &self.columns, &mut pending)?;
            tx.execute("DELETE FROM publications WHERE row <= ?1", [last])?;
            tx.commit()?;
            moved += rows.len() as u64;
        }
        if moved > 0 {
            tracing::info!(rows = moved, path = %self.path.display(), "history store: rows moved into blocks");
        }
        Ok(())
    }

    /// The flag a reader of this store sets when its query meets damage
    /// ([`note_damage`]).
    pub fn damage_flag(&self) -> Arc<AtomicBool> {
        self.damage.clone()
    }

    /// Where the database is.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The options it was opened with.
    pub fn options(&self) -> &StoreOptions {
        &self.options
    }

    /// Stores `records` in one transaction; returns the positions of those that could not
    /// be stored (a publication whose frame, `time` added, is over the frame ceiling).
    pub fn insert(&mut self, records: &[Record]) -> Result<Vec<usize>, HistoryError> {
        let result = self.insert_batch(records);
        note_damage(&result, &self.damage);
        result
    }

    fn insert_batch(&mut self, records: &[Record]) -> Result<Vec<usize>, HistoryError> {
        let mut refused = Vec::new();
        // Every frame encoded into one buffer first; the blocks copy from it.
        let mut frames = Vec::with_capacity(records.len() * 256);
        let mut spans = Vec::with_capacity(records.len());
        for (at, record) in records.iter().enumerate() {
            let start = frames.len();
            if let Err(e) = encode(&record.publication, &mut frames) {
                tracing::error!(error = %e, stamp = ?record.stamp, "history store: a publication cannot be stored");
                refused.push(at);
                continue;
            }
            spans.push((at, start, frames.len()));
        }
        let mut pending: Vec<Pending<'_>> = spans
            .iter()
            .map(|&(at, start, end)| {
                let record = &records[at];
                let p = record.publication.as_ref();
                Pending {
                    publication: p,
                    group: None,
                    time: p.time().map_or_else(|| stamp_millis(&record.stamp), |t| t.millis()),
                    stamp_time: record.stamp.time,
                    seq: record.stamp.seq,
                    origin: record.stamp.origin.as_str(),
                    frame: &frames[start..end],
                }
            })
            .collect();
        let tx = self.conn.transaction()?;
        let inserted = write_blocks(&tx, &self.columns, &mut pending)?;
        tx.execute("UPDATE meta SET rows = rows + ?1", [i64::try_from(inserted).unwrap_or(i64::MAX)])?;
        tx.commit()?;
        self.rows += inserted;
        Ok(refused)
    }

    /// Deletes what the retention settings no longer keep, as of `now` (epoch
    /// milliseconds); returns how many publications went. Each step is a transaction of
    /// its own of at most about 10,000 publications (so the journal stays small), at most
    /// 200,000 per call: a large backlog (retention just enabled or shortened on a big
    /// store) goes over several calls instead of stalling the writer.
    pub fn apply_retention(&mut self, now: u64) -> Result<u64, HistoryError> {
        let result = self.retain(now);
        note_damage(&result, &self.damage);
        result
    }

    fn retain(&mut self, now: u64) -> Result<u64, HistoryError> {
        let mut removed: u64 = 0;
        if let Some(age) = self.options.max_age_ms {
            let cutoff = i64::try_from(now.saturating_sub(age)).unwrap_or(i64::MAX);
            // Through the (class, first time) index, one range per class; the classes found
            // by skipping from one to the next in that index, not by reading it all.
            let classes: Vec<String> = {
                let mut stmt = self.conn.prepare_cached(
                    "WITH RECURSIVE c(class) AS (
                         SELECT MIN(class) FROM blocks
                         UNION ALL
                         SELECT (SELECT MIN(class) FROM blocks WHERE class > c.class) FROM c
                         WHERE c.class IS NOT NULL
                     )
                     SELECT class FROM c WHERE class IS NOT NULL",
                )?;
                stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?
            };
            for class in &classes {
                while removed < DELETE_PER_PASS {
                    // Blocks wholly older than the cutoff go whole; a block across it keeps
                    // what is not.
                    let tx = self.conn.transaction()?;
                    let found: Vec<(i64, i64, i64)> = tx
                        .prepare_cached(
                            "SELECT row, count, last_time FROM blocks
                             WHERE class = ?1 AND first_time < ?2 ORDER BY first_time LIMIT ?3",
                        )?
                        .query_map(rusqlite::params![class, cutoff, CHUNK_BLOCKS], |r| {
                            Ok((r.get(0)?, r.get(1)?, r.get(2)?))
                        })?
                        .collect::<Result<_, _>>()?;
                    let mut gone = 0;
                    for &(row, count, last_time) in &found {
                        gone += if last_time < cutoff {
                            remove_block(&tx, row)?;
                            u64::try_from(count).unwrap_or(0)
                        } else {
                            trim_block(&tx, &self.columns, row, Keep::Since(cutoff))?
                        };
                    }
                    tx.execute(
                        "UPDATE meta SET rows = rows - ?1",
                        [i64::try_from(gone).unwrap_or(i64::MAX)],
                    )?;
                    tx.commit()?;
                    self.rows = self.rows.saturating_sub(gone);
                    removed += gone;
                    // Trimmed blocks start at the cutoff now: none is found twice (and a
                    // step that removed nothing would find the same blocks again).
                    if found.len() < CHUNK_BLOCKS || gone == 0 {
                        break;
                    }
                }
            }
        }
        if let Some(max) = self.options.max_rows {
            // The oldest stored first: blocks in the order they were written, and within a
            // block its oldest publications.
            while self.rows > max && removed < DELETE_PER_PASS {
                let budget = (self.rows - max).min(CHUNK_ROWS).min(DELETE_PER_PASS - removed);
                let n = self.delete_oldest(budget, false)?;
                removed += n;
                if n == 0 {
                    break;
                }
            }
        }
        if let Some(max) = self.options.max_bytes {
            // Pages freed by deleting the oldest blocks are reused, not given back: the file
            // keeps its largest size, and what is in use stays under the limit.
            while removed < DELETE_PER_PASS {
                let used = self.bytes_in_use()?;
                if used <= max || self.rows == 0 {
                    break;
                }
                // The share of publications that holds the excess, at least one block.
                let per_row = (used / self.rows).max(1);
                let budget = ((used - max) / per_row).clamp(1, CHUNK_ROWS).min(DELETE_PER_PASS - removed);
                let n = self.delete_oldest(budget, true)?;
                removed += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(removed)
    }

    /// Deletes the `n` oldest stored publications (blocks in the order they were written),
    /// in one transaction; with `whole`, whole blocks until at least `n` went (freeing
    /// pages), else exactly `n`, trimming the last block reached. Returns how many went.
    fn delete_oldest(&mut self, n: u64, whole: bool) -> Result<u64, HistoryError> {
        let tx = self.conn.transaction()?;
        let mut gone: u64 = 0;
        let mut after = i64::MIN;
        'blocks: while gone < n {
            let found: Vec<(i64, i64)> = tx
                .prepare_cached("SELECT row, count FROM blocks WHERE row > ?1 ORDER BY row LIMIT ?2")?
                .query_map(rusqlite::params![after, CHUNK_BLOCKS], |r| Ok((r.get(0)?, r.get(1)?)))?
                .collect::<Result<_, _>>()?;
            if found.is_empty() {
                break;
            }
            for (row, count) in found {
                after = row;
                let count = u64::try_from(count).unwrap_or(0);
                let left = n - gone;
                if whole || count <= left {
                    remove_block(&tx, row)?;
                    gone += count;
                } else {
                    let skip = usize::try_from(left).unwrap_or(usize::MAX);
                    gone += trim_block(&tx, &self.columns, row, Keep::AllButOldest(skip))?;
                }
                if gone >= n {
                    break 'blocks;
                }
            }
        }
        tx.execute("UPDATE meta SET rows = rows - ?1", [i64::try_from(gone).unwrap_or(i64::MAX)])?;
        tx.commit()?;
        self.rows = self.rows.saturating_sub(gone);
        Ok(gone)
    }

    /// The bytes of the database's pages in use (its size less the free pages).
    pub fn bytes_in_use(&self) -> Result<u64, HistoryError> {
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let free: i64 = self.conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        let size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        Ok(u64::try_from((pages - free).max(0) * size).unwrap_or(0))
    }

    /// How many publications are stored.
    pub fn rows(&self) -> Result<u64, HistoryError> {
        Ok(self.rows)
    }

    /// The stored publications `sub` matches, in time order (see [`Reader::query`]).
    pub fn query(&self, sub: &Subscription, limit: usize) -> Result<Vec<Stamped>, HistoryError> {
        query(&self.conn, &self.columns, sub, limit)
    }
}

const INSERT_KEY: &str =
    "INSERT INTO block_keys (class, col, value, first_time, block) VALUES (?1, ?2, ?3, ?4, ?5)";
const DELETE_KEY: &str =
    "DELETE FROM block_keys WHERE class = ?1 AND col = ?2 AND value = ?3 AND first_time = ?4 AND block = ?5";

/// A publication on its way into a block.
struct Pending<'a> {
    publication: &'a Publication,
    /// Its value of the first declared attribute, which groups it with others in blocks.
    group: Option<&'a str>,
    time: i64,
    stamp_time: u64,
    seq: u64,
    origin: &'a str,
    frame: &'a [u8],
}

/// A declared attribute's value as a key: strings only, since a query narrows only on an
/// `eq` with a string (numbers would also compare equal across kinds in SQLite, 3 = 3.0,
/// where the keys of a block must be distinct).
fn key_of(value: Option<&Value>) -> Option<&str> {
    match value? {
        Value::Str(s) => Some(s.as_str()),
        _ => None,
    }
}

/// The distinct declared-attribute values of one block, in the order first met.
#[derive(Default)]
struct Keys<'a> {
    list: Vec<Key<'a>>,
    seen: std::collections::HashSet<Key<'a>>,
}

impl<'a> Keys<'a> {
    /// Adds `p`'s values of the columns at `positions` (of `columns`).
    fn add(&mut self, columns: &[Name], positions: &[usize], p: &'a Publication) {
        for &col in positions {
            let Some(key) = key_of(p.get(&columns[col])) else { continue };
            if self.seen.insert((col, key)) {
                self.list.push((col, key));
            }
        }
    }

    /// Forgets them, for the next block.
    fn clear(&mut self) {
        self.list.clear();
        self.seen.clear();
    }
}

/// Adds block `row`'s index entries for `keys`.
fn insert_keys(
    tx: &rusqlite::Transaction<'_>,
    keys: &[Key<'_>],
    row: i64,
    class: &str,
    first: i64,
) -> rusqlite::Result<()> {
    let mut stmt = tx.prepare_cached(INSERT_KEY)?;
    for &(col, key) in keys {
        stmt.execute(rusqlite::params![class, col, key, first, row])?;
    }
    Ok(())
}

/// Writes `pending` as blocks (see [`block`]): sorted by class, by the value of the first
/// declared attribute, and by `time` (arrival order among equals), cut where a block is
/// full or its span would pass the bound, written in the order of their earliest times,
/// each with the distinct values of the declared attributes in it (in the block's row and
/// in `block_keys`). Grouping by that attribute's value makes a query that asks for one
/// value (one application) read few publications of others. Returns how many publications
/// were written.
fn write_blocks(
    tx: &rusqlite::Transaction<'_>,
    columns: &[Name],
    pending: &mut [Pending<'_>],
) -> rusqlite::Result<u64> {
    if let Some(first) = columns.first() {
        for p in pending.iter_mut() {
            p.group = key_of(p.publication.get(first));
        }
    }
    pending.sort_by(|a, b| {
        a.publication.class().cmp(b.publication.class()).then(a.group.cmp(&b.group)).then(a.time.cmp(&b.time))
    });
    // (earliest time, latest time, first pending, end): the blocks, then by earliest time.
    let mut cuts: Vec<(i64, i64, usize, usize)> = Vec::new();
    let mut fill = Fill::default();
    let mut start = 0;
    for (at, p) in pending.iter().enumerate() {
        let same_class = at > start && pending[start].publication.class() == p.publication.class();
        if at > start && !(same_class && fill.fits(p.time, p.origin.len(), p.frame.len())) {
            let (first, last) = fill.span();
            cuts.push((first, last, start, at));
            fill = Fill::default();
            start = at;
        }
        fill.add(p.time, p.origin.len(), p.frame.len());
    }
    if start < pending.len() {
        let (first, last) = fill.span();
        cuts.push((first, last, start, pending.len()));
    }
    cuts.sort_by_key(|&(first, _, start, _)| (first, start));
    let mut builder = Builder::new();
    let mut insert_block = tx.prepare_cached(
        "INSERT INTO blocks (class, first_time, last_time, count, bytes, keys) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?;
    let all: Vec<usize> = (0..columns.len()).collect();
    let mut keys = Keys::default();
    for (first, last, start, end) in cuts {
        builder.clear();
        keys.clear();
        for p in &pending[start..end] {
            builder.push_entry(Entry {
                time: p.time,
                stamp_time: p.stamp_time,
                seq: p.seq,
                origin: p.origin,
                frame: p.frame,
            });
            keys.add(columns, &all, p.publication);
        }
        let class = pending[start].publication.class();
        let encoded = block::encode_keys(&keys.list);
        insert_block.execute(rusqlite::params![class, first, last, end - start, builder.bytes(), encoded])?;
        insert_keys(tx, &keys.list, tx.last_insert_rowid(), class, first)?;
    }
    Ok(pending.len() as u64)
}

/// Block `row`'s class and first time, and its keys if they decode.
fn block_keys_of(
    tx: &rusqlite::Transaction<'_>,
    row: i64,
) -> rusqlite::Result<(String, i64, Option<Vec<u8>>)> {
    tx.prepare_cached("SELECT class, first_time, keys FROM blocks WHERE row = ?1")?
        .query_row([row], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
}

/// Removes block `row`'s index entries.
fn delete_keys(tx: &rusqlite::Transaction<'_>, row: i64) -> rusqlite::Result<()> {
    let (class, first, keys) = block_keys_of(tx, row)?;
    match block::keys(keys.as_deref().unwrap_or_default()) {
        Ok(keys) => {
            let mut stmt = tx.prepare_cached(DELETE_KEY)?;
            for (col, key) in keys {
                stmt.execute(rusqlite::params![class, col, key, first, row])?;
            }
        }
        // The block's list is damaged: its entries are found the slow way.
        Err(e) => {
            tracing::warn!(block = row, error = %e, "history block's keys do not decode; removing its index entries by search");
            tx.execute(
                "DELETE FROM block_keys WHERE class = ?1 AND first_time = ?2 AND block = ?3",
                rusqlite::params![class, first, row],
            )?;
        }
    }
    Ok(())
}

/// Deletes block `row` and its index entries.
fn remove_block(tx: &rusqlite::Transaction<'_>, row: i64) -> rusqlite::Result<()> {
    delete_keys(tx, row)?;
    tx.prepare_cached("DELETE FROM blocks WHERE row = ?1")?.execute([row])?;
    Ok(())
}

/// What [`trim_block`] keeps of a block.
#[derive(Clone, Copy)]
enum Keep {
    /// Publications whose `time` is at least this.
    Since(i64),
    /// All but this many of the oldest, by (`time`, stamp).
    AllButOldest(usize),
}

/// Keeps of block `row` what `keep` says; returns how many publications went. A block left
/// empty is deleted, and so is one that does not decode (retention must not stop at it;
/// queries skip it already), with a warning.
fn trim_block(
    tx: &rusqlite::Transaction<'_>,
    columns: &[Name],
    row: i64,
    keep: Keep,
) -> Result<u64, HistoryError> {
    let (count, bytes): (i64, Vec<u8>) =
        tx.query_row("SELECT count, bytes FROM blocks WHERE row = ?1", [row], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })?;
    let undecodable = |e: &dyn std::fmt::Display| -> Result<u64, HistoryError> {
        tracing::warn!(block = row, error = %e, "history block does not decode; retention removes it whole");
        remove_block(tx, row)?;
        Ok(u64::try_from(count).unwrap_or(0))
    };
    let entries = match block::entries(&bytes) {
        Ok(entries) => entries,
        Err(e) => return undecodable(&e),
    };
    let kept: Vec<Entry<'_>> = match keep {
        Keep::Since(cutoff) => entries.iter().filter(|e| e.time >= cutoff).copied().collect(),
        Keep::AllButOldest(n) => {
            let mut order: Vec<&Entry<'_>> = entries.iter().collect();
            order.sort_by(|a, b| {
                (a.time, a.stamp_time, a.origin, a.seq).cmp(&(b.time, b.stamp_time, b.origin, b.seq))
            });
            order.into_iter().skip(n).copied().collect()
        }
    };
    let gone = (entries.len() - kept.len()) as u64;
    if kept.is_empty() {
        remove_block(tx, row)?;
        return Ok(gone);
    }
    if gone == 0 {
        return Ok(0);
    }
    let mut builder = Builder::new();
    let mut publications = Vec::with_capacity(kept.len());
    for e in &kept {
        builder.push_entry(*e);
        match decode(e.frame) {
            Ok(p) => publications.push(p),
            Err(e) => return undecodable(&e),
        }
    }
    delete_keys(tx, row)?;
    let class: String = tx.query_row("SELECT class FROM blocks WHERE row = ?1", [row], |r| r.get(0))?;
    let all: Vec<usize> = (0..columns.len()).collect();
    let mut keys = Keys::default();
    for p in &publications {
        keys.add(columns, &all, p);
    }
    let (first, last) = builder.span();
    tx.prepare_cached(
        "UPDATE blocks SET first_time = ?2, last_time = ?3, count = ?4, bytes = ?5, keys = ?6 WHERE row = ?1",
    )?
    .execute(rusqlite::params![
        row,
        first,
        last,
        kept.len(),
        builder.bytes(),
        block::encode_keys(&keys.list)
    ])?;
    insert_keys(tx, &keys.list, row, &class, first)?;
    Ok(gone)
}

/// Adds the keys of the `new` columns (positions in `columns`) for every block stored,
/// reading a few blocks at a time (a large store is not read into memory at once). A block
/// that does not decode is left as it is (queries skip it too), with a warning.
fn index_stored(
    tx: &rusqlite::Transaction<'_>,
    path: &Path,
    columns: &[Name],
    new: &[usize],
) -> Result<(), HistoryError> {
    let mut read = tx.prepare(
        "SELECT row, class, first_time, bytes, keys FROM blocks WHERE row > ?1 ORDER BY row LIMIT ?2",
    )?;
    let mut update = tx.prepare("UPDATE blocks SET keys = ?2 WHERE row = ?1")?;
    let mut after = i64::MIN;
    loop {
        type Read = (i64, String, i64, Vec<u8>, Option<Vec<u8>>);
        let blocks: Vec<Read> = read
            .query_map(rusqlite::params![after, CHUNK_BLOCKS], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })?
            .collect::<Result<_, _>>()?;
        let Some((last, ..)) = blocks.last() else { break };
        after = *last;
        for (row, class, first, bytes, had) in &blocks {
            let decoded = decode_block(path, *row, bytes).and_then(|publications| {
                let had = block::keys(had.as_deref().unwrap_or_default()).map_err(|message| {
                    HistoryError::Corrupt {
                        path: path.to_owned(),
                        message: format!("block {row}: {message}"),
                    }
                })?;
                Ok((publications, had))
            });
            let (publications, mut all) = match decoded {
                Ok(decoded) => decoded,
                Err(e) => {
                    tracing::warn!(block = row, error = %e, "history block does not decode; not indexed");
                    continue;
                }
            };
            let mut keys = Keys::default();
            for p in &publications {
                keys.add(columns, new, p);
            }
            insert_keys(tx, &keys.list, *row, class, *first)?;
            all.extend_from_slice(&keys.list);
            update.execute(rusqlite::params![row, block::encode_keys(&all)])?;
        }
    }
    Ok(())
}

/// Every publication of a block, decoded (for indexing what was stored before).
fn decode_block(path: &Path, row: i64, bytes: &[u8]) -> Result<Vec<Publication>, HistoryError> {
    let corrupt = |message: String| HistoryError::Corrupt {
        path: path.to_owned(),
        message: format!("block {row}: {message}"),
    };
    block::entries(bytes).map_err(corrupt)?.iter().map(|e| decode(e.frame).map_err(corrupt)).collect()
}

/// A read-only view of a store, for queries while a broker writes it (WAL lets readers
/// and the writer go on together).
#[derive(Debug)]
pub struct Reader {
    conn: Connection,
    columns: Vec<Name>,
}

impl Reader {
    /// Opens the store in `dir` for reading.
    pub fn open(dir: &Path) -> Result<Self, HistoryError> {
        Self::open_with(dir, true)
    }

    /// Opens the store in `dir` for reading, without the integrity check if `check` is
    /// false: the writer's own reader (the store was checked when the writer opened it),
    /// and `padres-broker history` unless asked (the check reads the whole file: for
    /// 1,000,000 job statuses, 166 MB, about 2 s from a cold cache). Damage then shows as an error from a query that reads it.
    pub fn open_with(dir: &Path, check: bool) -> Result<Self, HistoryError> {
        let path = dir.join(FILE);
        if !path.exists() {
            return Err(HistoryError::Io {
                path,
                source: std::io::Error::new(std::io::ErrorKind::NotFound, "no history store here"),
            });
        }
        let conn =
            open_checked(&path, OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX, check)?;
        // Reading beside a writer: wait out the moments the journal's index is locked.
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version < SCHEMA {
            return Err(HistoryError::Open {
                path,
                message: format!(
                    "schema version {version} is older than this broker's ({SCHEMA}): a broker opening it for writing brings it up to date"
                ),
            });
        }
        if version > SCHEMA {
            return Err(HistoryError::Corrupt {
                path,
                message: format!("schema version {version} is newer than this broker's ({SCHEMA})"),
            });
        }
        let columns = {
            let mut stmt = conn.prepare("SELECT attr FROM key_columns ORDER BY column")?;
            let attrs: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
            attrs.iter().filter_map(|a| Name::new(a).ok()).collect()
        };
        Ok(Self { conn, columns })
    }

    /// The stored publications `sub` matches, in `time` order (ties by stamp), at most
    /// `limit` of them: the blocks that may hold them found by class, `time` bounds and an
    /// `eq` on a declared attribute, then each publication in them in the time range checked
    /// with [`matches`].
    pub fn query(&self, sub: &Subscription, limit: usize) -> Result<Vec<Stamped>, HistoryError> {
        query(&self.conn, &self.columns, sub, limit)
    }
}

/// A query's result being gathered, with what orders it.
struct Found {
    time: i64,
    stamp: Stamp,
    publication: Publication,
}

impl Found {
    fn key(&self) -> (i64, u64, &str, u64) {
        (self.time, self.stamp.time, self.stamp.origin.as_str(), self.stamp.seq)
    }
}

fn query(
    conn: &Connection,
    columns: &[Name],
    sub: &Subscription,
    limit: usize,
) -> Result<Vec<Stamped>, HistoryError> {
    if limit == 0 {
        return Ok(Vec::new());
    }
    let (from, to) = time_range(sub);
    let (from, to) = (from.unwrap_or(i64::MIN), to.unwrap_or(i64::MAX));
    if from > to {
        return Ok(Vec::new());
    }
    // A block that holds a time at or after `from` began no earlier than a span before it.
    let earliest = from.saturating_sub(block::MAX_SPAN_MS);
    let key = sub.predicates().iter().find_map(|p| {
        let column = columns.iter().position(|c| c == p.attr())?;
        match (p.op(), p.operand()) {
            (Op::Eq, Operand::Value(Value::Str(s))) => Some((column, s.to_string())),
            _ => None,
        }
    });
    let mut stmt;
    let mut blocks = match &key {
        Some((column, value)) => {
            stmt = conn.prepare_cached(
                "SELECT b.row, b.first_time, b.bytes FROM block_keys k JOIN blocks b ON b.row = k.block
                 WHERE k.class = ?1 AND k.col = ?2 AND k.value = ?3 AND k.first_time >= ?4 AND k.first_time <= ?5
                   AND b.last_time >= ?6
                 ORDER BY k.first_time, k.block",
            )?;
            stmt.query(rusqlite::params![sub.class(), column, value, earliest, to, from])?
        }
        None => {
            stmt = conn.prepare_cached(
                "SELECT row, first_time, bytes FROM blocks
                 WHERE class = ?1 AND first_time >= ?2 AND first_time <= ?3 AND last_time >= ?4
                 ORDER BY first_time, row",
            )?;
            stmt.query(rusqlite::params![sub.class(), earliest, to, from])?
        }
    };
    let mut found: Vec<Found> = Vec::new();
    // Once `limit` are found, the time of the last of them: a block that begins after it
    // holds nothing that would be kept.
    let mut bound: Option<i64> = None;
    while let Some(row) = blocks.next()? {
        let first: i64 = row.get(1)?;
        if bound.is_some_and(|b| first > b) {
            break;
        }
        let id: i64 = row.get(0)?;
        let bytes = row.get_ref(2)?.as_blob().map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(2, rusqlite::types::Type::Blob, Box::new(e))
        })?;
        let entries = match block::entries(bytes) {
            Ok(entries) => entries,
            Err(e) => {
                tracing::warn!(block = id, error = %e, "history block does not decode; skipped");
                continue;
            }
        };
        for e in entries {
            if e.time < from || e.time > to || bound.is_some_and(|b| e.time > b) {
                continue;
            }
            let Ok(publication) = decode(e.frame) else {
                tracing::warn!(block = id, seq = e.seq, "history entry does not decode; skipped");
                continue;
            };
            if !matches(sub, &publication) {
                continue;
            }
            let Ok(origin) = Name::new(e.origin) else { continue };
            found.push(Found { time: e.time, stamp: Stamp::new(e.stamp_time, origin, e.seq), publication });
        }
        if found.len() >= limit {
            found.sort_by(|a, b| a.key().cmp(&b.key()));
            found.truncate(limit);
            bound = found.last().map(|f| f.time);
        }
    }
    found.sort_by(|a, b| a.key().cmp(&b.key()));
    found.truncate(limit);
    Ok(found.into_iter().map(|f| Stamped { stamp: f.stamp, publication: Arc::new(f.publication) }).collect())
}

/// The tightest `time` bounds `sub` states with literal operands (inclusive, in epoch
/// milliseconds), for narrowing only: looser is always safe.
fn time_range(sub: &Subscription) -> (Option<i64>, Option<i64>) {
    let (mut from, mut to): (Option<i64>, Option<i64>) = (None, None);
    for p in sub.predicates().iter().filter(|p| p.attr() == TIME) {
        let Some(value) = p.literal() else { continue };
        let Some(number) = value.as_number() else { continue };
        // Saturating casts: a float bound beyond the i64 range narrows nothing wrongly.
        #[allow(clippy::cast_possible_truncation)]
        let (low, high) = match number {
            Number::Int(i) => (i, i),
            Number::Float(f) => (f.floor() as i64, f.ceil() as i64),
        };
        let raise = |b: &mut Option<i64>, v: i64| *b = Some(b.map_or(v, |x| x.max(v)));
        let lower = |b: &mut Option<i64>, v: i64| *b = Some(b.map_or(v, |x| x.min(v)));
        match p.op() {
            Op::Gt | Op::Ge => raise(&mut from, low),
            Op::Lt | Op::Le => lower(&mut to, high),
            Op::NumEq => {
                raise(&mut from, low);
                lower(&mut to, high);
            }
            _ => {}
        }
    }
    (from, to)
}

fn stamp_millis(stamp: &Stamp) -> i64 {
    i64::try_from(stamp.time).unwrap_or(i64::MAX)
}

/// Appends `publication` to `out` as the store keeps it: a publication frame of at most
/// the frame ceiling (what arrived was decoded from a frame of at most that; the `time`
/// its broker added can take it over).
pub fn encode(publication: &Arc<Publication>, out: &mut Vec<u8>) -> Result<(), codec::EncodeError> {
    codec::encode(&Frame::Publish { publication: publication.clone() }, codec::MAX_FRAME_CEILING, out)
}

/// A publication kept by [`encode`].
pub fn decode(bytes: &[u8]) -> Result<Publication, String> {
    match codec::decode(bytes, codec::MAX_FRAME_CEILING) {
        Ok((Frame::Publish { publication }, _)) => Ok(Arc::unwrap_or_clone(publication)),
        Ok(_) => Err("not a publication".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}
