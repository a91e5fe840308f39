//! A counting semaphore whose waiters are served fairly by flow: the permits freed go round
//! the flows that wait, one each in turn, first come first served within a flow.
//!
//! The admission port keys flows by the peer's IP address. The API server reaches the
//! webhook from its own address (a control-plane node's, or its host network's); anything
//! else that reaches the port (any pod, when `--client-ca` is not set) comes from another.
//! So a flood from one pod, however many connections and requests it opens, waits in its own
//! line and takes at most every other permit while the API server has a review waiting: the
//! API server's reviews wait for at most one review of each other flow, not for the whole
//! flood (as the API server's own priority and fairness queues requests by flow). Floods from
//! many addresses at once still share the port; `--client-ca` is the complete answer.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use tokio::sync::oneshot;

/// A flow: the address requests come from (`None`: unknown, one flow of its own).
pub type Flow = Option<IpAddr>;

/// A semaphore of `permits` served round-robin over flows ([`Fair::acquire`]).
#[derive(Debug)]
pub struct Fair {
    state: Mutex<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Permits not held by anyone.
    free: usize,
    /// Flows with waiters, in the order they are served next.
    turn: VecDeque<Flow>,
    /// Each flow's waiters, in arrival order.
    waiting: HashMap<Flow, VecDeque<oneshot::Sender<Permit>>>,
}

/// A permit of a [`Fair`] semaphore, returned to it when dropped.
#[derive(Debug)]
pub struct Permit {
    lane: Option<Arc<Fair>>,
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(lane) = self.lane.take() {
            lane.release();
        }
    }
}

impl Fair {
    /// A semaphore of `permits`.
    pub fn new(permits: usize) -> Arc<Fair> {
        Arc::new(Fair { state: Mutex::new(State { free: permits, ..State::default() }) })
    }

    /// Permits free now.
    pub fn available_permits(&self) -> usize {
        self.lock().free
    }

    /// Requests waiting now, over all flows.
    pub fn waiting(&self) -> usize {
        self.lock().waiting.values().map(VecDeque::len).sum()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A permit for a request of `flow`: at once when one is free and nobody waits;
    /// otherwise in line, served when the permits freed reach `flow`'s turn. Cancel-safe:
    /// a waiter dropped before its turn takes nothing, and a permit handed to a waiter that
    /// has gone is passed on.
    pub async fn acquire(self: &Arc<Self>, flow: Flow) -> Permit {
        let rx = {
            let mut st = self.lock();
            if st.free > 0 && st.turn.is_empty() {
                st.free -= 1;
                return Permit { lane: Some(self.clone()) };
            }
            let (tx, rx) = oneshot::channel();
            let queue = st.waiting.entry(flow).or_default();
            queue.push_back(tx);
            if queue.len() == 1 {
                st.turn.push_back(flow);
            }
            rx
        };
        match rx.await {
            Ok(permit) => permit,
            // Never: a sender is only dropped after a send, or with the semaphore.
            Err(_) => Permit { lane: None },
        }
    }

    /// A permit is back: hands it to the first waiter of the flow whose turn it is (that flow
    /// then goes to the back of the line), or keeps it free.
    fn release(self: &Arc<Self>) {
        let mut st = self.lock();
        while let Some(flow) = st.turn.pop_front() {
            let queue = st.waiting.get_mut(&flow).expect("a flow in turn has waiters");
            let tx = queue.pop_front().expect("a flow in turn has waiters");
            if queue.is_empty() {
                st.waiting.remove(&flow);
            } else {
                st.turn.push_back(flow);
            }
            match tx.send(Permit { lane: Some(self.clone()) }) {
                Ok(()) => return,
                // The waiter has gone: take the permit back without releasing it again.
                Err(mut unclaimed) => unclaimed.lane = None,
            }
        }
        st.free += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn ip(last: u8) -> Flow {
        Some(IpAddr::from([127, 0, 0, last]))
    }

    /// With one permit: a flood of one flow queued first does not keep another flow's
    /// request waiting behind it; the flows alternate.
    #[tokio::test]
    async fn freed_permits_go_round_the_waiting_flows() {
        let lane = Fair::new(1);
        let held = lane.acquire(ip(2)).await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for (i, flow) in [ip(2), ip(2), ip(2), ip(1), ip(2), ip(1)].into_iter().enumerate() {
            let (lane, order) = (lane.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let p = lane.acquire(flow).await;
                order.lock().unwrap().push((i, flow));
                tokio::time::sleep(Duration::from_millis(5)).await;
                drop(p);
            }));
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(lane.waiting(), 6);
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        let served: Vec<usize> = order.lock().unwrap().iter().map(|(i, _)| *i).collect();
        // Flow .2 was first in line: 0, then .1's 3, then .2's 1, .1's 5, then .2's rest.
        assert_eq!(served, [0, 3, 1, 5, 2, 4]);
        assert_eq!(lane.available_permits(), 1);
        assert_eq!(lane.waiting(), 0);
    }

    /// A waiter that gives up (its request timed out) takes no permit: the next is served
    /// and none is lost.
    #[tokio::test]
    async fn a_cancelled_waiter_loses_no_permit() {
        let lane = Fair::new(1);
        let held = lane.acquire(ip(1)).await;
        let gone = tokio::time::timeout(Duration::from_millis(20), lane.acquire(ip(2))).await;
        assert!(gone.is_err(), "no permit was free");
        let next = tokio::spawn({
            let lane = lane.clone();
            async move { lane.acquire(ip(3)).await }
        });
        tokio::time::sleep(Duration::from_millis(20)).await;
        drop(held);
        let p = tokio::time::timeout(Duration::from_secs(5), next).await.expect("served").unwrap();
        drop(p);
        assert_eq!(lane.available_permits(), 1);
        assert_eq!(lane.waiting(), 0);
    }
}
