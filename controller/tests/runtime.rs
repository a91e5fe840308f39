//! [`run_while_leading`] in process, with no cluster: the work runs exactly while leading,
//! is dropped the moment leadership is lost, starts again on re-election, is restarted if it
//! ends by itself, and everything stops on `stop` or when the election ends.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use qdr_controller::runtime::run_while_leading;
use tokio::sync::watch;

/// Counts starts and currently running instances of the work.
#[derive(Default)]
struct Work {
    starts: AtomicUsize,
    running: AtomicUsize,
}

struct Running(Arc<Work>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Work {
    /// A work future that runs until dropped, or for `lifetime` when given.
    fn start(self: &Arc<Self>, lifetime: Option<Duration>) -> impl Future<Output = ()> + use<> {
        self.starts.fetch_add(1, Ordering::SeqCst);
        self.running.fetch_add(1, Ordering::SeqCst);
        let guard = Running(self.clone());
        async move {
            let _guard = guard;
            match lifetime {
                Some(d) => tokio::time::sleep(d).await,
                None => std::future::pending().await,
            }
        }
    }

    fn state(&self) -> (usize, usize) {
        (self.starts.load(Ordering::SeqCst), self.running.load(Ordering::SeqCst))
    }
}

/// Runs [`run_while_leading`] over `work` (each instance living `lifetime`, or until
/// dropped) on a task.
fn spawn(
    work: &Arc<Work>,
    leading: watch::Receiver<bool>,
    stop: watch::Receiver<bool>,
    lifetime: Option<Duration>,
) -> tokio::task::JoinHandle<()> {
    let work = work.clone();
    tokio::spawn(run_while_leading(leading, stop, Duration::from_millis(10), move || work.start(lifetime)))
}

async fn wait_for(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !ok() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

#[tokio::test]
async fn work_runs_exactly_while_leading_and_stops_on_stop() {
    let work = Arc::new(Work::default());
    let (lead, leading) = watch::channel(false);
    let (stop_tx, stop) = watch::channel(false);
    let task = spawn(&work, leading, stop, None);

    // A follower does nothing.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(work.state(), (0, 0));

    lead.send_replace(true);
    wait_for("the work to start", || work.state() == (1, 1)).await;
    lead.send_replace(false);
    wait_for("the work to be dropped on a lost Lease", || work.state() == (1, 0)).await;
    lead.send_replace(true);
    wait_for("the work to start again on re-election", || work.state() == (2, 1)).await;

    stop_tx.send_replace(true);
    tokio::time::timeout(Duration::from_secs(5), task).await.expect("returns on stop").unwrap();
    assert_eq!(work.state(), (2, 0), "the work was dropped");
}

#[tokio::test]
async fn work_that_ends_while_leading_is_restarted() {
    let work = Arc::new(Work::default());
    let (lead, leading) = watch::channel(true);
    let (_stop_tx, stop) = watch::channel(false);
    let task = spawn(&work, leading, stop, Some(Duration::from_millis(5)));
    wait_for("three starts", || work.state().0 >= 3).await;
    // The election ends (its sender is dropped): run_while_leading returns.
    drop(lead);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("returns when the election ends")
        .unwrap();
    assert_eq!(work.state().1, 0);
}

#[tokio::test]
async fn a_follower_returns_when_stopped_or_when_the_election_ends() {
    for end_election in [false, true] {
        let work = Arc::new(Work::default());
        let (lead, leading) = watch::channel(false);
        let (stop_tx, stop) = watch::channel(false);
        let task = spawn(&work, leading, stop, None);
        tokio::time::sleep(Duration::from_millis(20)).await;
        if end_election {
            drop(lead);
        } else {
            stop_tx.send_replace(true);
        }
        tokio::time::timeout(Duration::from_secs(5), task).await.expect("returns").unwrap();
        assert_eq!(work.state(), (0, 0));
    }
}

/// A term that ends and a new one won before the runner looks (a leader that missed its
/// renew deadline and took its own Lease back at once): the work of the old term is still
/// dropped and a new one started, so no pass of a deposed term goes on into the next one.
#[tokio::test]
async fn a_term_lost_and_won_back_before_the_runner_looks_restarts_the_work() {
    let work = Arc::new(Work::default());
    let (lead, leading) = watch::channel(false);
    let (_stop_tx, stop) = watch::channel(false);
    let _task = spawn(&work, leading, stop, None);
    lead.send_replace(true);
    wait_for("the work to start", || work.state() == (1, 1)).await;
    // Demoted and elected again with no await in between: the runner sees only `true`.
    lead.send_replace(false);
    lead.send_replace(true);
    wait_for("the work of the new term", || work.state() == (2, 1)).await;
}
