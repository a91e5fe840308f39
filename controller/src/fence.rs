//! Fencing the reconcilers' writes to the leadership term that started them.
//!
//! Demotion stops the reconcilers by dropping their futures
//! ([`crate::runtime::run_while_leading`]), which cancels the requests they are awaiting.
//! Two gaps remain that dropping cannot close on its own: a write started just before the
//! demotion is noticed (the `leading` flag is read by another task), and a request whose
//! answer is slow (a partitioned or overloaded API server) stays in flight while a
//! follower's lease duration runs out.
//!
//! The [`Fence`] closes both in the client itself. The elector moves its deadline forward
//! at every successful acquire or renew to *the start of that request* plus
//! `renew_deadline` (the moment the leader demotes itself at the latest, which is before
//! any follower may take over, since `renew_deadline < lease_duration`), and clears it on
//! demotion. Every mutating request (`POST`, `PUT`, `PATCH`, `DELETE`) of a fenced client:
//!
//! * is refused without being sent ([`Fenced`] error) when there is no deadline or it has
//!   passed;
//! * is otherwise sent with the deadline as its timeout: at the deadline the client drops
//!   it (the connection is closed), so no write of this replica waits for an answer past
//!   the point where another replica may lead.
//!
//! Reads and watches are never fenced. What a fence cannot do is recall a request the API
//! server has already received: a write whose bytes left before the deadline may still be
//! applied by the server after it. Kubernetes offers no fencing token across objects; the
//! bound is the network delay of one request, and the next leader's first full apply
//! (server-side apply of the whole desired state) overwrites anything such a write did.

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};

use http::{Method, Request};
use kube::client::Body;
use tokio::time::Instant;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The deadline shared by the elector (which moves it) and the fenced client (which
/// enforces it). Clones share it.
#[derive(Debug, Clone, Default)]
pub struct Fence {
    until: Arc<Mutex<Option<Instant>>>,
}

impl Fence {
    /// Allows writes until `deadline`.
    pub fn hold_until(&self, deadline: Instant) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = Some(deadline);
    }

    /// Refuses every write from now on (demoted, or not yet elected).
    pub fn close(&self) {
        *self.until.lock().unwrap_or_else(|e| e.into_inner()) = None;
    }

    /// The deadline of writes, when they are allowed now.
    pub fn open_until(&self) -> Option<Instant> {
        let until = *self.until.lock().unwrap_or_else(|e| e.into_inner());
        until.filter(|d| *d > Instant::now())
    }
}

/// A write refused or abandoned because this replica no longer holds the Lease.
#[derive(Debug, thiserror::Error)]
#[error("not leading: writes are fenced ({0})")]
pub struct Fenced(&'static str);

fn is_write(m: &Method) -> bool {
    matches!(*m, Method::POST | Method::PUT | Method::PATCH | Method::DELETE)
}

impl<S> tower::Layer<S> for Fence {
    type Service = FencedService<S>;

    fn layer(&self, inner: S) -> Self::Service {
        FencedService { inner, fence: self.clone() }
    }
}

/// The client service under a [`Fence`] (made by its [`tower::Layer`]).
#[derive(Debug, Clone)]
pub struct FencedService<S> {
    inner: S,
    fence: Fence,
}

impl<S> tower::Service<Request<Body>> for FencedService<S>
where
    S: tower::Service<Request<Body>>,
    S::Error: Into<BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        if !is_write(req.method()) {
            let sent = self.inner.call(req);
            return Box::pin(async move { sent.await.map_err(Into::into) });
        }
        let Some(deadline) = self.fence.open_until() else {
            return Box::pin(async { Err(Fenced("refused before sending").into()) });
        };
        let sent = self.inner.call(req);
        Box::pin(async move {
            match tokio::time::timeout_at(deadline, sent).await {
                Ok(answer) => answer.map_err(Into::into),
                Err(_) => Err(Fenced("abandoned at the lease deadline").into()),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tower::{Layer, Service, ServiceExt};

    /// A service that answers after `delay`, counting the calls that reached it and the
    /// answers it completed.
    #[derive(Clone)]
    struct Slow {
        delay: Duration,
        reached: Arc<AtomicUsize>,
        answered: Arc<AtomicUsize>,
    }

    impl Service<Request<Body>> for Slow {
        type Response = ();
        type Error = BoxError;
        type Future = Pin<Box<dyn Future<Output = Result<(), BoxError>> + Send>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
            Poll::Ready(Ok(()))
        }
        fn call(&mut self, _: Request<Body>) -> Self::Future {
            self.reached.fetch_add(1, Ordering::SeqCst);
            let (delay, answered) = (self.delay, self.answered.clone());
            Box::pin(async move {
                tokio::time::sleep(delay).await;
                answered.fetch_add(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    fn req(m: Method) -> Request<Body> {
        Request::builder().method(m).uri("/api/v1/namespaces/ns/services/mesh").body(Body::empty()).unwrap()
    }

    #[tokio::test(start_paused = true)]
    async fn writes_pass_only_while_the_lease_is_held_and_never_outlive_it() {
        let fence = Fence::default();
        let slow = Slow { delay: Duration::from_secs(3), reached: Arc::default(), answered: Arc::default() };
        let mut svc = fence.layer(slow.clone());
        // Not leading: a write is refused before it is sent; a read goes through.
        let refused = svc.ready().await.unwrap().call(req(Method::PATCH)).await;
        assert!(refused.unwrap_err().to_string().contains("refused before sending"));
        assert_eq!(slow.reached.load(Ordering::SeqCst), 0);
        svc.ready().await.unwrap().call(req(Method::GET)).await.unwrap();
        // Leading for 5 s: a 3 s write completes.
        fence.hold_until(Instant::now() + Duration::from_secs(5));
        svc.ready().await.unwrap().call(req(Method::POST)).await.unwrap();
        // 2 s left: a 3 s write is abandoned at the deadline, its answer never awaited.
        let started = Instant::now();
        let cut = svc.ready().await.unwrap().call(req(Method::PUT)).await;
        assert!(cut.unwrap_err().to_string().contains("abandoned at the lease deadline"));
        assert_eq!(started.elapsed(), Duration::from_secs(2));
        assert_eq!(slow.answered.load(Ordering::SeqCst), 2, "the GET and the POST only");
        // Past the deadline, or closed on demotion: refused.
        assert!(svc.ready().await.unwrap().call(req(Method::DELETE)).await.is_err());
        fence.hold_until(Instant::now() + Duration::from_secs(5));
        fence.close();
        assert!(svc.ready().await.unwrap().call(req(Method::DELETE)).await.is_err());
        assert_eq!(slow.reached.load(Ordering::SeqCst), 3, "refused writes never reached the server");
    }
}
