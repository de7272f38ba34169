//! [`Journal`]: the journal in the agent's SQLite file (see the module docs of
//! [`crate::journal`]).

use std::path::Path;

use rusqlite::{Connection, OptionalExtension, params};

use super::{Claim, Dispatched, ENDED_KEPT_MS, Entry, FILE, Result, RunRow, Store, claim_of};

/// The journal (see the module docs).
#[derive(Debug)]
pub struct Journal {
    pub(super) db: Connection,
}

impl Journal {
    /// Opens (or creates) the journal in `work_dir`.
    ///
    /// # Errors
    /// The file cannot be opened or is not a journal.
    pub fn open(work_dir: &Path) -> Result<Self> {
        let db = Connection::open(work_dir.join(FILE))?;
        db.execute_batch(
            "PRAGMA journal_mode = WAL;
             PRAGMA synchronous = NORMAL;
             CREATE TABLE IF NOT EXISTS runs (
                 appl TEXT NOT NULL, gid TEXT NOT NULL, job TEXT NOT NULL,
                 attempt INTEGER NOT NULL, status TEXT, exit INTEGER,
                 PRIMARY KEY (appl, gid, job));
             CREATE TABLE IF NOT EXISTS generations (
                 appl TEXT NOT NULL, gid TEXT NOT NULL, date TEXT NOT NULL,
                 PRIMARY KEY (appl, gid));
             CREATE TABLE IF NOT EXISTS deployments (appl TEXT PRIMARY KEY, body TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS ended (
                 appl TEXT NOT NULL, gid TEXT NOT NULL, at_ms INTEGER NOT NULL,
                 PRIMARY KEY (appl, gid));
             CREATE TABLE IF NOT EXISTS outbox (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT, publication TEXT NOT NULL);
             CREATE TABLE IF NOT EXISTS cron_fired (
                 appl TEXT NOT NULL, pattern TEXT NOT NULL, at_ms INTEGER NOT NULL,
                 PRIMARY KEY (appl, pattern));
             CREATE TABLE IF NOT EXISTS dispatches (
                 appl TEXT NOT NULL, gid TEXT NOT NULL, job TEXT NOT NULL,
                 agent TEXT NOT NULL, incarnation INTEGER NOT NULL, attempt INTEGER NOT NULL,
                 n INTEGER NOT NULL, date TEXT NOT NULL,
                 PRIMARY KEY (appl, gid, job));
             CREATE TABLE IF NOT EXISTS assigned (
                 appl TEXT NOT NULL, gid TEXT NOT NULL, job TEXT NOT NULL, at_ms INTEGER NOT NULL,
                 PRIMARY KEY (appl, gid, job));
             CREATE TABLE IF NOT EXISTS held (
                 seq INTEGER PRIMARY KEY AUTOINCREMENT, appl TEXT NOT NULL, gid TEXT NOT NULL,
                 date TEXT NOT NULL, UNIQUE (appl, gid));",
        )?;
        // Journals made before deployments had a time get the column (a deployment of
        // unknown time counts from the epoch).
        let timed: i64 = db.query_row(
            "SELECT COUNT(*) FROM pragma_table_info('deployments') WHERE name = 'at_ms'",
            [],
            |row| row.get(0),
        )?;
        if timed == 0 {
            db.execute_batch("ALTER TABLE deployments ADD COLUMN at_ms INTEGER NOT NULL DEFAULT 0")?;
        }
        let now_ms = crate::trigger::now().timestamp_millis();
        db.execute("DELETE FROM ended WHERE at_ms < ?1", params![now_ms - ENDED_KEPT_MS])?;
        // A pool member never sees the generations it ran jobs of end: their rows go
        // after as long as the marks of ends are kept.
        db.execute(
            "DELETE FROM runs WHERE EXISTS (SELECT 1 FROM assigned a WHERE a.appl = runs.appl
             AND a.gid = runs.gid AND a.job = runs.job AND a.at_ms < ?1)",
            params![now_ms - ENDED_KEPT_MS],
        )?;
        db.execute("DELETE FROM assigned WHERE at_ms < ?1", params![now_ms - ENDED_KEPT_MS])?;
        Ok(Self { db })
    }

    fn claim_in_transaction(&mut self, jobs: &[(String, String, String)]) -> rusqlite::Result<Vec<Claim>> {
        let tx = self.db.transaction()?;
        let mut claims = Vec::with_capacity(jobs.len());
        for (appl, gid, job) in jobs {
            if has_ended(&tx, appl, gid)? {
                claims.push(Claim::GenerationEnded);
                continue;
            }
            let found = run_row(&tx, appl, gid, job)?;
            claims.push(match found {
                None => new_run(&tx, appl, gid, job)?,
                Some(row) => claim_of(row),
            });
        }
        tx.commit()?;
        Ok(claims)
    }

