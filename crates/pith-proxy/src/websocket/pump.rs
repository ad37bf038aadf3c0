//! Frames both ways between the client's socket and the upstream's, with the HTTP path's
//! limits: a frame no larger than a request body may be, the upstream's silence inside an
//! answer bounded by the idle timeout, an idle socket between turns closed after a bound, and
//! at shutdown a socket between turns closed at once and an open answer cut (and recorded) at
//! the end of the grace period. Each way it ends, the open request has its row.
//!
//! How each end is told to the client: a frame over `max_body` closes the socket with 1009
//! (the frame's row a 413); the upstream's silence mid-answer gets an `error` event and 1011;
//! a socket idle for [`IDLE_BETWEEN_TURNS`] closes with 1000; shutdown closes with 1001.

use std::time::Duration;

use futures_util::{Sink, SinkExt, StreamExt};
use http::StatusCode;
use tokio::sync::watch;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error, Message};

use super::turns::{FromClient, FromUpstream, Turns};
use crate::state::Stop;
use crate::tee::End;

/// How long a socket with no request open may stay idle before pith closes it: five minutes,
/// a pause to read an answer or think, not a session left open overnight (each socket holds
/// two descriptors and its transcripts). Codex opens a new one for its next turn when it finds
/// this one closed, and sends its whole input on it.
pub(crate) const IDLE_BETWEEN_TURNS: Duration = Duration::from_secs(5 * 60);

/// The bounds one socket is relayed within.
pub(super) struct Limits {
    /// The upstream's silence inside an answer (`proxy.upstream_idle_timeout`).
    pub in_answer: Duration,
    /// A frame's size, either way (`proxy.max_body`).
    pub max_frame: usize,
}

/// Why the relay ended.
enum Ended {
    ClientClosed,
    UpstreamClosed,
    /// The client sent a frame larger than the limit.
    ClientFrameTooLarge,
    /// The upstream sent a frame larger than the limit.
    UpstreamFrameTooLarge,
    /// The upstream said nothing inside an answer for the idle timeout.
    UpstreamSilent,
    /// No request open, and nothing said either way for [`IDLE_BETWEEN_TURNS`].
    Idle,
    Draining,
    Cut,
}

/// What the loop does after a frame.
enum Step {
    /// Go on, the idle timer started again.
    Relayed,
    /// Go on, the idle timer left running (a ping or pong: each hop answers its own).
    Ignored,
    /// Stop, for this reason.
    End(Ended),
}

/// Relay frames until either side closes, a limit is reached or the proxy stops.
pub(super) async fn pump<C, U>(
    client: WebSocketStream<C>,
    upstream: WebSocketStream<U>,
    mut turns: Turns,
    limits: Limits,
    mut stop: watch::Receiver<Stop>,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
    U: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    let (mut to_client, mut from_client) = client.split();
    let (mut to_upstream, mut from_upstream) = upstream.split();
    let idle = tokio::time::sleep(IDLE_BETWEEN_TURNS);
    tokio::pin!(idle);
    let ended = loop {
        if *stop.borrow() == Stop::Draining && !turns.is_open() {
            break Ended::Draining;
        }
        let step = tokio::select! {
            msg = from_client.next() => {
                client_frame(msg, &mut turns, &mut to_client, &mut to_upstream).await
            }
            msg = from_upstream.next() => {
                upstream_frame(msg, &mut turns, &mut to_client, &mut to_upstream).await
            }
            () = &mut idle => {
                break if turns.is_open() { Ended::UpstreamSilent } else { Ended::Idle };
            }
            changed = stop.changed() => match (changed, *stop.borrow()) {
                (Err(_), _) | (Ok(()), Stop::Cut) => break Ended::Cut,
                _ => continue,
            },
        };
        match step {
            Step::Relayed => {}
            Step::Ignored => continue,
            Step::End(ended) => break ended,
        }
        let wait = if turns.is_open() {
            limits.in_answer
        } else {
            IDLE_BETWEEN_TURNS
        };
        idle.as_mut().reset(tokio::time::Instant::now() + wait);
    };
    let Farewell {
        end,
        error,
        close,
        event,
    } = farewell(ended, &limits, &mut turns);
    turns.close(end, error);
    if let Some(event) = event {
        let _ = to_client.send(Message::text(event)).await;
    }
    let close = close.map(|(code, reason)| CloseFrame {
        code,
        reason: close_reason(reason).into(),
    });
    let _ = to_client.send(Message::Close(close)).await;
    let _ = to_client.close().await;
    let _ = to_upstream.close().await;
}

/// A frame from the client (or the end of its stream), relayed: a text frame through the
/// socket's requests (sent up, or answered by pith), anything else up as it came.
async fn client_frame(
    msg: Option<Result<Message, Error>>,
    turns: &mut Turns,
    to_client: &mut (impl Sink<Message, Error = Error> + Unpin),
    to_upstream: &mut (impl Sink<Message, Error = Error> + Unpin),
) -> Step {
    match msg {
        Some(Ok(Message::Text(text))) => match turns.client_sent(text.as_str()).await {
            FromClient::Forward(frame) => {
                let msg = frame.map_or(Message::Text(text), Message::text);
                if to_upstream.send(msg).await.is_err() {
                    return Step::End(Ended::UpstreamClosed);
                }
            }
            FromClient::Answer(events) => {
                let events = events.into_iter().map(|e| Ok::<_, Error>(Message::text(e)));
                let mut events = futures_util::stream::iter(events);
                if to_client.send_all(&mut events).await.is_err() {
                    return Step::End(Ended::ClientClosed);
                }
            }
        },
        // Each hop answers its own pings.
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Step::Ignored,
        Some(Ok(msg)) => {
            return forward(msg, to_upstream, Ended::UpstreamClosed, Ended::ClientClosed).await;
        }
        Some(Err(Error::Capacity(_))) => return Step::End(Ended::ClientFrameTooLarge),
        _ => return Step::End(Ended::ClientClosed),
    }
    Step::Relayed
}

