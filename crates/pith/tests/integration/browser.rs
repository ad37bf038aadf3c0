//! A page in headless Chromium, driven over the DevTools protocol on loopback: JavaScript
//! evaluated in it (awaiting its promises) measures what a person would see, and runs axe-core
//! in it. Chromium is Debian's (`PITH_TEST_CHROMIUM`), axe-core the npm package
//! (`PITH_TEST_AXE`), both installed by scripts/test.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio_tungstenite::tungstenite::{self, Message, WebSocket, stream::MaybeTlsStream};

/// Debian's Chromium, which scripts/test installs and names in `PITH_TEST_CHROMIUM`.
pub fn chromium() -> std::path::PathBuf {
    match std::env::var_os("PITH_TEST_CHROMIUM") {
        Some(p) => p.into(),
        None => panic!(
            "PITH_TEST_CHROMIUM is not set: run the tests through scripts/test, which installs \
             Chromium and sets it"
        ),
    }
}

/// Headless, every network switch off.
pub const HEADLESS: &[&str] = &[
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
];

/// Longest a step may take (Chromium's start, a command's answer): past it the test fails.
const LIMIT: Duration = Duration::from_secs(60);

/// One page in its own headless Chromium, closed on drop.
pub struct Page {
    chromium: Child,
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    next_id: u64,
    /// Events that arrived while a command's result was awaited.
    events: Vec<Value>,
    _profile: tempfile::TempDir,
}

