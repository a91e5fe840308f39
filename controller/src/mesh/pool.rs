//! Connection slots to routers, shared fairly across namespaces.
//!
//! One controller serves every tenant, so the routers of one namespace must not be able to
//! hold every connection the controller allows: routers that accept and never answer (or a
//! default-deny NetworkPolicy that drops port 55670) hold a slot for the whole read timeout.
//! [`Pool`] has [`Pool::total`] slots; one namespace holds at most
//! [`Pool::per_namespace`] of them, and a freed slot goes to the waiting namespace that
//! holds the fewest (ties: the one that has waited longest). So with `total` 8 and
//! `per_namespace` 4, a namespace full of silent routers leaves at least 4 slots to the
//! others, and each other namespace gets the next free one ahead of it.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// A held slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    pool: Arc<Inner>,
    namespace: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.pool.release(&self.namespace);
    }
}

#[derive(Default)]
struct State {
    running: HashMap<String, usize>,
    total_running: usize,
    /// Waiters by namespace, each with the sequence number of its request.
    waiting: BTreeMap<String, VecDeque<(u64, oneshot::Sender<()>)>>,
    seq: u64,
}

struct Inner {
    total: usize,
    per_namespace: usize,
    state: Mutex<State>,
}

impl std::fmt::Debug for Inner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("total", &self.total)
            .field("per_namespace", &self.per_namespace)
            .finish()
    }
}

impl Inner {
    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Gives a slot of `namespace` back and hands free slots to waiters.
    fn release(&self, namespace: &str) {
        let mut s = self.lock();
        if let Some(n) = s.running.get_mut(namespace) {
            *n -= 1;
            if *n == 0 {
                s.running.remove(namespace);
            }
        }
        s.total_running -= 1;
        self.hand_out(&mut s);
    }

    /// While a slot is free, gives it to the waiting namespace with the fewest slots (ties:
    /// the oldest request) that is under its share.
    fn hand_out(&self, s: &mut State) {
        while s.total_running < self.total {
            let next = (s.waiting.iter())
                .filter(|(ns, q)| {
                    !q.is_empty() && s.running.get(*ns).copied().unwrap_or(0) < self.per_namespace
                })
                .min_by_key(|(ns, q)| {
                    (s.running.get(*ns).copied().unwrap_or(0), q.front().map_or(0, |w| w.0))
                })
                .map(|(ns, _)| ns.clone());
            let Some(ns) = next else { return };
            let queue = s.waiting.get_mut(&ns).expect("chosen from the map");
            let (_, waiter) = queue.pop_front().expect("not empty");
            if queue.is_empty() {
                s.waiting.remove(&ns);
            }
            // A waiter that gave up (its deadline passed) takes no slot.
            if waiter.send(()).is_ok() {
                *s.running.entry(ns).or_default() += 1;
                s.total_running += 1;
            }
        }
    }
}

/// Fair connection slots (see the module docs). Cloning shares the slots.
#[derive(Debug, Clone)]
pub struct Pool(Arc<Inner>);

impl Pool {
    /// A pool of `total` slots, at most `per_namespace` (at least 1) held by one namespace.
    pub fn new(total: usize, per_namespace: usize) -> Self {
        Pool(Arc::new(Inner {
            total: total.max(1),
            per_namespace: per_namespace.clamp(1, total.max(1)),
            state: Mutex::default(),
        }))
    }

    /// The slots in all.
    pub fn total(&self) -> usize {
        self.0.total
    }

    /// The most slots one namespace holds.
    pub fn per_namespace(&self) -> usize {
        self.0.per_namespace
    }

    /// Slots held now, in all.
    pub fn running(&self) -> usize {
        self.0.lock().total_running
    }

    /// A slot for a connection to a router of `namespace`, or `None` when none was free for
    /// it by `deadline`.
    pub async fn acquire(&self, namespace: &str, deadline: tokio::time::Instant) -> Option<Slot> {
        let rx = {
            let mut s = self.0.lock();
            let (tx, rx) = oneshot::channel();
            let seq = s.seq;
            s.seq += 1;
            s.waiting.entry(namespace.to_string()).or_default().push_back((seq, tx));
            self.0.hand_out(&mut s);
            rx
        };
        let slot = || Slot { pool: self.0.clone(), namespace: namespace.to_string() };
        let mut rx = rx;
        match tokio::time::timeout_at(deadline, &mut rx).await {
            Ok(Ok(())) => Some(slot()),
            Ok(Err(_)) => None,
            Err(_) => {
                // Handed a slot at the last moment: give it back.
                rx.close();
                if rx.try_recv().is_ok() {
                    drop(slot());
                }
                let mut s = self.0.lock();
                if let Some(q) = s.waiting.get_mut(namespace) {
                    q.retain(|(_, w)| !w.is_closed());
                    if q.is_empty() {
                        s.waiting.remove(namespace);
                    }
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;

    fn later(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    #[tokio::test(start_paused = true)]
    async fn one_namespace_holds_at_most_its_share_and_another_gets_a_slot_at_once() {
        let pool = Pool::new(8, 4);
        let mut held = Vec::new();
        for _ in 0..4 {
            held.push(pool.acquire("silent", later(5000)).await.expect("a slot"));
        }
        // A fifth of the same namespace waits, though 4 slots are free.
        let fifth = tokio::spawn({
            let pool = pool.clone();
            async move { pool.acquire("silent", later(100)).await.is_some() }
        });
        assert!(!fifth.await.unwrap(), "a namespace got more than its share");
        // Another namespace gets one at once.
        let other = pool.acquire("healthy", later(1)).await;
        assert!(other.is_some());
        assert_eq!(pool.running(), 5);
        drop(other);
        drop(held);
        assert_eq!(pool.running(), 0);
    }

    #[tokio::test(start_paused = true)]
    async fn a_freed_slot_goes_to_the_namespace_holding_the_fewest() {
        let pool = Pool::new(2, 2);
        let a1 = pool.acquire("a", later(1000)).await.unwrap();
        let _a2 = pool.acquire("a", later(1000)).await.unwrap();
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut waiters = Vec::new();
        // "a" asks first, then "b": "b" holds none, so it is served first.
        for ns in ["a", "b"] {
            let (pool, order) = (pool.clone(), order.clone());
            waiters.push(tokio::spawn(async move {
                let slot = pool.acquire(ns, later(1000)).await;
                order.lock().unwrap().push(ns);
                tokio::time::sleep(Duration::from_millis(10)).await;
                drop(slot);
            }));
            tokio::task::yield_now().await;
        }
        drop(a1);
        for w in waiters {
            w.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec!["b", "a"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_waiter_whose_deadline_passed_takes_no_slot() {
        let pool = Pool::new(1, 1);
        let held = pool.acquire("a", later(10)).await.unwrap();
        assert!(pool.acquire("b", later(10)).await.is_none());
        drop(held);
        assert_eq!(pool.running(), 0, "the gone waiter was given the slot");
        assert!(pool.acquire("b", later(10)).await.is_some());
    }
}
