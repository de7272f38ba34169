//! The history store: this broker's SQLite database of publications.
//!
//! A broker configured with history filters (`[[history]]` in its configuration, or
//! `--history FILTER`) keeps every publication that reaches it and matches one of them. The
//! router treats the store as one more hop ([`Hop::History`](crate::router::Hop::History)):
//! the filters are ordinary subscriptions of that hop, so the publications they select are
//! routed here from anywhere in the federation, and each one that arrives is handed to the
//! shell as an [`Output::Store`](crate::router::Output::Store).
//!
//! - **One row per publication**: its wire bytes (the encoded publication frame), its
//!   `time`, its class, its stamp (origin time, broker, counter), and one column per
//!   attribute the configuration declares as indexed (`index = ["appl", "gid"]`). Indexes on
//!   (class, time) and on (class, attribute, time) let a query narrow by class, by a time
//!   range and by an `eq` on a declared attribute; every row the narrowing returns is then
//!   checked with the reference [`matches`](padres_lang::matches), so stored and live
//!   matching can never disagree. Rows come back in `time` order (ties by stamp).
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
//! - **Retention**: rows older than `max_age` (by their `time`), beyond the newest
//!   `max_rows`, and the oldest while the pages in use pass `max_bytes` are deleted,
//!   checked every second by the writer.
//! - **Errors at start**: a file that is not a database or fails SQLite's integrity check
//!   (run when the last broker to hold the store did not close it normally: a marker file
//!   says it did), or a store another process holds (a lock file beside it), stops the
//!   broker from starting, with the path and the reason.

pub mod writer;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use padres_lang::predicate::{Op, Operand};
use padres_lang::time::TIME;
use padres_lang::wire::Frame;
use padres_lang::wire::codec;
use padres_lang::{Name, Number, Publication, Stamp, Stamped, Subscription, Value, matches};
use rusqlite::types::{ToSqlOutput, Value as SqlValue, ValueRef};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params_from_iter};
use serde::{Deserialize, Serialize};

