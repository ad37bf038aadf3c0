//! What the upstream sent at once reaches the client at once.
//!
//! hyper hands an HTTP/1.1 upstream body over one chunk at a time (its connection task decodes
//! the next chunk only after the body's reader took the last), and its server writes out
//! whatever the body has given it as soon as the body has nothing ready. A provider's stream is
//! one chunk per event, and events come in bursts (a block's start, a ping and the first delta
//! in one packet; a whole short answer in a few): relayed as they were handed over, each event
//! is its own `writev` and its own wake-up of the client, ten for a short answer where the
//! upstream sent one packet. Measured on the Claude Code body (BENCHMARKS.md, "What the upstream
//! sent at once"), that was most of what a bare relay added to a request.
//!
//! [`Gather`] lets the upstream's connection task run once before a burst goes on: when the
//! body has given data and has nothing more ready, it yields one turn of the runtime (waking
//! itself, so the connection task it just woke runs first) and gathers what that turn decoded;
//! when a turn brings nothing, what it holds goes on as one frame. A stream whose events come
//! apart in time loses one turn per burst, microseconds; nothing waits on a timer, and the bytes
//! are the upstream's own, in their order (only the chunk boundaries of the client's connection
//! change, which carry no meaning).
//!
//! A turn is told from hyper polling the body again within the same poll of its task (it does,
//! after a flush) by [`counting_turns`], which wraps each connection's task and counts its
//! polls on the thread. A body polled outside such a task hands its frames on as they come.

use std::cell::Cell;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{Bytes, BytesMut};
use http_body::{Body, Frame, SizeHint};

/// What a burst gathers before it goes on without waiting for more: a few writes' worth.
const MAX_GATHERED: usize = 64 << 10;

/// A chunk this large goes on as it is (copying it to join others would cost more than the
/// write it saves).
const ALONE: usize = 16 << 10;

/// What a poll of a body with error `E` gives when ready.
type Polled<E> = Option<Result<Frame<Bytes>, E>>;

thread_local! {
    /// Polls of counted tasks on this thread; 0 while none ever ran here.
    static TURNS: Cell<u64> = const { Cell::new(0) };
}

/// Runs `task`, counting each of its polls as a turn (see the module's doc).
pub(crate) async fn counting_turns<F: Future>(task: F) -> F::Output {
    let mut task = std::pin::pin!(task);
    std::future::poll_fn(|cx| {
        TURNS.with(|turns| turns.set(turns.get().wrapping_add(1).max(1)));
        task.as_mut().poll(cx)
    })
    .await
}

fn turn() -> u64 {
    TURNS.with(Cell::get)
}

/// A body whose data frames ready at once are handed on as one (its errors as `B`'s).
pub(crate) struct Gather<B: Body> {
    inner: B,
    /// Data taken from `inner` and not yet handed on, in order.
    gathered: Vec<Bytes>,
    gathered_len: usize,
    /// The turn in which this body yielded for more, since `inner` last gave data.
    yielded_in: Option<u64>,
    /// What `inner` gave after `gathered` (its end, an error, trailers): handed on next.
    after: Option<Polled<B::Error>>,
}

impl<B: Body> Gather<B> {
    pub(crate) fn new(inner: B) -> Gather<B> {
        Gather {
            inner,
            gathered: Vec::new(),
            gathered_len: 0,
            yielded_in: None,
            after: None,
        }
    }

    /// The gathered data as one frame.
    fn hand_on(&mut self) -> Poll<Polled<B::Error>> {
        self.yielded_in = None;
        self.gathered_len = 0;
        let data = match self.gathered.len() {
            1 => self.gathered.pop().unwrap_or_default(),
            _ => {
                let size = self.gathered.iter().map(Bytes::len).sum();
                let mut joined = BytesMut::with_capacity(size);
                for chunk in self.gathered.drain(..) {
                    joined.extend_from_slice(&chunk);
                }
                joined.freeze()
            }
        };
        Poll::Ready(Some(Ok(Frame::data(data))))
    }
}

