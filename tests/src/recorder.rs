//! A tiny HTTP server that records every request (a webhook receiver) and answers
//! with a status the test can change.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, AtomicU16, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Request {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

pub struct Recorder {
    pub port: u16,
    requests: Arc<Mutex<Vec<Request>>>,
    status: Arc<AtomicU16>,
    body: Arc<Mutex<String>>,
    stop: Arc<AtomicBool>,
}

impl Recorder {
    pub fn start(status: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let requests = Arc::new(Mutex::new(Vec::new()));
        let status = Arc::new(AtomicU16::new(status));
        let stop = Arc::new(AtomicBool::new(false));
        let body = Arc::new(Mutex::new(String::new()));
        let (r, st, sp, answer) = (requests.clone(), status.clone(), stop.clone(), body.clone());
        std::thread::spawn(move || {
            while !sp.load(Ordering::Relaxed) {
                let Ok((conn, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(5));
                    continue;
                };
                conn.set_nonblocking(false).unwrap();
                conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                let mut reader = BufReader::new(conn.try_clone().unwrap());
                let mut first = String::new();
                if reader.read_line(&mut first).is_err() {
                    continue;
                }
                let mut headers = Vec::new();
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).is_err() || line.trim().is_empty() {
                        break;
                    }
                    if let Some((k, v)) = line.trim_end().split_once(':') {
                        headers.push((k.trim().to_string(), v.trim().to_string()));
                    }
                }
                let len = headers
                    .iter()
                    .find(|(k, _)| k.eq_ignore_ascii_case("content-length"))
                    .and_then(|(_, v)| v.parse().ok())
                    .unwrap_or(0);
                let mut body = vec![0u8; len];
                let _ = reader.read_exact(&mut body);
                let mut parts = first.split_whitespace();
                r.lock().unwrap().push(Request {
                    method: parts.next().unwrap_or("").into(),
                    path: parts.next().unwrap_or("").into(),
                    headers,
                    body,
                });
                let code = st.load(Ordering::Relaxed);
                let answer = answer.lock().unwrap().clone();
                let mut conn = conn;
                let _ = conn.write_all(
                    format!(
                        "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{answer}",
                        answer.len()
                    )
                    .as_bytes(),
                );
            }
        });
        Recorder { port, requests, status, body, stop }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/hook", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// What every response carries as its body.
    pub fn set_body(&self, body: &str) {
        *self.body.lock().unwrap() = body.to_string();
    }

    pub fn set_status(&self, code: u16) {
        self.status.store(code, Ordering::Relaxed);
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}
