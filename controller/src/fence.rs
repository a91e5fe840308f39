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
//! The same fence guards the controller's connections to the routers ([`FencedIo`]): the
//! router management writes (`CREATE`, `DELETE`) are checked against it before they are
//! handed to the AMQP client, and every byte of a fenced connection is checked against it
//! again when it is written to the socket, so a write checked in one term and still queued
//! in the client's tasks when the process was stopped (SIGSTOP, a frozen VM, a long GC-like
//! pause of the node) is not sent after the term has ended.
//!
//! The API client's connections are fenced in the same way ([`client`]): the tasks that
//! write its requests to the sockets run only while the fence is open, so the rest of a
//! request the process was writing when it stopped is not sent after the term.
//!
//! Reads and watches of the API server are never refused before sending. What a fence
//! cannot do is recall a request the API server has already received: a write whose bytes
//! left before the deadline (or were in the kernel's socket buffer when the process
//! stopped) may still be applied by the server after it. Kubernetes offers no fencing token across objects; the
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

/// The executor of a fenced client's connections (hyper's): every task hyper spawns for
/// the client (a connection's reads and writes, a connection being made) is polled only
/// while `fence` is open, and dropped at its first poll after it closed, which closes the
/// connection with whatever it had not sent.
///
/// What it closes: the [`FencedService`] checks a write before hyper takes it; the request's
/// bytes are written by the connection's task, later. A replica stopped in between (or in
/// the middle of a large request) resumed after its term and, without this, sent the rest:
/// the API server applied a write of a term that had ended
/// (`controller/tests/lease.rs`, `a_write_taken_before_the_term_ended_is_not_sent_after_it`).
#[derive(Debug, Clone)]
pub struct FencedExecutor {
    fence: Fence,
}

impl<F> hyper::rt::Executor<F> for FencedExecutor
where
    F: Future<Output = ()> + Send + 'static,
{
    fn execute(&self, task: F) {
        let fence = self.fence.clone();
        let mut task = Box::pin(task);
        tokio::spawn(std::future::poll_fn(move |cx| {
            if fence.open_until().is_none() {
                return Poll::Ready(());
            }
            task.as_mut().poll(cx)
        }));
    }
}

/// The API client of the reconcilers, fenced by `fence`: writes refused before sending
/// outside the term and abandoned at its deadline ([`FencedService`]), and its connections'
/// tasks stopped once the term is over ([`FencedExecutor`]), so nothing of any request
/// leaves after it. Reads and watches pass while the term is open; the client is meant for
/// what runs only while leading (the elector keeps a client of its own).
///
/// # Errors
/// As [`kube::client::ClientBuilder`]'s `try_from` (TLS or proxy settings of `config` it
/// cannot use).
pub fn client(config: kube::Config, fence: &Fence) -> Result<kube::Client, kube::Error> {
    let executor = FencedExecutor { fence: fence.clone() };
    Ok(kube::client::ClientBuilder::try_from((config, executor))?.with_layer(fence).build())
}

/// A connection guarded by a [`Fence`]: every write and flush is checked against it at the
/// moment it would reach the stream under it (for a router connection, the TCP socket under
/// TLS), and refused once the fence is closed or its deadline passed, with an
/// [`std::io::ErrorKind::PermissionDenied`] error carrying [`Fenced`]. Reads and the shutdown
/// pass, so the peer still sees the connection end. `fence` `None`: no guard (tests, tools).
///
/// What it closes: the AMQP client hands a frame through its link, session and connection
/// tasks before the socket write; a replica stopped between the check of a write against the
/// fence and that socket write resumes with the frame queued there, and without this guard
/// sends it once it runs again, after another replica may have started writing the same
/// router. What is left is the time between this check and the `write` system call, within
/// one poll and without an await, as for the API client's fence.
#[derive(Debug)]
pub struct FencedIo<S> {
    inner: S,
    fence: Option<Fence>,
}

impl<S> FencedIo<S> {
    /// `inner` guarded by `fence` (`None`: not guarded).
    pub fn new(inner: S, fence: Option<&Fence>) -> Self {
        FencedIo { inner, fence: fence.cloned() }
    }

    fn refused(&self) -> Option<std::io::Error> {
        let closed = self.fence.as_ref().is_some_and(|f| f.open_until().is_none());
        closed.then(|| {
            std::io::Error::new(std::io::ErrorKind::PermissionDenied, Fenced("refused at the socket"))
        })
    }
}

impl<S: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for FencedIo<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl<S: tokio::io::AsyncWrite + Unpin> tokio::io::AsyncWrite for FencedIo<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        if let Some(e) = self.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        if let Some(e) = self.refused() {
            return Poll::Ready(Err(e));
        }
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
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

    /// The guard of a router connection: bytes pass while the fence is open; a write still
    /// waiting for room in the stream when the fence closes (a process stopped with a frame
    /// queued) is refused when it is polled again, its bytes never written; reads pass.
    #[tokio::test]
    async fn a_write_queued_when_the_fence_closes_is_refused_at_the_socket() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let fence = Fence::default();
        fence.hold_until(Instant::now() + Duration::from_secs(60));
        let (ours, mut theirs) = tokio::io::duplex(8);
        let mut guarded = FencedIo::new(ours, Some(&fence));
        // 8 bytes fit; the other 8 wait for room.
        let writer = tokio::spawn(async move {
            let written = guarded.write_all(&[7u8; 16]).await;
            (written, guarded)
        });
        let mut first = [0u8; 8];
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!writer.is_finished(), "the second 8 bytes wait for room");
        fence.close();
        theirs.read_exact(&mut first).await.unwrap();
        let (written, mut guarded) = writer.await.unwrap();
        let e = written.unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("not leading"), "{e}");
        assert!(guarded.flush().await.is_err());
        // Nothing of the refused write came through; the other side's bytes still do.
        theirs.write_all(b"answer").await.unwrap();
        let mut answer = [0u8; 6];
        guarded.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"answer");
        guarded.shutdown().await.unwrap();
        let mut rest = Vec::new();
        theirs.read_to_end(&mut rest).await.unwrap();
        assert!(rest.is_empty(), "refused bytes were written: {rest:?}");
        // Unguarded: the same stream type passes everything.
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut plain = FencedIo::new(ours, None);
        plain.write_all(b"free").await.unwrap();
        let mut four = [0u8; 4];
        theirs.read_exact(&mut four).await.unwrap();
    }

    /// The executor of a fenced client: a task runs while the fence is open and is dropped
    /// (never polled again) at its first wake-up after the fence closed.
    #[tokio::test]
    async fn a_fenced_clients_tasks_stop_when_the_term_ends() {
        use hyper::rt::Executor;
        let fence = Fence::default();
        fence.hold_until(Instant::now() + Duration::from_secs(60));
        let (polls, dropped) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        struct OnDrop(Arc<AtomicUsize>);
        impl Drop for OnDrop {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<()>();
        let (p, d) = (polls.clone(), OnDrop(dropped.clone()));
        FencedExecutor { fence: fence.clone() }.execute(async move {
            let _d = d;
            while rx.recv().await.is_some() {
                p.fetch_add(1, Ordering::SeqCst);
            }
        });
        tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(polls.load(Ordering::SeqCst), 1, "runs while the term is open");
        fence.close();
        tx.send(()).unwrap();
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(polls.load(Ordering::SeqCst), 1, "not polled once the term is over");
        assert_eq!(dropped.load(Ordering::SeqCst), 1, "dropped, closing what it held");
        assert!(tx.send(()).is_err(), "its end of the channel is gone");
    }
}
