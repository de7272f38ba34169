//! Composite detection on a thread of its own, beside the router task.
//!
//! With `composite.detection_thread` (the default), the router offloads its detectors
//! ([`crate::router::Options::offload_detection`]): each [`Output::Detect`] it emits is
//! queued here in order, the router task sends what one round of events produced as one
//! [`Batch`], and this thread applies the batches to the broker's [`Detection`] and sends
//! back the outputs of the matches they complete (composite notifications and matches
//! for neighbours), which the router task hands out like its own. Matching and routing
//! run on one core while detection runs on another; a publication's composite match
//! comes out after the outputs of the round that routed it instead of among them.
//!
//! **Time.** The thread has no clock of its own: every op carries the router's time, and
//! every batch the router's time when it was sent ([`Batch::until`]), which no later op
//! precedes. After a batch the thread runs the detectors' timers (windows, `until` ends)
//! up to that time, never beyond: a timer run ahead of ops still queued could drop a
//! partial match that one of them would complete, where the router running the detectors
//! itself would not. When the detectors are due ([`DetectionThread::due`]) and no batch
//! comes, the router task sends an empty one; a batch that moves the due time is answered
//! (with no outputs, if it made none), so that the router task looks again.
//!
//! **Memory.** The publications the detectors let go of are handed back with the outputs
//! ([`Detected::released`]) and dropped by the router task: freed on this thread, each
//! would write to the reference counts of names the router's thread copies for every
//! publication, and the two cores would pass those lines back and forth (see
//! [`crate::detector`]).
//!
//! At most [`QUEUED_BATCHES`] batches wait; the router task waits for room, so a
//! detection stage that falls behind slows the router rather than queuing without
//! bound. The router task reads the counters and what each detector holds through
//! [`DetectionThread::with`], which waits for the batch being applied, if any; a client's
//! stats request first waits for every batch sent before it
//! ([`DetectionThread::caught_up`]), so that it counts what the client's earlier requests
//! gave the detectors.
//! [`DetectionThread::stop`] ends the thread once it has applied what was queued.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{mpsc, watch};

use padres_lang::Stamped;

use crate::router::{Detection, DetectorOp, Output};

/// Most batches queued for the thread before the sender waits.
pub const QUEUED_BATCHES: usize = 64;

/// What one round of the router gave its detectors.
#[derive(Debug, Default)]
pub struct Batch {
    /// The ops, in order, each with the router's time when it decided.
    pub ops: Vec<(u64, DetectorOp)>,
    /// The router's time when it sent the batch: no later op is earlier, so the
    /// detectors' timers may run up to it.
    pub until: u64,
}

/// What the thread gives back for a batch.
#[derive(Debug, Default)]
pub struct Detected {
    /// The outputs of the matches it completed.
    pub outputs: Vec<Output>,
    /// The publications the detectors let go of, for the router task to drop.
    pub released: Vec<Arc<Stamped>>,
}

/// No timer due ([`DetectionThread::due`]).
const NOT_DUE: u64 = u64::MAX;

