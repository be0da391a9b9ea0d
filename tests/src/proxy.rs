//! A TCP proxy that slows the server-to-client direction to a byte rate, so a test can
//! catch drcheck in the middle of a download (and restore) deterministically.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

pub struct Throttle {
    pub port: u16,
    stop: Arc<AtomicBool>,
    accept: Option<JoinHandle<()>>,
}

impl Throttle {
    /// Forwards 127.0.0.1:`port` to 127.0.0.1:`upstream`, replies at `bytes_per_sec`.
    pub fn start(upstream: u16, bytes_per_sec: u64) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let accept = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match listener.accept() {
                    Ok((client, _)) => {
                        let s = s.clone();
                        std::thread::spawn(move || serve(client, upstream, bytes_per_sec, s));
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            }
        });
        Throttle { port, stop, accept: Some(accept) }
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Throttle {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(h) = self.accept.take() {
            let _ = h.join();
        }
    }
}

fn serve(client: TcpStream, upstream: u16, rate: u64, stop: Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect(("127.0.0.1", upstream)) else {
        return;
    };
    client.set_nonblocking(false).unwrap();
    for s in [&client, &server] {
        let _ = s.set_read_timeout(Some(Duration::from_millis(200)));
    }
    let (mut c_read, mut s_write) = (client.try_clone().unwrap(), server.try_clone().unwrap());
    let stop2 = stop.clone();
    let up = std::thread::spawn(move || pump(&mut c_read, &mut s_write, None, &stop2));
    let (mut s_read, mut c_write) = (server, client);
    pump(&mut s_read, &mut c_write, Some(rate), &stop);
    let _ = c_write.shutdown(Shutdown::Both);
    let _ = s_read.shutdown(Shutdown::Both);
    let _ = up.join();
}

fn pump(from: &mut TcpStream, to: &mut TcpStream, rate: Option<u64>, stop: &AtomicBool) {
    // Small chunks at a steady pace: 20 per second.
    let chunk = rate.map(|r| (r / 20).max(1) as usize).unwrap_or(64 * 1024);
    let mut buf = vec![0u8; chunk];
    while !stop.load(Ordering::Relaxed) {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if to.write_all(&buf[..n]).is_err() {
                    break;
                }
                if rate.is_some() {
                    std::thread::sleep(Duration::from_millis(50));
                }
            }
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
                continue;
            }
            Err(_) => break,
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}