/// A frame from the upstream (or the end of its stream), relayed: a text frame to the client
/// unless it is a refusal of what pith changed (then the client's own request goes up again),
/// anything else to the client as it came.
async fn upstream_frame(
    msg: Option<Result<Message, Error>>,
    turns: &mut Turns,
    to_client: &mut (impl Sink<Message, Error = Error> + Unpin),
    to_upstream: &mut (impl Sink<Message, Error = Error> + Unpin),
) -> Step {
    match msg {
        Some(Ok(Message::Text(text))) => match turns.upstream_sent(text.as_str()) {
            FromUpstream::Pass => {
                if to_client.send(Message::Text(text)).await.is_err() {
                    return Step::End(Ended::ClientClosed);
                }
            }
            FromUpstream::Resend(frame) => {
                if to_upstream.send(Message::text(frame)).await.is_err() {
                    return Step::End(Ended::UpstreamClosed);
                }
            }
        },
        Some(Ok(Message::Ping(_) | Message::Pong(_))) => return Step::Ignored,
        Some(Ok(msg)) => {
            return forward(msg, to_client, Ended::ClientClosed, Ended::UpstreamClosed).await;
        }
        Some(Err(Error::Capacity(_))) => return Step::End(Ended::UpstreamFrameTooLarge),
        _ => return Step::End(Ended::UpstreamClosed),
    }
    Step::Relayed
}

/// A frame other than text or ping relayed to the other hop as it came: a close frame ends the
/// relay as `closed` (the sender's side closed), a send that fails as `gone` (the receiver's).
async fn forward(
    msg: Message,
    to: &mut (impl Sink<Message, Error = Error> + Unpin),
    gone: Ended,
    closed: Ended,
) -> Step {
    let close = matches!(msg, Message::Close(_));
    if to.send(msg).await.is_err() {
        return Step::End(gone);
    }
    if close {
        return Step::End(closed);
    }
    Step::Relayed
}

/// How the relay's end is told: the open request's end and error, the close frame's code and
/// reason, and an `error` event sent before it.
struct Farewell {
    end: End,
    error: Option<String>,
    close: Option<(CloseCode, String)>,
    event: Option<String>,
}

/// How to tell the relay's end, `ended`; a frame too large from the client is recorded as
/// the refused request it is.
fn farewell(ended: Ended, limits: &Limits, turns: &mut Turns) -> Farewell {
    let limit = limits.max_frame;
    let (end, error, close, event) = match ended {
        Ended::ClientClosed => (End::ClientGone, None, None, None),
        Ended::UpstreamClosed => (End::Broken, None, None, None),
        Ended::ClientFrameTooLarge => {
            let why = format!(
                "pith: a WebSocket frame over {limit} bytes (proxy.max_body); the socket is closed"
            );
            turns.refused_frame(StatusCode::PAYLOAD_TOO_LARGE, why.clone());
            (End::ClientGone, None, Some((CloseCode::Size, why)), None)
        }
        Ended::UpstreamFrameTooLarge => {
            let why = format!(
                "pith: the upstream sent a WebSocket frame over {limit} bytes \
                 (proxy.max_body), so pith closed the socket; the answer is incomplete"
            );
            (
                End::Broken,
                Some(why.clone()),
                Some((CloseCode::Error, why.clone())),
                Some(error_event(502, "api_error", &why)),
            )
        }
        Ended::UpstreamSilent => {
            let why = format!(
                "pith: the upstream sent nothing for {} s mid-answer, so pith ended the \
                 answer (proxy.upstream_idle_timeout); it is incomplete",
                limits.in_answer.as_secs()
            );
            (
                End::TimedOut,
                Some(why.clone()),
                Some((CloseCode::Error, why.clone())),
                Some(error_event(504, "timeout", &why)),
            )
        }
        Ended::Idle => (
            End::ClientGone,
            None,
            Some((CloseCode::Normal, "pith: idle between turns".to_owned())),
            None,
        ),
        Ended::Draining | Ended::Cut => (
            End::Shutdown,
            None,
            Some((
                CloseCode::Away,
                "pith: the proxy is shutting down".to_owned(),
            )),
            None,
        ),
    };
    Farewell {
        end,
        error,
        close,
        event,
    }
}

/// A close frame's reason: at most 123 bytes (a control frame's payload is 125, the code
/// takes 2), cut at a character boundary.
fn close_reason(mut reason: String) -> String {
    const MAX: usize = 123;
    if reason.len() > MAX {
        let mut end = MAX;
        while !reason.is_char_boundary(end) {
            end -= 1;
        }
        reason.truncate(end);
    }
    reason
}

/// An `error` event in the shape the Responses API sends on its socket.
fn error_event(status: u16, kind: &str, message: &str) -> String {
    serde_json::json!({
        "type": "error",
        "status": status,
        "error": {"type": kind, "code": kind, "message": message},
    })
    .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_close_reason_fits_a_control_frame() {
        assert_eq!(close_reason("short".to_owned()), "short");
        let long = "é".repeat(100);
        let cut = close_reason(long);
        assert!(cut.len() <= 123 && cut.chars().all(|c| c == 'é'), "{cut}");
    }
}