/// The database's file name in the broker's data directory.
pub const FILE: &str = "history.sqlite";
/// The lock file beside it, held by the broker that writes the store.
pub const LOCK: &str = "history.lock";
/// Beside it while no broker has it open, if the last one closed it normally.
pub const CLEAN: &str = "history.clean";
/// The schema this code writes (kept in the database's `user_version`). 2 added `meta`
/// (the row count); a store of version 1 gets it when opened.
const SCHEMA: i64 = 2;
/// Rows deleted per retention statement, and read per step when an index is added.
const CHUNK_ROWS: u64 = 10_000;
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
    /// Attributes with a column and an index of their own.
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
    /// Declared attributes, in column order (`k0`, `k1`, …).
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
    /// Opens (or creates) the store in `dir`, taking its lock, creating the schema, and
    /// adding a column and index for each newly declared attribute (filled from the rows
    /// already stored).
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
        // SQLite's integrity check reads the whole file (1,000,000 rows: 274 MB, 1.4 s from a
        // cold cache): it runs when the last broker to hold the store did not close it
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
        conn.execute_batch(
            "CREATE TABLE IF NOT EXISTS publications (
                 row INTEGER PRIMARY KEY,
                 time INTEGER NOT NULL,
                 class TEXT NOT NULL,
                 stamp_time INTEGER NOT NULL,
                 origin TEXT NOT NULL,
                 seq INTEGER NOT NULL,
                 bytes BLOB NOT NULL
             );
             CREATE INDEX IF NOT EXISTS publications_by_class_time ON publications (class, time);
             CREATE TABLE IF NOT EXISTS key_columns (column INTEGER PRIMARY KEY, attr TEXT NOT NULL UNIQUE);
             CREATE TABLE IF NOT EXISTS meta (rows INTEGER NOT NULL);
             PRAGMA user_version = 2;",
        )?;
        // The row count, kept in `meta` by every insert and delete: counting the rows reads
        // a whole index (3 s for 1,000,000 rows from a cold cache), so it is done once, for
        // a store written before `meta` was.
        let kept: Option<i64> = conn.query_row("SELECT rows FROM meta", [], |r| r.get(0)).optional()?;
        let rows = match kept {
            Some(rows) => rows,
            None => {
                let rows: i64 = conn.query_row("SELECT COUNT(*) FROM publications", [], |r| r.get(0))?;
                conn.execute("INSERT INTO meta (rows) VALUES (?1)", [rows])?;
                rows
            }
        };
        let rows = u64::try_from(rows).unwrap_or(0);
        let damage = Arc::new(AtomicBool::new(true));
        let mut store = Self { conn, path, columns: Vec::new(), options, rows, _lock: lock, damage };
        store.declare_columns()?;
        store.damage.store(false, Ordering::Relaxed);
        Ok(store)
    }

    /// Reads the key columns the database has, and adds those newly declared.
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
        let new: Vec<Name> = self.options.indexed.iter().filter(|a| !columns.contains(a)).cloned().collect();
        if !new.is_empty() {
            let tx = self.conn.transaction()?;
            for attr in new {
                let column = columns.len();
                tx.execute(
                    "INSERT INTO key_columns (column, attr) VALUES (?1, ?2)",
                    (column, attr.as_str()),
                )?;
                // Column names are ours (k0, k1, …): no user text is ever spliced into SQL.
                tx.execute_batch(&format!(
                    "ALTER TABLE publications ADD COLUMN k{column};
                     CREATE INDEX publications_by_k{column} ON publications (class, k{column}, time);"
                ))?;
                columns.push(attr);
            }
            // Rows stored before an attribute was declared get its column filled now, read
            // a chunk at a time (a large store is not read into memory at once).
            let sets: Vec<String> = (0..columns.len()).map(|c| format!("k{c} = ?{}", c + 2)).collect();
            {
                let mut update =
                    tx.prepare(&format!("UPDATE publications SET {} WHERE row = ?1", sets.join(", ")))?;
                let mut read =
                    tx.prepare("SELECT row, bytes FROM publications WHERE row > ?1 ORDER BY row LIMIT ?2")?;
                let mut after = i64::MIN;
                loop {
                    let rows: Vec<(i64, Vec<u8>)> = read
                        .query_map(rusqlite::params![after, CHUNK_ROWS], |r| Ok((r.get(0)?, r.get(1)?)))?
                        .collect::<Result<_, _>>()?;
                    let Some(&(last, _)) = rows.last() else { break };
                    after = last;
                    for (row, bytes) in rows {
                        let publication = decode(&bytes).map_err(|message| HistoryError::Corrupt {
                            path: self.path.clone(),
                            message: format!("row {row}: {message}"),
                        })?;
                        let mut values = vec![ToSqlOutput::Borrowed(ValueRef::Integer(row))];
                        values.extend(columns.iter().map(|a| key_value(publication.get(a))));
                        update.execute(params_from_iter(values))?;
                    }
                }
            }
            tx.commit()?;
        }
        self.columns = columns;
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
        let names: Vec<String> = (0..self.columns.len()).map(|c| format!(", k{c}")).collect();
        let marks: Vec<String> = (0..self.columns.len()).map(|c| format!(", ?{}", c + 7)).collect();
        let sql = format!(
            "INSERT INTO publications (time, class, stamp_time, origin, seq, bytes{}) VALUES (?1, ?2, ?3, ?4, ?5, ?6{})",
            names.concat(),
            marks.concat()
        );
        let tx = self.conn.transaction()?;
        let mut inserted = 0;
        let mut refused = Vec::new();
        {
            let mut stmt = tx.prepare_cached(&sql)?;
            let mut bytes = Vec::new();
            for (at, record) in records.iter().enumerate() {
                bytes.clear();
                let frame = Frame::Publish { publication: record.publication.clone() };
                // What arrived here was decoded from a frame of at most the ceiling; the
                // `time` its broker added can take it over.
                if let Err(e) = codec::encode(&frame, codec::MAX_FRAME_CEILING, &mut bytes) {
                    tracing::error!(error = %e, stamp = ?record.stamp, "history store: a publication cannot be stored");
                    refused.push(at);
                    continue;
                }
                let p = &record.publication;
                let time = p.time().map_or_else(|| stamp_millis(&record.stamp), |t| t.millis());
                // Bound in place, borrowed: no copy of the row's text or bytes is made.
                stmt.raw_bind_parameter(1, time)?;
                stmt.raw_bind_parameter(2, p.class())?;
                stmt.raw_bind_parameter(3, stamp_millis(&record.stamp))?;
                stmt.raw_bind_parameter(4, record.stamp.origin.as_str())?;
                stmt.raw_bind_parameter(5, i64::try_from(record.stamp.seq).unwrap_or(i64::MAX))?;
                stmt.raw_bind_parameter(6, bytes.as_slice())?;
                for (at, attr) in self.columns.iter().enumerate() {
                    stmt.raw_bind_parameter(7 + at, key_value(p.get(attr)))?;
                }
                inserted += stmt.raw_execute()?;
            }
        }
        tx.execute("UPDATE meta SET rows = rows + ?1", [i64::try_from(inserted).unwrap_or(i64::MAX)])?;
        tx.commit()?;
        self.rows += u64::try_from(inserted).unwrap_or(0);
        Ok(refused)
    }

    /// Deletes what the retention settings no longer keep, as of `now` (epoch
    /// milliseconds); returns how many rows went. Deletes go 10,000 rows per
    /// statement (each its own transaction, so the journal stays small), at most
    /// 200,000 rows per call: a large backlog (retention just enabled or
    /// shortened on a big store) goes over several calls instead of stalling the writer.
    pub fn apply_retention(&mut self, now: u64) -> Result<u64, HistoryError> {
        let result = self.retain(now);
        note_damage(&result, &self.damage);
        result
    }

    fn retain(&mut self, now: u64) -> Result<u64, HistoryError> {
        let mut removed: u64 = 0;
        if let Some(age) = self.options.max_age_ms {
            let cutoff = i64::try_from(now.saturating_sub(age)).unwrap_or(i64::MAX);
            // Through the (class, time) index, one range per class; the classes found by
            // skipping from one to the next in that index, not by reading it all.
            let classes: Vec<String> = {
                let mut stmt = self.conn.prepare_cached(
                    "WITH RECURSIVE c(class) AS (
                         SELECT MIN(class) FROM publications
                         UNION ALL
                         SELECT (SELECT MIN(class) FROM publications WHERE class > c.class) FROM c
                         WHERE c.class IS NOT NULL
                     )
                     SELECT class FROM c WHERE class IS NOT NULL",
                )?;
                stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?
            };
            for class in &classes {
                loop {
                    let budget = DELETE_PER_PASS.saturating_sub(removed).min(CHUNK_ROWS);
                    let n = self.delete(
                        "DELETE FROM publications WHERE row IN
                             (SELECT row FROM publications WHERE class = ?1 AND time < ?2 LIMIT ?3)",
                        rusqlite::params![class, cutoff, budget],
                    )?;
                    removed += n;
                    if n < CHUNK_ROWS || removed >= DELETE_PER_PASS {
                        break;
                    }
                }
            }
        }
        if let Some(max) = self.options.max_rows {
            // The oldest stored first, by row number (which may have gaps).
            while self.rows > max && removed < DELETE_PER_PASS {
                let budget = (self.rows - max).min(CHUNK_ROWS).min(DELETE_PER_PASS - removed);
                let n = self.delete_oldest(budget)?;
                removed += n;
                if n == 0 {
                    break;
                }
            }
        }
        if let Some(max) = self.options.max_bytes {
            // Pages freed by deleting the oldest rows are reused, not given back: the file
            // keeps its largest size, and what is in use stays under the limit.
            while removed < DELETE_PER_PASS {
                let used = self.bytes_in_use()?;
                if used <= max || self.rows == 0 {
                    break;
                }
                // The share of rows that holds the excess, at least one.
                let per_row = (used / self.rows).max(1);
                let budget = ((used - max) / per_row).clamp(1, CHUNK_ROWS).min(DELETE_PER_PASS - removed);
                let n = self.delete_oldest(budget)?;
                removed += n;
                if n == 0 {
                    break;
                }
            }
        }
        Ok(removed)
    }

    /// Deletes the `n` oldest stored rows, by row number (which may have gaps).
    fn delete_oldest(&mut self, n: u64) -> Result<u64, HistoryError> {
        self.delete(
            "DELETE FROM publications WHERE row IN (SELECT row FROM publications ORDER BY row LIMIT ?1)",
            [n],
        )
    }

    /// Runs one delete statement and counts what it removed, in one transaction.
    fn delete(&mut self, sql: &str, params: impl rusqlite::Params) -> Result<u64, HistoryError> {
        let tx = self.conn.transaction()?;
        let n = tx.prepare_cached(sql)?.execute(params)?;
        tx.execute("UPDATE meta SET rows = rows - ?1", [i64::try_from(n).unwrap_or(i64::MAX)])?;
        tx.commit()?;
        let n = u64::try_from(n).unwrap_or(u64::MAX);
        self.rows = self.rows.saturating_sub(n);
        Ok(n)
    }

    /// The bytes of the database's pages in use (its size less the free pages).
    pub fn bytes_in_use(&self) -> Result<u64, HistoryError> {
        let pages: i64 = self.conn.query_row("PRAGMA page_count", [], |r| r.get(0))?;
        let free: i64 = self.conn.query_row("PRAGMA freelist_count", [], |r| r.get(0))?;
        let size: i64 = self.conn.query_row("PRAGMA page_size", [], |r| r.get(0))?;
        Ok(u64::try_from((pages - free).max(0) * size).unwrap_or(0))
    }

    /// How many rows are stored.
    pub fn rows(&self) -> Result<u64, HistoryError> {
        Ok(self.rows)
    }

    /// The stored publications `sub` matches, in time order (see [`Reader::query`]).
    pub fn query(&self, sub: &Subscription, limit: usize) -> Result<Vec<Stamped>, HistoryError> {
        query(&self.conn, &self.columns, sub, limit)
    }
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
    /// 1,000,000 rows, 274 MB, 1.4 s from a cold cache). Damage then shows as an error from a query that reads it.
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
        let columns = {
            let mut stmt = conn.prepare("SELECT attr FROM key_columns ORDER BY column")?;
            let attrs: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
            attrs.iter().filter_map(|a| Name::new(a).ok()).collect()
        };
        Ok(Self { conn, columns })
    }

    /// The stored publications `sub` matches, in `time` order (ties by stamp), at most
    /// `limit` of them: narrowed in SQL by class, `time` bounds and `eq` on declared
    /// attributes, then checked with [`matches`].
    pub fn query(&self, sub: &Subscription, limit: usize) -> Result<Vec<Stamped>, HistoryError> {
        query(&self.conn, &self.columns, sub, limit)
    }
}