impl Page {
    /// `url` in a window of `width` x `height` CSS pixels.
    pub fn open(url: &str, (width, height): (u32, u32)) -> Page {
        let profile = tempfile::tempdir().unwrap();
        let mut child = Command::new(chromium())
            .args(HEADLESS)
            .args([
                "--hide-scrollbars",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
            ])
            .arg(format!("--window-size={width},{height}"))
            .arg(format!("--user-data-dir={}", profile.path().display()))
            .arg("about:blank")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Chromium names its DevTools port on stderr; a thread reads it (the rest of stderr is
        // drained), so a Chromium that never says fails the test instead of hanging it.
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (said, heard) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(rest) = line
                    .trim()
                    .strip_prefix("DevTools listening on ws://127.0.0.1:")
                    && let Some(port) = rest.split('/').next().and_then(|p| p.parse::<u16>().ok())
                {
                    let _ = said.send(port);
                }
            }
        });
        let port = heard
            .recv_timeout(LIMIT)
            .expect("chromium named no DevTools port");
        // Its first tab is listed a moment after the port opens.
        let deadline = Instant::now() + LIMIT;
        let page = loop {
            let targets: Value = serde_json::from_str(&http_get(port, "/json/list")).unwrap();
            if let Some(page) = targets
                .as_array()
                .and_then(|t| t.iter().find(|t| t["type"] == "page"))
            {
                break page.clone();
            }
            assert!(Instant::now() < deadline, "no page among {targets}");
            std::thread::sleep(Duration::from_millis(20));
        };
        let (socket, _) =
            tungstenite::connect(page["webSocketDebuggerUrl"].as_str().unwrap()).unwrap();
        if let MaybeTlsStream::Plain(tcp) = socket.get_ref() {
            tcp.set_read_timeout(Some(LIMIT)).unwrap();
        }
        let mut page = Page {
            chromium: child,
            socket,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        // The window's size is not the viewport's below 500 px (headless Chromium's smallest
        // window): the viewport is set as a phone's or a laptop's.
        page.call(
            "Emulation.setDeviceMetricsOverride",
            json!({"width": width, "height": height, "deviceScaleFactor": 1, "mobile": width < 600}),
        );
        // Navigated from a blank page, so that nothing is evaluated in a page being replaced.
        page.call("Page.enable", json!({}));
        page.call("Page.navigate", json!({ "url": url }));
        page.event("Page.loadEventFired");
        page
    }

    /// `expression`'s value (a promise's, once it settles), as JSON; a thrown error fails the
    /// test naming the expression.
    pub fn eval(&mut self, expression: &str) -> Value {
        let answer = self.call(
            "Runtime.evaluate",
            json!({"expression": expression, "returnByValue": true, "awaitPromise": true}),
        );
        assert!(
            answer.get("exceptionDetails").is_none(),
            "{expression:.200}: {answer}"
        );
        answer["result"]["value"].clone()
    }

    /// The result of the DevTools command `method`; events that arrive first are kept.
    fn call(&mut self, method: &str, params: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let call = json!({ "id": id, "method": method, "params": params });
        self.socket.send(Message::text(call.to_string())).unwrap();
        loop {
            let message = self.next_message();
            if message["id"] == id {
                assert!(message.get("error").is_none(), "{method}: {message}");
                return message["result"].clone();
            }
            if message.get("method").is_some() {
                self.events.push(message);
            }
        }
    }

    /// Wait for the event `method` (or take it, when it came during a command).
    fn event(&mut self, method: &str) {
        if let Some(at) = self.events.iter().position(|e| e["method"] == method) {
            self.events.remove(at);
            return;
        }
        while self.next_message()["method"] != method {}
    }

    fn next_message(&mut self) -> Value {
        loop {
            if let Message::Text(text) = self.socket.read().unwrap() {
                return serde_json::from_str(text.as_str()).unwrap();
            }
        }
    }

    /// Resolve once `condition` (a JavaScript expression) holds in the page: the page's own
    /// timers run it every 50 ms, within `limit_ms`.
    pub fn until(&mut self, condition: &str, limit_ms: u64) {
        let held = self.eval(&format!(
            "new Promise(done => {{ const end = Date.now() + {limit_ms}; \
             const check = () => ({condition}) ? done(true) : Date.now() > end ? done(false) \
             : setTimeout(check, 50); check(); }})"
        ));
        assert_eq!(held, true, "not within {limit_ms} ms: {condition}");
    }

    /// Show the page as under the system's dark (or light) colour scheme.
    pub fn dark(&mut self, dark: bool) {
        let scheme = if dark { "dark" } else { "light" };
        self.call(
            "Emulation.setEmulatedMedia",
            json!({"features": [{"name": "prefers-color-scheme", "value": scheme}]}),
        );
    }

    /// The whole page (beyond the viewport too) as a PNG at `path`.
    pub fn screenshot(&mut self, path: &std::path::Path) {
        use base64::Engine;
        let shot = self.call(
            "Page.captureScreenshot",
            json!({"format": "png", "captureBeyondViewport": true}),
        );
        let png = base64::engine::general_purpose::STANDARD
            .decode(shot["data"].as_str().unwrap())
            .unwrap();
        assert!(png.starts_with(b"\x89PNG"), "not a PNG");
        std::fs::write(path, png).unwrap();
    }

    /// axe-core's serious and critical violations on the page, as `rule: elements`.
    pub fn axe_serious(&mut self) -> Vec<String> {
        let axe = std::env::var_os("PITH_TEST_AXE").unwrap_or_else(|| {
            panic!("PITH_TEST_AXE is not set: run the tests through scripts/test")
        });
        let source = std::fs::read_to_string(axe).unwrap();
        self.eval(&source);
        let found = self.eval(
            "axe.run(document).then(r => r.violations \
             .filter(v => v.impact === 'serious' || v.impact === 'critical') \
             .map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', ')))",
        );
        serde_json::from_value(found).unwrap()
    }
}

impl Drop for Page {
    fn drop(&mut self) {
        let _ = self.chromium.kill();
        let _ = self.chromium.wait();
    }
}

/// The body of `GET path` from the DevTools HTTP endpoint on `port` (HTTP/1.1: it answers
/// nothing to 1.0, and keeps the connection open, so the body is read by its length).
fn http_get(port: u16, path: &str) -> String {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    write!(
        &stream,
        "GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut reader = BufReader::new(stream);
    let mut length = 0;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':')
            && name.eq_ignore_ascii_case("content-length")
        {
            length = value.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    String::from_utf8(body).unwrap()
}
