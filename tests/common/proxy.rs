//! A TCP proxy on 127.0.0.1 in front of a server (PostgreSQL in the HA tests), std only, that
//! a test can cut: `Pass` forwards, `Blackhole` forwards nothing while it lasts (bytes wait, as
//! behind a dead link; they flow again once it passes), `Reset` closes every connection and
//! refuses new ones, `HoldReplies` forwards what the client sends and holds what the server
//! answers (a hop that terminates TCP and lost the way back for a while: the statement
//! commits, its answer comes late).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass = 0,
    Blackhole = 1,
    Reset = 2,
    HoldReplies = 3,
    /// Passes until a client sends `COMMIT`, then holds every answer (`HoldReplies`): the
    /// commit happens, its answer comes late.
    HoldAfterCommit = 4,
}

pub struct Proxy {
    pub port: u16,
    mode: Arc<AtomicU8>,
}

impl Proxy {
    /// A proxy to 127.0.0.1:`target`, passing.
    pub fn start(target: u16) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind proxy");
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(AtomicU8::new(Mode::Pass as u8));
        let m = Arc::clone(&mode);
        thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                if m.load(Ordering::SeqCst) == Mode::Reset as u8 {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                }
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)) else {
                    let _ = client.shutdown(Shutdown::Both);
                    continue;
                };
                for (from, to, up) in [
                    (
                        client.try_clone().unwrap(),
                        server.try_clone().unwrap(),
                        true,
                    ),
                    (server, client, false),
                ] {
                    let m = Arc::clone(&m);
                    thread::spawn(move || pump(from, to, up, &m));
                }
            }
        });
        Proxy { port, mode }
    }

    pub fn set(&self, mode: Mode) {
        self.mode.store(mode as u8, Ordering::SeqCst);
    }

    /// A switch for another thread.
    pub fn handle(&self) -> ProxyHandle {
        ProxyHandle(Arc::clone(&self.mode))
    }
}

/// [`Proxy::set`] from another thread.
pub struct ProxyHandle(Arc<AtomicU8>);

impl ProxyHandle {
    pub fn set(&self, mode: Mode) {
        self.0.store(mode as u8, Ordering::SeqCst);
    }
}

/// `up`: client to server.
fn pump(mut from: TcpStream, mut to: TcpStream, up: bool, mode: &AtomicU8) {
    let mut buf = [0u8; 16 * 1024];
    from.set_read_timeout(Some(Duration::from_millis(50))).ok();
    let held = |m: u8| m == Mode::Blackhole as u8 || (!up && m == Mode::HoldReplies as u8);
    loop {
        match mode.load(Ordering::SeqCst) {
            m if m == Mode::Reset as u8 => break,
            m if held(m) => {
                thread::sleep(Duration::from_millis(20));
                continue;
            }
            _ => {}
        }
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                // Read before a cut, held until it passes.
                while held(mode.load(Ordering::SeqCst)) {
                    thread::sleep(Duration::from_millis(20));
                }
                // Before the COMMIT goes: its answer must not slip through first.
                if up && buf[..n].windows(6).any(|w| w == b"COMMIT") {
                    let _ = mode.compare_exchange(
                        Mode::HoldAfterCommit as u8,
                        Mode::HoldReplies as u8,
                        Ordering::SeqCst,
                        Ordering::SeqCst,
                    );
                }
                if mode.load(Ordering::SeqCst) == Mode::Reset as u8
                    || to.write_all(&buf[..n]).is_err()
                {
                    break;
                }
            }
            Err(e)
                if e.kind() == std::io::ErrorKind::WouldBlock
                    || e.kind() == std::io::ErrorKind::TimedOut => {}
            Err(_) => break,
        }
    }
    let _ = from.shutdown(Shutdown::Both);
    let _ = to.shutdown(Shutdown::Both);
}