/// The detection thread's handle (see the module docs).
#[derive(Debug)]
pub struct DetectionThread {
    shared: Arc<Mutex<Detection>>,
    /// When the detectors' next timer is due, as of the last batch applied.
    due: Arc<AtomicU64>,
    /// `None` once stopping.
    ops: Option<mpsc::Sender<Batch>>,
    /// Batches queued so far.
    sent: AtomicU64,
    /// Batches the thread has applied so far.
    applied: watch::Receiver<u64>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DetectionThread {
    /// Starts a thread applying batches to `detection`. Returns the handle and the
    /// receiver of what the batches give back: one [`Detected`] per batch that produced
    /// outputs, released publications or moved the due time (then perhaps empty).
    ///
    /// # Errors
    /// The thread could not be started.
    pub fn spawn(detection: Detection) -> std::io::Result<(Self, mpsc::UnboundedReceiver<Detected>)> {
        let due = Arc::new(AtomicU64::new(detection.poll_timeout().unwrap_or(NOT_DUE)));
        let shared = Arc::new(Mutex::new(detection));
        let (ops, batches) = mpsc::channel(QUEUED_BATCHES);
        let (outputs, detected) = mpsc::unbounded_channel();
        let (applied_tx, applied) = watch::channel(0);
        let (state, next) = (shared.clone(), due.clone());
        let thread = std::thread::Builder::new()
            .name("padres-detect".into())
            .spawn(move || run(&state, &next, batches, &outputs, &applied_tx))?;
        let handle =
            Self { shared, due, ops: Some(ops), sent: AtomicU64::new(0), applied, thread: Some(thread) };
        Ok((handle, detected))
    }

    /// Queues `batch`, waiting while [`QUEUED_BATCHES`] are queued; false if the thread
    /// has stopped (it panicked).
    pub async fn send(&self, batch: Batch) -> bool {
        let sent = match &self.ops {
            Some(ops) => ops.send(batch).await.is_ok(),
            None => false,
        };
        self.sent.fetch_add(u64::from(sent), Ordering::Relaxed);
        sent
    }

    /// [`Self::send`] from a thread outside any async runtime.
    pub fn blocking_send(&self, batch: Batch) -> bool {
        let sent = self.ops.as_ref().is_some_and(|ops| ops.blocking_send(batch).is_ok());
        self.sent.fetch_add(u64::from(sent), Ordering::Relaxed);
        sent
    }

    /// Returns once the thread has applied every batch queued so far (at once if it has
    /// stopped): what [`Self::with`] reads after it includes them.
    pub async fn caught_up(&self) {
        let target = self.sent.load(Ordering::Relaxed);
        let mut applied = self.applied.clone();
        // An error: the thread has stopped, and nothing more will be applied.
        let _ = applied.wait_for(|&n| n >= target).await;
    }

    /// When the detectors' next timer is due (the router's time), as of the last batch
    /// applied: a batch whose [`Batch::until`] is no earlier runs it.
    pub fn due(&self) -> Option<u64> {
        Some(self.due.load(Ordering::Acquire)).filter(|&at| at != NOT_DUE)
    }

    /// Runs `f` on the detection stage between batches.
    pub fn with<R>(&self, f: impl FnOnce(&Detection) -> R) -> R {
        f(&self.shared.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Lets the thread apply what is queued (its outputs still go to the receiver), waits
    /// for it to end, and returns the detection stage.
    pub fn stop(mut self) -> Detection {
        self.finish();
        let shared = self.shared.clone();
        drop(self);
        let mutex = Arc::into_inner(shared).expect("the thread that shared it has ended");
        mutex.into_inner().unwrap_or_else(PoisonError::into_inner)
    }

    fn finish(&mut self) {
        // Closing the queue ends the thread's loop once the queue is empty.
        self.ops = None;
        let Some(thread) = self.thread.take() else { return };
        if thread.join().is_err() {
            tracing::error!("the composite detection thread panicked");
        }
    }
}

impl Drop for DetectionThread {
    fn drop(&mut self) {
        self.finish();
    }
}

fn run(
    shared: &Mutex<Detection>,
    due: &AtomicU64,
    mut batches: mpsc::Receiver<Batch>,
    outputs: &mpsc::UnboundedSender<Detected>,
    applied: &watch::Sender<u64>,
) {
    crate::detector::keep_released();
    let mut out = Vec::new();
    let mut count = 0;
    while let Some(batch) = batches.blocking_recv() {
        let mut detection = shared.lock().unwrap_or_else(PoisonError::into_inner);
        detection.apply_all(batch.ops, &mut out);
        detection.handle_timeout(batch.until);
        let next = detection.poll_timeout().unwrap_or(NOT_DUE);
        drop(detection);
        count += 1;
        applied.send_replace(count);
        // A new due time is sent too (if nothing else, as no outputs): it wakes the router
        // task, which computes its timers again.
        let moved = due.swap(next, Ordering::AcqRel) != next;
        let released = crate::detector::take_released();
        if moved || !out.is_empty() || !released.is_empty() {
            // The router task gone (shutting down): what it would get is dropped here.
            let _ = outputs.send(Detected { outputs: std::mem::take(&mut out), released });
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use padres_lang::{CompositeSubscription, MessageId, Name, Publication, Stamp, Stamped};

    use super::*;
    use crate::detector::Bounds;
    use crate::router::Hop;

    fn stamped(time: u64, text: &str) -> Arc<Stamped> {
        let publication: Publication = text.parse().expect("publication");
        let origin = Name::new("B1").expect("name");
        Arc::new(Stamped { stamp: Stamp::new(time, origin, time), publication: Arc::new(publication) })
    }

    /// A detector for a two-leaf pattern joined on `g` (`options` after it: `within`,
    /// `until`), its matches for client 7.
    fn add(id: u64, options: &str) -> DetectorOp {
        let cs: CompositeSubscription =
            format!("{{[class,eq,'a'],[g,eq,$S$g]}}&{{[class,eq,'b'],[g,eq,$S$g]}}{options}")
                .parse()
                .expect("pattern");
        let sub = MessageId::new(Name::new("B1").expect("name"), 1);
        DetectorOp::Add {
            id,
            cs: Arc::new(cs),
            parts: Vec::new(),
            leaf_of: Arc::from([0, 1]),
            subscribers: Arc::from([(Hop::Client(7), sub)]),
        }
    }

    /// Stops `thread`; returns its detection stage, and the outputs and the released
    /// publications it gave back.
    fn stopped(
        thread: DetectionThread,
        detected: &mut mpsc::UnboundedReceiver<Detected>,
    ) -> (Detection, Vec<Output>, Vec<Arc<Stamped>>) {
        let detection = thread.stop();
        let (mut got, mut released) = (Vec::new(), Vec::new());
        while let Ok(given) = detected.try_recv() {
            got.extend(given.outputs);
            released.extend(given.released);
        }
        (detection, got, released)
    }

    fn ops() -> Vec<(u64, DetectorOp)> {
        let mut ops = vec![(0, add(0, ""))];
        for g in 0..50 {
            let time = 1 + 2 * g;
            let a = stamped(time, &format!("[class,'a'],[g,'{g}']"));
            let b = stamped(time + 1, &format!("[class,'b'],[g,'{g}']"));
            ops.push((time, DetectorOp::Publication { id: 0, leaf: 0, stamped: a }));
            ops.push((time + 1, DetectorOp::Publication { id: 0, leaf: 1, stamped: b }));
        }
        ops.push((200, DetectorOp::Remove(0)));
        ops
    }

    #[test]
    fn the_thread_gives_what_the_stage_gives_in_the_router() {
        let mut inline = Detection::new(Bounds::DEFAULT);
        let mut expected = Vec::new();
        for (now, op) in ops() {
            inline.apply(now, op, &mut expected);
        }
        assert_eq!(expected.len(), 50, "one match per g");
        let (thread, mut detected) = DetectionThread::spawn(Detection::new(Bounds::DEFAULT)).expect("thread");
        // In batches of 1, 2, 3, ... ops, as rounds of a router task would send them (the
        // longer ones fetched ahead: `Detection::apply_all`).
        let mut ops = ops().into_iter();
        for size in 1.. {
            let batch: Vec<_> = ops.by_ref().take(size).collect();
            let Some(&(until, _)) = batch.last() else { break };
            assert!(thread.blocking_send(Batch { ops: batch, until }));
        }
        let (detection, got, released) = stopped(thread, &mut detected);
        assert_eq!(got, expected);
        // Every publication comes back to be dropped here: the handle its op carried, and
        // the stored partial match's when the detector went (the matches hold the rest).
        assert_eq!(released.len(), 200);
        for p in &released {
            let copies = Arc::strong_count(p);
            assert!(copies <= 3, "{copies} copies");
        }
        assert_eq!(detection.counters(), inline.counters());
        assert!(detection.is_empty(), "the detector was removed");
    }

    #[test]
    fn publications_the_detectors_let_go_of_come_back_to_be_dropped() {
        let bounds = Bounds { lateness_ms: 5, ..Bounds::DEFAULT };
        let mut given = Vec::new();
        let mut ops = vec![(0, add(0, " until {[class,eq,'end'],[g,eq,$S$g]}"))];
        for g in 0..30 {
            let time = 1 + 3 * g;
            for (offset, leaf, class) in [(0, Some(0), "a"), (1, Some(1), "b"), (2, None, "end")] {
                let p = stamped(time + offset, &format!("[class,'{class}'],[g,'{g}']"));
                given.push(p.clone());
                let op = match leaf {
                    Some(leaf) => DetectorOp::Publication { id: 0, leaf, stamped: p },
                    None => DetectorOp::End { id: 0, stamped: p },
                };
                ops.push((time + offset, op));
            }
        }
        // A part's match for a detector that is not here: dropped, its publication given back.
        let stray = stamped(100, "[class,'a'],[g,'x']");
        given.push(stray.clone());
        ops.push((100, DetectorOp::Part { id: 9, node: 0, pubs: vec![(0, stray)] }));
        let mut inline = Detection::new(bounds);
        let mut expected = Vec::new();
        for (now, op) in ops.clone() {
            inline.apply(now, op, &mut expected);
        }
        inline.handle_timeout(1_000);
        let (thread, mut detected) = DetectionThread::spawn(Detection::new(bounds)).expect("thread");
        for batch in ops.chunks(16) {
            let until = batch.last().map_or(0, |(now, _)| *now);
            assert!(thread.blocking_send(Batch { ops: batch.to_vec(), until }));
        }
        // Past every end's lateness: the ends are forgotten on the thread, and what they
        // ended dropped there.
        assert!(thread.blocking_send(Batch { ops: Vec::new(), until: 1_000 }));
        let (detection, got, released) = stopped(thread, &mut detected);
        assert_eq!(got, expected);
        let counters = detection.counters();
        assert_eq!(counters, inline.counters());
        assert_eq!((counters.matches, counters.ended, counters.stored), (30, 60, 0));
        for p in &given {
            assert!(released.iter().any(|r| Arc::ptr_eq(r, p)), "{} was not given back", p.stamp);
        }
    }

    #[test]
    fn the_thread_runs_timers_up_to_the_batches_times_only() {
        let bounds = Bounds { lateness_ms: 0, ..Bounds::DEFAULT };
        let (thread, mut detected) = DetectionThread::spawn(Detection::new(bounds)).expect("thread");
        let a = DetectorOp::Publication { id: 0, leaf: 0, stamped: stamped(1_000, "[class,'a'],[g,'x']") };
        let ops = vec![(1_000, add(0, " within 50ms")), (1_000, a)];
        assert!(thread.blocking_send(Batch { ops, until: 1_000 }));
        let deadline = Instant::now() + Duration::from_secs(10);
        // The thread tells when the window is due, answering the batch that set it.
        while thread.due().is_none() {
            assert!(Instant::now() < deadline, "no due time came");
            std::thread::sleep(Duration::from_millis(5));
        }
        let due = thread.due().expect("due");
        assert!((1_050..=1_051).contains(&due), "due at {due}");
        // The batch that moved the due time is answered (after the due time is set).
        while detected.try_recv().is_err() {
            assert!(Instant::now() < deadline, "the batch that moved the due time was not answered");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The window passes only with a batch's time: the `b` below, inside it, still
        // pairs with the `a`.
        let b = DetectorOp::Publication { id: 0, leaf: 1, stamped: stamped(1_040, "[class,'b'],[g,'x']") };
        assert!(thread.blocking_send(Batch { ops: vec![(1_040, b)], until: 1_040 }));
        assert!(thread.blocking_send(Batch { ops: Vec::new(), until: due }));
        let detection = thread.stop();
        let counters = detection.counters();
        // The pair matched; the `a` expired at its due time, the `b` waits for its own.
        assert_eq!((counters.matches, counters.stored, counters.expired), (1, 1, 1));
    }
}
