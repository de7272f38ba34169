//! Composite detection on a thread of its own, beside the router task.
//!
//! With `composite.detection_thread` (the default), the router offloads its detectors
//! ([`crate::router::Options::offload_detection`]): each [`Output::Detect`] it emits is
//! queued here in order, the router task sends what one round of events produced as one
//! batch, and this thread applies the batches to the broker's [`Detection`] and sends
//! back the outputs of the matches they complete (composite notifications and matches
//! for neighbours), which the router task hands out like its own. Matching and routing
//! run on one core while detection runs on another; a publication's composite match
//! comes out after the outputs of the round that routed it instead of among them.
//!
//! At most [`QUEUED_BATCHES`] batches wait; the router task waits for room, so a
//! detection stage that falls behind slows the router rather than queuing without
//! bound. The thread also runs the detectors' timers (windows, `until` ends) on the
//! router's clock when no batch comes. The router task reads the counters and what each
//! detector holds through [`DetectionThread::with`], which waits for the batch being
//! applied, if any. Dropping the [`DetectionThread`] ends the thread once it has applied
//! what was queued.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use crate::detector::Bounds;
use crate::router::{Detection, DetectorOp, Output};

/// Most batches queued for the thread before the sender waits.
pub const QUEUED_BATCHES: usize = 64;

/// A batch of ops, each with the router's time when it decided.
pub type Batch = Vec<(u64, DetectorOp)>;