fn query(
    conn: &Connection,
    columns: &[Name],
    sub: &Subscription,
    limit: usize,
) -> Result<Vec<Stamped>, HistoryError> {
    let mut sql =
        String::from("SELECT row, stamp_time, origin, seq, bytes FROM publications WHERE class = ?1");
    let mut params = vec![SqlValue::Text(sub.class().to_owned())];
    let (from, to) = time_range(sub);
    if let Some(from) = from {
        params.push(SqlValue::Integer(from));
        sql.push_str(&format!(" AND time >= ?{}", params.len()));
    }
    if let Some(to) = to {
        params.push(SqlValue::Integer(to));
        sql.push_str(&format!(" AND time <= ?{}", params.len()));
    }
    for p in sub.predicates() {
        let Some(column) = columns.iter().position(|c| c == p.attr()) else { continue };
        if let (Op::Eq, Operand::Value(Value::Str(s))) = (p.op(), p.operand()) {
            params.push(SqlValue::Text(s.to_string()));
            sql.push_str(&format!(" AND k{column} = ?{}", params.len()));
        }
    }
    sql.push_str(" ORDER BY time, stamp_time, origin, seq");
    let mut stmt = conn.prepare_cached(&sql)?;
    let mut rows = stmt.query(params_from_iter(params))?;
    let mut out = Vec::new();
    while let Some(row) = rows.next()? {
        if out.len() >= limit {
            break;
        }
        let id: i64 = row.get(0)?;
        let bytes: Vec<u8> = row.get(4)?;
        let Ok(publication) = decode(&bytes) else {
            tracing::warn!(row = id, "history row does not decode; skipped");
            continue;
        };
        if !matches(sub, &publication) {
            continue;
        }
        let origin: String = row.get(2)?;
        let Ok(origin) = Name::new(&origin) else { continue };
        let stamp_time: i64 = row.get(1)?;
        let seq: i64 = row.get(3)?;
        let stamp =
            Stamp::new(u64::try_from(stamp_time).unwrap_or(0), origin, u64::try_from(seq).unwrap_or(0));
        out.push(Stamped { stamp, publication: Arc::new(publication) });
    }
    Ok(out)
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

/// A declared attribute's value as its column holds it (strings and numbers; anything
/// else is not narrowed on).
fn key_value(value: Option<&Value>) -> ToSqlOutput<'_> {
    ToSqlOutput::Borrowed(match value {
        Some(Value::Str(s)) => ValueRef::Text(s.as_bytes()),
        Some(Value::Int(i)) => ValueRef::Integer(*i),
        Some(Value::Time(t)) => ValueRef::Integer(t.millis()),
        Some(Value::Float(f)) => ValueRef::Real(*f),
        Some(Value::Bool(_)) | None => ValueRef::Null,
    })
}

fn decode(bytes: &[u8]) -> Result<Publication, String> {
    match codec::decode(bytes, codec::MAX_FRAME_CEILING) {
        Ok((Frame::Publish { publication }, _)) => Ok(Arc::unwrap_or_clone(publication)),
        Ok(_) => Err("not a publication".to_owned()),
        Err(e) => Err(e.to_string()),
    }
}