    fn reclaim_in_transaction(
        &mut self,
        appl: &str,
        gid: &str,
        job: &str,
    ) -> rusqlite::Result<std::result::Result<u32, Claim>> {
        let tx = self.db.transaction()?;
        if has_ended(&tx, appl, gid)? {
            return Ok(Err(Claim::GenerationEnded));
        }
        let found = run_row(&tx, appl, gid, job)?;
        let answer = match found {
            None => Err(Claim::New),
            Some((attempt, Some(status), _)) if status == "failed" || status == "timeout" => {
                tx.execute(
                    "UPDATE runs SET status = NULL, exit = NULL WHERE appl = ?1 AND gid = ?2 AND job = ?3",
                    params![appl, gid, job],
                )?;
                Ok(attempt)
            }
            Some((attempt, Some(status), exit)) => {
                Err(Claim::Ended { status, exit: exit.unwrap_or(-1), attempt })
            }
            Some((attempt, None, _)) => Err(Claim::Unfinished { attempt }),
        };
        tx.commit()?;
        Ok(answer)
    }
}

impl Store for Journal {
    fn claim_many(&mut self, jobs: &[(String, String, String)]) -> Result<Vec<Claim>> {
        // This commit waits for the disk (and with it every commit before it).
        self.db.pragma_update(None, "synchronous", "FULL")?;
        let claims = self.claim_in_transaction(jobs);
        self.db.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(claims?)
    }

    fn attempt(&mut self, appl: &str, gid: &str, job: &str, attempt: u32) -> Result<()> {
        self.db.execute(
            "UPDATE runs SET attempt = ?4 WHERE appl = ?1 AND gid = ?2 AND job = ?3",
            params![appl, gid, job, attempt],
        )?;
        Ok(())
    }

    fn end(&mut self, appl: &str, gid: &str, job: &str, status: &str, exit: i64, attempt: u32) -> Result<()> {
        // Nothing is kept of a generation that has ended (a job that outlived its
        // generation's end leaves no row behind).
        self.db.execute(
            "INSERT INTO runs (appl, gid, job, attempt, status, exit)
             SELECT ?1, ?2, ?3, ?6, ?4, ?5 WHERE NOT EXISTS (SELECT 1 FROM ended WHERE appl = ?1 AND gid = ?2)
             ON CONFLICT (appl, gid, job) DO UPDATE SET status = ?4, exit = ?5, attempt = ?6",
            params![appl, gid, job, status, exit, attempt],
        )?;
        Ok(())
    }

