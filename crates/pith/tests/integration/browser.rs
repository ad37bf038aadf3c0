//! A page in headless Chromium, driven over the DevTools protocol's WebSocket on loopback:
//! JavaScript evaluated in it (awaiting its promises) measures what a person would see, and
//! runs axe-core in it. Chromium is Debian's (`PITH_TEST_CHROMIUM`), axe-core the npm package
//! (`PITH_TEST_AXE`), both installed by scripts/test.

use std::io::{BufRead, BufReader};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

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
    /// The page's DevTools connection.
    socket: WebSocket<MaybeTlsStream<TcpStream>>,
    /// The browser's, kept open with the page it made.
    browser: Option<WebSocket<MaybeTlsStream<TcpStream>>>,
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
        // Chromium names its DevTools endpoint on stderr; a thread reads it (the rest of stderr
        // is drained), so a Chromium that never says fails the test instead of hanging it.
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (said, heard) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if let Some(url) = line.trim().strip_prefix("DevTools listening on ") {
                    let _ = said.send(url.to_owned());
                }
            }
        });
        let browser_url = heard
            .recv_timeout(LIMIT)
            .expect("chromium named no DevTools endpoint");
        // The browser makes the page the test drives (its target exists once this answers, so
        // nothing waits for a tab to be listed).
        let mut page = Page {
            chromium: child,
            socket: connect(&browser_url),
            browser: None,
            next_id: 0,
            events: Vec::new(),
            _profile: profile,
        };
        let target = page.call("Target.createTarget", json!({"url": "about:blank"}));
        let origin = &browser_url[..browser_url.find("/devtools/").unwrap()];
        let page_url = format!(
            "{origin}/devtools/page/{}",
            target["targetId"].as_str().unwrap()
        );
        page.browser = Some(std::mem::replace(&mut page.socket, connect(&page_url)));
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

    /// Press a key as the keyboard does (`Enter`, `Tab`): the browser's own input events, to
    /// whatever element has the focus.
    pub fn press(&mut self, key: &str) {
        let (code, text) = match key {
            "Enter" => (13, "\r"),
            "Tab" => (9, ""),
            " " => (32, " "),
            other => panic!("no key code for {other:?} here"),
        };
        for kind in ["keyDown", "keyUp"] {
            let mut event = json!({"type": kind, "key": key, "windowsVirtualKeyCode": code});
            if kind == "keyDown" && !text.is_empty() {
                event["text"] = json!(text);
            }
            self.call("Input.dispatchKeyEvent", event);
        }
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

/// A DevTools WebSocket at `url`, its reads limited to [`LIMIT`].
fn connect(url: &str) -> WebSocket<MaybeTlsStream<TcpStream>> {
    let (socket, _) = tungstenite::connect(url).unwrap();
    if let MaybeTlsStream::Plain(tcp) = socket.get_ref() {
        tcp.set_read_timeout(Some(LIMIT)).unwrap();
    }
    socket
}