/// The detection thread's handle (see the module docs).
#[derive(Debug)]
pub struct DetectionThread {
    shared: Arc<Mutex<Detection>>,
    /// `None` once stopping.
    ops: Option<mpsc::Sender<Batch>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl DetectionThread {
    /// Starts a thread applying batches to `detection`; `clock` is the router's clock (in
    /// the milliseconds its inputs are given at), for the timers. Returns the handle and
    /// the receiver of the outputs the batches produce, one `Vec` per batch that produced
    /// any.
    ///
    /// # Errors
    /// The thread or its timer could not be started.
    pub fn spawn(
        detection: Detection,
        clock: impl Fn() -> u64 + Send + 'static,
    ) -> std::io::Result<(Self, mpsc::UnboundedReceiver<Vec<Output>>)> {
        let shared = Arc::new(Mutex::new(detection));
        let (ops, batches) = mpsc::channel(QUEUED_BATCHES);
        let (outputs, detected) = mpsc::unbounded_channel();
        let runtime = tokio::runtime::Builder::new_current_thread().enable_time().build()?;
        let state = shared.clone();
        let thread = std::thread::Builder::new()
            .name("padres-detect".into())
            .spawn(move || runtime.block_on(run(&state, batches, &outputs, clock)))?;
        Ok((Self { shared, ops: Some(ops), thread: Some(thread) }, detected))
    }

    /// Queues `batch`, waiting while [`QUEUED_BATCHES`] are queued; false if the thread
    /// has stopped (it panicked).
    pub async fn send(&self, batch: Batch) -> bool {
        match &self.ops {
            Some(ops) => ops.send(batch).await.is_ok(),
            None => false,
        }
    }

    /// [`Self::send`] from a thread outside any async runtime.
    pub fn blocking_send(&self, batch: Batch) -> bool {
        self.ops.as_ref().is_some_and(|ops| ops.blocking_send(batch).is_ok())
    }

    /// Runs `f` on the detection stage between batches.
    pub fn with<R>(&self, f: impl FnOnce(&Detection) -> R) -> R {
        f(&self.shared.lock().unwrap_or_else(PoisonError::into_inner))
    }

    /// Lets the thread apply what is queued, waits for it to end, and returns the
    /// detection stage.
    pub fn stop(mut self) -> Detection {
        self.finish();
        let shared =
            std::mem::replace(&mut self.shared, Arc::new(Mutex::new(Detection::new(Bounds::DEFAULT))));
        match Arc::try_unwrap(shared) {
            Ok(mutex) => mutex.into_inner().unwrap_or_else(PoisonError::into_inner),
            Err(_) => unreachable!("the thread that shared it has ended"),
        }
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

async fn run(
    shared: &Mutex<Detection>,
    mut batches: mpsc::Receiver<Batch>,
    outputs: &mpsc::UnboundedSender<Vec<Output>>,
    clock: impl Fn() -> u64,
) {
    let lock = || shared.lock().unwrap_or_else(PoisonError::into_inner);
    let mut out = Vec::new();
    loop {
        let due = lock().poll_timeout();
        let sleep = due.map(|at| Instant::now() + Duration::from_millis(at.saturating_sub(clock())));
        tokio::select! {
            batch = batches.recv() => {
                let Some(batch) = batch else { break };
                let mut detection = lock();
                for (now, op) in batch {
                    detection.apply(now, op, &mut out);
                }
                drop(detection);
                // The router task gone (shutting down): what it would send goes nowhere.
                if !out.is_empty() && outputs.send(std::mem::take(&mut out)).is_err() {
                    out.clear();
                }
            }
            () = tokio::time::sleep_until(sleep.unwrap_or_else(Instant::now).into()), if sleep.is_some() => {
                lock().handle_timeout(clock());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU64, Ordering};

    use padres_lang::{CompositeSubscription, MessageId, Name, Publication, Stamp, Stamped};

    use super::*;
    use crate::router::Hop;

    fn stamped(time: u64, text: &str) -> Arc<Stamped> {
        let publication: Publication = text.parse().expect("publication");
        let origin = Name::new("B1").expect("name");
        Arc::new(Stamped { stamp: Stamp::new(time, origin, time), publication: Arc::new(publication) })
    }

    /// A detector for a two-leaf pattern joined on `g`, its matches for client 7.
    fn add(id: u64, window: &str) -> DetectorOp {
        let cs: CompositeSubscription =
            format!("{{[class,eq,'a'],[g,eq,$S$g]}}&{{[class,eq,'b'],[g,eq,$S$g]}}{window}")
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

    fn ops() -> Batch {
        let mut ops = vec![(0, add(0, ""))];
        for g in 0..50 {
            let time = 1 + 2 * g;
            ops.push((
                time,
                DetectorOp::Publication {
                    id: 0,
                    leaf: 0,
                    stamped: stamped(time, &format!("[class,'a'],[g,{g}]")),
                },
            ));
            ops.push((
                time + 1,
                DetectorOp::Publication {
                    id: 0,
                    leaf: 1,
                    stamped: stamped(time + 1, &format!("[class,'b'],[g,{g}]")),
                },
            ));
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
        let (thread, mut detected) =
            DetectionThread::spawn(Detection::new(Bounds::DEFAULT), || 0).expect("thread");
        // In batches of three ops, as rounds of a router task would send them.
        for batch in ops().chunks(3) {
            assert!(thread.blocking_send(batch.to_vec()));
        }
        let detection = thread.stop();
        let mut got = Vec::new();
        while let Ok(outputs) = detected.try_recv() {
            got.extend(outputs);
        }
        assert_eq!(got, expected);
        assert_eq!(detection.counters(), inline.counters());
        assert!(detection.is_empty(), "the detector was removed");
    }

    #[test]
    fn the_thread_expires_windows_on_the_clock_when_no_op_comes() {
        let clock = Arc::new(AtomicU64::new(1_000));
        let read = clock.clone();
        let bounds = Bounds { lateness_ms: 0, ..Bounds::DEFAULT };
        let (thread, _detected) =
            DetectionThread::spawn(Detection::new(bounds), move || read.load(Ordering::Relaxed))
                .expect("thread");
        let a = DetectorOp::Publication { id: 0, leaf: 0, stamped: stamped(1_000, "[class,'a'],[g,1]") };
        assert!(thread.blocking_send(vec![(1_000, add(0, " within 50ms")), (1_000, a)]));
        let stored = |thread: &DetectionThread| thread.with(|d| (d.counters().stored, d.counters().expired));
        let deadline = Instant::now() + Duration::from_secs(10);
        while stored(&thread) != (1, 0) {
            assert!(Instant::now() < deadline, "the partial match was never stored");
            std::thread::sleep(Duration::from_millis(5));
        }
        // The window passes on the router's clock; no op follows.
        clock.store(1_100, Ordering::Relaxed);
        while stored(&thread) != (0, 1) {
            assert!(Instant::now() < deadline, "the window never expired: {:?}", stored(&thread));
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