impl<B> Body for Gather<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Unpin,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Polled<B::Error>> {
        let this = self.get_mut();
        if let Some(after) = this.after.take() {
            return Poll::Ready(after);
        }
        loop {
            match Pin::new(&mut this.inner).poll_frame(cx) {
                Poll::Ready(Some(Ok(frame))) if frame.is_data() => {
                    let Ok(data) = frame.into_data() else {
                        continue;
                    };
                    if this.gathered.is_empty() && data.len() >= ALONE {
                        return Poll::Ready(Some(Ok(Frame::data(data))));
                    }
                    this.gathered_len += data.len();
                    this.gathered.push(data);
                    this.yielded_in = None;
                    if this.gathered_len >= MAX_GATHERED {
                        return this.hand_on();
                    }
                }
                Poll::Ready(other) => {
                    if this.gathered.is_empty() {
                        return Poll::Ready(other);
                    }
                    this.after = Some(other);
                    return this.hand_on();
                }
                Poll::Pending if this.gathered.is_empty() => return Poll::Pending,
                Poll::Pending => {
                    let now = turn();
                    match this.yielded_in {
                        // Outside a counted task, or a turn has passed: nothing more came.
                        _ if now == 0 => return this.hand_on(),
                        Some(then) if then != now => return this.hand_on(),
                        _ => {}
                    }
                    // One turn for the task that feeds `inner` (woken by the read above, so it
                    // runs before this one comes round again). Polled again within this turn,
                    // the body wakes itself again: a wake is always pending while it holds data.
                    this.yielded_in = Some(now);
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.gathered.is_empty()
            && match &self.after {
                Some(after) => after.is_none(),
                None => self.inner.is_end_stream(),
            }
    }

    fn size_hint(&self) -> SizeHint {
        let held = self.gathered_len as u64;
        let inner = self.inner.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + held);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + held);
        }
        hint
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use http_body_util::{BodyExt, Empty};
    use hyper::service::service_fn;
    use hyper_util::client::legacy::Client;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, DuplexStream, ReadBuf};

    /// The client's side of pith's connection: counts the writes hyper makes to it.
    struct CountedWrites {
        inner: DuplexStream,
        writes: Arc<AtomicUsize>,
    }

    impl AsyncRead for CountedWrites {
        fn poll_read(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_read(cx, buf)
        }
    }

    impl AsyncWrite for CountedWrites {
        fn poll_write(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<std::io::Result<usize>> {
            self.writes.fetch_add(1, Ordering::SeqCst);
            Pin::new(&mut self.inner).poll_write(cx, buf)
        }
        fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_flush(cx)
        }
        fn poll_shutdown(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<std::io::Result<()>> {
            Pin::new(&mut self.inner).poll_shutdown(cx)
        }
    }

    /// The error a body hands hyper (as `tee`'s bodies do).
    type BodyError = Box<dyn std::error::Error + Send + Sync>;

    fn boxed(e: hyper::Error) -> BodyError {
        Box::new(e)
    }

    /// An upstream answering in `bursts` (a chunk per event, a packet per burst, the next
    /// sent only once the client has read the last), relayed through a hyper server as pith
    /// relays it (an upstream body under [`Gather`], the connection's turns counted when
    /// `counted`): what the client reads, and how many writes reached it.
    async fn relayed(bursts: &[Vec<Vec<u8>>], counted: bool) -> (Vec<u8>, usize) {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let upstream = listener.local_addr().unwrap();
        let mut packets: Vec<Vec<u8>> = bursts
            .iter()
            .map(|events| {
                let mut packet = Vec::new();
                for event in events {
                    packet.extend_from_slice(format!("{:X}\r\n", event.len()).as_bytes());
                    packet.extend_from_slice(event);
                    packet.extend_from_slice(b"\r\n");
                }
                packet
            })
            .collect();
        packets[0].splice(
            0..0,
            b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec(),
        );
        if let Some(last) = packets.last_mut() {
            last.extend_from_slice(b"0\r\n\r\n");
        }
        let (read_burst, mut burst_read) = tokio::sync::mpsc::unbounded_channel::<()>();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut request = vec![0; 4096];
            let _ = socket.read(&mut request).await.unwrap();
            for packet in packets {
                socket.write_all(&packet).await.unwrap();
                // The next burst only once the client has this one: nothing may hold it.
                burst_read.recv().await;
            }
        });
        let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
        let service = service_fn(move |_request: hyper::Request<hyper::body::Incoming>| {
            let client = client.clone();
            async move {
                let url = format!("http://{upstream}/").parse().unwrap();
                let answer = client.get(url).await?;
                let (parts, body) = answer.into_parts();
                let body = Gather::new(body.map_err(boxed));
                Ok::<_, hyper_util::client::legacy::Error>(hyper::Response::from_parts(parts, body))
            }
        });
        let (near, mut far) = tokio::io::duplex(1 << 20);
        let writes = Arc::new(AtomicUsize::new(0));
        let io = CountedWrites {
            inner: near,
            writes: Arc::clone(&writes),
        };
        let connection = async move {
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(TokioIo::new(io), service)
                .await;
        };
        if counted {
            tokio::spawn(counting_turns(connection));
        } else {
            tokio::spawn(connection);
        }
        far.write_all(b"GET / HTTP/1.1\r\nhost: pith\r\n\r\n")
            .await
            .unwrap();
        let mut read = Vec::new();
        let mut buf = vec![0; 1 << 16];
        let mut expected = Vec::new();
        for events in bursts {
            expected.extend_from_slice(&events.concat());
            while unchunked(&read) != expected {
                let n = tokio::time::timeout(Duration::from_secs(10), far.read(&mut buf))
                    .await
                    .expect("a burst was held back from the client")
                    .unwrap();
                assert!(n > 0, "the connection closed early: {read:?}");
                read.extend_from_slice(&buf[..n]);
            }
            let _ = read_burst.send(());
        }
        while !read.ends_with(b"0\r\n\r\n") {
            let n = far.read(&mut buf).await.unwrap();
            assert!(n > 0, "the connection closed early: {read:?}");
            read.extend_from_slice(&buf[..n]);
        }
        (read, writes.load(Ordering::SeqCst))
    }

    fn events() -> Vec<Vec<u8>> {
        (0..10)
            .map(|i| format!("event: e\ndata: {{\"n\":{i}}}\n\n").into_bytes())
            .collect()
    }

    /// The body's bytes in (what has come of) a chunked answer, without the chunks' framing.
    fn unchunked(answer: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        let Some(head) = memchr::memmem::find(answer, b"\r\n\r\n") else {
            return body;
        };
        let mut rest = &answer[head + 4..];
        while let Some(line) = memchr::memmem::find(rest, b"\r\n") {
            let size = std::str::from_utf8(&rest[..line]).unwrap();
            let size = usize::from_str_radix(size, 16).unwrap();
            let Some(chunk) = rest.get(line + 2..line + 2 + size) else {
                break;
            };
            body.extend_from_slice(chunk);
            rest = rest.get(line + 2 + size + 2..).unwrap_or_default();
        }
        body
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_burst_the_upstream_sent_at_once_reaches_the_client_in_one_write() {
        let (read, writes) = relayed(&[events()], true).await;
        assert_eq!(
            unchunked(&read),
            events().concat(),
            "the upstream's bytes, in order"
        );
        // The head, then the ten events in one write (hyper writes the head when the body
        // first waits).
        assert_eq!(writes, 2, "{}", String::from_utf8_lossy(&read));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn events_that_come_apart_reach_the_client_as_they_come() {
        let events = events();
        let bursts: Vec<Vec<Vec<u8>>> = events.chunks(3).map(<[Vec<u8>]>::to_vec).collect();
        // `relayed` sends each burst only once the client has read the one before.
        let (read, writes) = relayed(&bursts, true).await;
        assert_eq!(unchunked(&read), events.concat());
        assert_eq!(
            writes,
            1 + bursts.len(),
            "a write per burst, after the head"
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn outside_a_counted_task_each_chunk_goes_on_as_it_comes() {
        let (read, writes) = relayed(&[events()], false).await;
        assert_eq!(unchunked(&read), events().concat());
        assert!(
            writes > 2,
            "nothing gathered, nothing held: {writes} writes"
        );
    }
}
