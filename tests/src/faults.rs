//! A fault-injecting HTTP proxy between drcheck and moto's S3 server. Each request
//! takes the first matching rule from a plan: answer with an error status (503
//! SlowDown, 403, …), delay, reset the connection mid-body, or truncate the body.
//! Everything else is forwarded untouched. Counters let tests prove faults happened.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

#[derive(Debug, Clone)]
pub enum Fault {
    /// Answer with this status and S3 error code, without asking upstream.
    Status(u16, &'static str),
    /// Forward after this pause.
    Delay(Duration),
    /// Send the headers and half the body, then reset the connection.
    ResetMidBody,
    /// Send the headers and half the body, then close cleanly.
    TruncateBody,
    /// The store is down: every matching request's connection is reset without an
    /// answer, for this long from the first one; then the rule is gone.
    DownFor(Duration),
}

/// Which requests a rule applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Match {
    Any,
    /// GETs of objects (not bucket listings).
    ObjectGet,
}

#[derive(Debug, Clone)]
pub struct Rule {
    pub when: Match,
    pub fault: Fault,
    /// How many requests it applies to; `None` for all.
    pub times: Option<u32>,
}

#[derive(Default)]
struct State {
    rules: VecDeque<Rule>,
    injected: u32,
    requests: Vec<String>,
    /// When the current `DownFor` outage began.
    down_since: Option<std::time::Instant>,
}

pub struct FaultProxy {
    pub port: u16,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl FaultProxy {
    pub fn start(upstream: u16, rules: Vec<Rule>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let state = Arc::new(Mutex::new(State { rules: rules.into(), ..Default::default() }));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let accept = std::thread::spawn(move || {
            while !sp.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let (st, sp) = (st.clone(), sp.clone());
                        std::thread::spawn(move || serve(client, upstream, st, sp));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        });
        FaultProxy { port, state, stop, accept: Some(accept) }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How many faults were injected so far.
    pub fn injected(&self) -> u32 {
        self.state.lock().unwrap().injected
    }

    /// Every request line seen, in order (`GET /bucket/key`).
    pub fn requests(&self) -> Vec<String> {
        self.state.lock().unwrap().requests.clone()
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn take_fault(state: &Mutex<State>, method: &str, path: &str) -> Option<Fault> {
    let mut s = state.lock().unwrap();
    s.requests.push(format!("{method} {path}"));
    let is_object_get = method == "GET" && path.trim_start_matches('/').contains('/') && !path.contains("list-type");
    let idx = s.rules.iter().position(|r| r.when == Match::Any || (r.when == Match::ObjectGet && is_object_get))?;
    if let Fault::DownFor(d) = s.rules[idx].fault {
        let since = *s.down_since.get_or_insert_with(std::time::Instant::now);
        if since.elapsed() >= d {
            s.rules.remove(idx);
            s.down_since = None;
            return None;
        }
        s.injected += 1;
        return Some(Fault::DownFor(d));
    }
    let rule = &mut s.rules[idx];
    let fault = rule.fault.clone();
    match &mut rule.times {
        Some(1) => {
            s.rules.remove(idx);
        }
        Some(n) => *n -= 1,
        None => {}
    }
    s.injected += 1;
    Some(fault)
}

fn serve(client: TcpStream, upstream: u16, state: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    let _ = client.set_read_timeout(Some(Duration::from_millis(500)));
    let mut reader = BufReader::new(client.try_clone().unwrap());
    let mut client = client;
    while !stop.load(Ordering::Relaxed) {
        // The request head.
        let mut head = Vec::new();
        loop {
            let mut line = Vec::new();
            match reader.read_until(b'\n', &mut line) {
                Ok(0) => return,
                Ok(_) => {}
                Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    if head.is_empty() && line.is_empty() {
                        continue;
                    }
                    head.extend_from_slice(&line);
                    continue;
                }
                Err(_) => return,
            }
            let end = line == b"\r\n";
            head.extend_from_slice(&line);
            if end {
                break;
            }
        }
        let text = String::from_utf8_lossy(&head).into_owned();
        let mut first = text.lines().next().unwrap_or("").split_whitespace();
        let (method, path) = (first.next().unwrap_or("").to_string(), first.next().unwrap_or("").to_string());
        let len: usize = text
            .lines()
            .find_map(|l| l.to_ascii_lowercase().strip_prefix("content-length:").map(|v| v.trim().parse().unwrap_or(0)))
            .unwrap_or(0);
        let mut body = vec![0u8; len];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let fault = take_fault(&state, &method, &path);
        if let Some(Fault::Status(code, s3code)) = &fault {
            let xml = format!(
                "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>{s3code}</Code><Message>injected by the test</Message></Error>"
            );
            let reason = if *code == 503 { "Service Unavailable" } else { "Error" };
            let resp = format!(
                "HTTP/1.1 {code} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {}\r\n\r\n{xml}",
                xml.len()
            );
            if client.write_all(resp.as_bytes()).is_err() {
                return;
            }
            continue;
        }
        if let Some(Fault::DownFor(_)) = &fault {
            let _ = socket_linger_zero(&client);
            return;
        }
        if let Some(Fault::Delay(d)) = &fault {
            std::thread::sleep(*d);
        }
        // Forward on a fresh upstream connection that closes after the response, so
        // the response is simply everything upstream sends.
        let Ok(mut up) = TcpStream::connect(("127.0.0.1", upstream)) else { return };
        let rewritten: String = text
            .split("\r\n")
            .filter(|l| !l.to_ascii_lowercase().starts_with("connection:"))
            .collect::<Vec<_>>()
            .join("\r\n");
        let rewritten = rewritten.trim_end_matches("\r\n").to_string() + "\r\nConnection: close\r\n\r\n";
        if up.write_all(rewritten.as_bytes()).and_then(|_| up.write_all(&body)).is_err() {
            return;
        }
        let mut resp = Vec::new();
        let _ = up.read_to_end(&mut resp);
        let split = resp.windows(4).position(|w| w == b"\r\n\r\n").map(|p| p + 4).unwrap_or(resp.len());
        match fault {
            Some(Fault::ResetMidBody) | Some(Fault::TruncateBody) => {
                let cut = split + (resp.len() - split) / 2;
                let _ = client.write_all(&resp[..cut]);
                let _ = client.flush();
                if matches!(fault, Some(Fault::ResetMidBody)) {
                    let _ = socket_linger_zero(&client);
                }
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
            _ => {
                // Upstream said "Connection: close"; the client may keep its connection.
                let head_text = String::from_utf8_lossy(&resp[..split]).replace("Connection: close\r\n", "");
                if client.write_all(head_text.as_bytes()).and_then(|_| client.write_all(&resp[split..])).is_err() {
                    return;
                }
            }
        }
    }
}

/// SO_LINGER 0: closing sends a reset instead of a clean FIN.
fn socket_linger_zero(s: &TcpStream) -> std::io::Result<()> {
    use nix::sys::socket::{setsockopt, sockopt::Linger};
    setsockopt(s, Linger, &nix::libc::linger { l_onoff: 1, l_linger: 0 }).map_err(std::io::Error::from)
}