    fn interrupted(&self) -> Result<Vec<Entry>> {
        // A pool job dispatched from here runs elsewhere: it is not interrupted.
        let mut query = self.db.prepare(
            "SELECT appl, gid, job, attempt FROM runs WHERE status IS NULL
             AND NOT EXISTS (SELECT 1 FROM ended WHERE ended.appl = runs.appl AND ended.gid = runs.gid)
             AND NOT EXISTS (SELECT 1 FROM dispatches d WHERE d.appl = runs.appl AND d.gid = runs.gid
                             AND d.job = runs.job)
             ORDER BY appl, gid, job",
        )?;
        let rows = query.query_map([], |row| {
            Ok(Entry { appl: row.get(0)?, gid: row.get(1)?, job: row.get(2)?, attempt: row.get(3)? })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn end_generation(&mut self, appl: &str, gid: &str, at_ms: i64) -> Result<bool> {
        let tx = self.db.transaction()?;
        let new = tx.execute(
            "INSERT OR IGNORE INTO ended (appl, gid, at_ms) VALUES (?1, ?2, ?3)",
            params![appl, gid, at_ms],
        )? > 0;
        forget_rows(&tx, appl, gid)?;
        // Marks past their time go as new ones come.
        if new {
            tx.execute("DELETE FROM ended WHERE at_ms < ?1", params![at_ms - ENDED_KEPT_MS])?;
        }
        tx.commit()?;
        Ok(new)
    }

    fn generation_ended(&self, appl: &str, gid: &str) -> Result<bool> {
        Ok(has_ended(&self.db, appl, gid)?)
    }

    fn forget(&mut self, appl: &str, gid: &str) -> Result<usize> {
        Ok(forget_rows(&self.db, appl, gid)?)
    }

    fn generation(&mut self, appl: &str, gid: &str, date: &str) -> Result<()> {
        self.db.execute(
            "INSERT OR IGNORE INTO generations (appl, gid, date) VALUES (?1, ?2, ?3)",
            params![appl, gid, date],
        )?;
        Ok(())
    }

    fn generation_date(&self, appl: &str, gid: &str) -> Result<Option<String>> {
        Ok(self
            .db
            .query_row(
                "SELECT date FROM generations WHERE appl = ?1 AND gid = ?2",
                params![appl, gid],
                |row| row.get(0),
            )
            .optional()?)
    }

    fn reclaim(&mut self, appl: &str, gid: &str, job: &str) -> Result<std::result::Result<u32, Claim>> {
        // Like a claim, this commit waits for the disk: the job runs again after it.
        self.db.pragma_update(None, "synchronous", "FULL")?;
        let answer = self.reclaim_in_transaction(appl, gid, job);
        self.db.pragma_update(None, "synchronous", "NORMAL")?;
        Ok(answer?)
    }

    fn look(&self, appl: &str, gid: &str, job: &str) -> Result<Claim> {
        if has_ended(&self.db, appl, gid)? {
            return Ok(Claim::GenerationEnded);
        }
        Ok(run_row(&self.db, appl, gid, job)?.map_or(Claim::New, claim_of))
    }

    fn take_assignment(&mut self, appl: &str, gid: &str, job: &str, attempt: u32) -> Result<Claim> {
        self.db.pragma_update(None, "synchronous", "FULL")?;
        let taken = (|| {
            let tx = self.db.transaction()?;
            if has_ended(&tx, appl, gid)? {
                return Ok(Claim::GenerationEnded);
            }
            let claim = match run_row(&tx, appl, gid, job)? {
                None => new_run(&tx, appl, gid, job)?,
                // Failed before this dispatch (an operator's rerun), or abandoned when this
                // agent stopped while it ran (its home agent dispatches it again).
                Some((last, Some(status), _))
                    if (last < attempt && (status == "failed" || status == "timeout"))
                        || status == "abandoned" =>
                {
                    tx.execute(
                        "UPDATE runs SET status = NULL, exit = NULL WHERE appl = ?1 AND gid = ?2 AND job = ?3",
                        params![appl, gid, job],
                    )?;
                    Claim::New
                }
                Some(row) => claim_of(row),
            };
            let take = claim == Claim::New;
            if take {
                tx.execute(
                    "INSERT OR REPLACE INTO assigned (appl, gid, job, at_ms) VALUES (?1, ?2, ?3, ?4)",
                    params![appl, gid, job, crate::trigger::now().timestamp_millis()],
                )?;
            }
            tx.commit()?;
            Ok(claim)
        })();
        self.db.pragma_update(None, "synchronous", "NORMAL")?;
        taken
    }

    fn is_assigned(&self, appl: &str, gid: &str, job: &str) -> Result<bool> {
        Ok(self
            .db
            .query_row(
                "SELECT 1 FROM assigned WHERE appl = ?1 AND gid = ?2 AND job = ?3",
                params![appl, gid, job],
                |_| Ok(()),
            )
            .optional()
            .map(|found| found.is_some())?)
    }

    fn keep_dispatch(&mut self, d: &Dispatched) -> Result<()> {
        self.db.execute(
            "INSERT OR REPLACE INTO dispatches (appl, gid, job, agent, incarnation, attempt, n, date)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            params![d.appl, d.gid, d.job, d.agent, d.incarnation, d.attempt, d.n, d.date],
        )?;
        Ok(())
    }

    fn drop_dispatch(&mut self, appl: &str, gid: &str, job: &str) -> Result<()> {
        self.db.execute(
            "DELETE FROM dispatches WHERE appl = ?1 AND gid = ?2 AND job = ?3",
            params![appl, gid, job],
        )?;
        Ok(())
    }

    fn dispatches(&self) -> Result<Vec<Dispatched>> {
        let mut query = self.db.prepare(
            "SELECT appl, gid, job, agent, incarnation, attempt, n, date FROM dispatches
             ORDER BY appl, gid, job",
        )?;
        let rows = query.query_map([], |row| {
            Ok(Dispatched {
                appl: row.get(0)?,
                gid: row.get(1)?,
                job: row.get(2)?,
                agent: row.get(3)?,
                incarnation: row.get(4)?,
                attempt: row.get(5)?,
                n: row.get(6)?,
                date: row.get(7)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn keep_deployment(&mut self, appl: &str, body: &str, at_ms: i64) -> Result<()> {
        self.db.execute(
            "INSERT INTO deployments (appl, body, at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (appl) DO UPDATE SET body = ?2, at_ms = ?3",
            params![appl, body, at_ms],
        )?;
        Ok(())
    }

    fn drop_deployment(&mut self, appl: &str) -> Result<()> {
        self.db.execute("DELETE FROM deployments WHERE appl = ?1", params![appl])?;
        Ok(())
    }

    fn outbox_push(&mut self, publication: &str) -> Result<i64> {
        self.db.execute("INSERT INTO outbox (publication) VALUES (?1)", params![publication])?;
        Ok(self.db.last_insert_rowid())
    }

    fn outbox_done(&mut self, seq: i64) -> Result<()> {
        self.db.execute("DELETE FROM outbox WHERE seq = ?1", params![seq])?;
        Ok(())
    }

    fn outbox_pending(&self) -> Result<Vec<(i64, String)>> {
        let mut query = self.db.prepare("SELECT seq, publication FROM outbox ORDER BY seq")?;
        let rows = query.query_map([], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn cron_last(&self, appl: &str, pattern: &str) -> Result<Option<i64>> {
        Ok(self
            .db
            .query_row(
                "SELECT at_ms FROM cron_fired WHERE appl = ?1 AND pattern = ?2",
                params![appl, pattern],
                |row| row.get(0),
            )
            .optional()?)
    }

    fn cron_fired(&mut self, appl: &str, pattern: &str, at_ms: i64) -> Result<()> {
        self.db.execute(
            "INSERT INTO cron_fired (appl, pattern, at_ms) VALUES (?1, ?2, ?3)
             ON CONFLICT (appl, pattern) DO UPDATE SET at_ms = ?3",
            params![appl, pattern, at_ms],
        )?;
        Ok(())
    }

    fn generations_started(&self, appl: &str) -> Result<Vec<String>> {
        let mut query =
            self.db.prepare("SELECT gid FROM runs WHERE appl = ?1 AND job = 'APPL_START' ORDER BY gid")?;
        let rows = query.query_map(params![appl], |row| row.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn hold(&mut self, appl: &str, gid: &str, date: &str) -> Result<()> {
        self.db.execute(
            "INSERT INTO held (appl, gid, date) VALUES (?1, ?2, ?3) ON CONFLICT (appl, gid) DO NOTHING",
            params![appl, gid, date],
        )?;
        Ok(())
    }

    fn release(&mut self, appl: &str, gid: &str) -> Result<()> {
        self.db.execute("DELETE FROM held WHERE appl = ?1 AND gid = ?2", params![appl, gid])?;
        Ok(())
    }

    fn held(&self, appl: &str) -> Result<Vec<(String, String)>> {
        let mut query = self.db.prepare("SELECT gid, date FROM held WHERE appl = ?1 ORDER BY seq")?;
        let rows = query.query_map(params![appl], |row| Ok((row.get(0)?, row.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    fn deployments(&self) -> Result<Vec<(String, String, i64)>> {
        let mut query = self.db.prepare("SELECT appl, body, at_ms FROM deployments ORDER BY appl")?;
        let rows = query.query_map([], |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}

/// Deletes generation `gid` of `appl`'s date and jobs; returns how many jobs.
fn forget_rows(db: &Connection, appl: &str, gid: &str) -> rusqlite::Result<usize> {
    db.execute("DELETE FROM generations WHERE appl = ?1 AND gid = ?2", params![appl, gid])?;
    db.execute("DELETE FROM dispatches WHERE appl = ?1 AND gid = ?2", params![appl, gid])?;
    db.execute("DELETE FROM assigned WHERE appl = ?1 AND gid = ?2", params![appl, gid])?;
    db.execute("DELETE FROM runs WHERE appl = ?1 AND gid = ?2", params![appl, gid])
}

/// Whether generation `gid` of `appl` has its end marked.
fn has_ended(db: &Connection, appl: &str, gid: &str) -> rusqlite::Result<bool> {
    db.query_row("SELECT 1 FROM ended WHERE appl = ?1 AND gid = ?2", params![appl, gid], |_| Ok(()))
        .optional()
        .map(|found| found.is_some())
}

/// Claims job `job` of generation `gid`, which has no row yet.
fn new_run(db: &Connection, appl: &str, gid: &str, job: &str) -> rusqlite::Result<Claim> {
    db.execute("INSERT INTO runs (appl, gid, job, attempt) VALUES (?1, ?2, ?3, 0)", params![appl, gid, job])?;
    Ok(Claim::New)
}

/// Job `job` of generation `gid`'s row in `runs`, if it has one.
fn run_row(db: &Connection, appl: &str, gid: &str, job: &str) -> rusqlite::Result<Option<RunRow>> {
    db.query_row(
        "SELECT attempt, status, exit FROM runs WHERE appl = ?1 AND gid = ?2 AND job = ?3",
        params![appl, gid, job],
        |row| Ok((row.get(0)?, row.get(1)?, row.get(2)?)),
    )
    .optional()
}
