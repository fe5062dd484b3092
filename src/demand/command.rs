//! The `command` demand probe: runs `sh -c <command>` and reads the demand JSON document
//! (docs/demand.md) from its stdout. The command gets no stdin, and it never outlives its
//! timeout: past it, its whole process group is killed and reaped. The runner (`run_sh`,
//! `check_exit`) also runs `price.fil_usd_command` (`crate::fil_usd`).

use std::io::{self, Read};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Result};
use nix::errno::Errno;
use nix::sys::signal::{killpg, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag};
use nix::unistd::Pid;

use super::json::parse_demand_json;
use super::{Demand, DemandProbe};
use crate::secrets::redact::one_line;

/// More stdout than this is not a demand document.
pub(crate) const MAX_STDOUT_BYTES: usize = 1 << 20;
/// How much of the end of stderr is kept for an error message.
const STDERR_TAIL_BYTES: usize = 4096;
const STDERR_TAIL_CHARS: usize = 300;

#[derive(Debug, Clone)]
pub struct CommandProbe {
    command: String,
    timeout: Duration,
}

impl CommandProbe {
    /// `timeout` bounds the whole run, from start until stdout and stderr are closed.
    pub fn new(command: String, timeout: Duration) -> Self {
        CommandProbe { command, timeout }
    }

    fn run(&self) -> Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
        run_sh("demand command", &self.command, self.timeout)
    }
}

impl DemandProbe for CommandProbe {
    fn probe(&self) -> Result<Demand> {
        let (status, stdout, stderr) = self.run()?;
        check_exit("demand command", status, &stderr)?;
        if stdout.len() > MAX_STDOUT_BYTES {
            bail!(
                "demand command: printed more than {MAX_STDOUT_BYTES} bytes; not a demand document"
            );
        }
        let text = String::from_utf8_lossy(&stdout);
        parse_demand_json(&text).map_err(|e| anyhow!("demand command: {e}"))
    }
}

/// Run `sh -c <command>` with no stdin, in its own process group, for at most `timeout`
/// (past it the whole group is killed and reaped): its exit status, its stdout (at most
/// [`MAX_STDOUT_BYTES`] plus one) and the tail of its stderr. `what` names it in errors
/// (`demand command`, `price.fil_usd_command`).
pub(crate) fn run_sh(
    what: &str,
    command: &str,
    timeout: Duration,
) -> Result<(ExitStatus, Vec<u8>, Vec<u8>)> {
    let deadline = Instant::now() + timeout;
    let mut sh = Command::new("sh");
    // fleetagent's own keys are none of the probe's business (`secrets`).
    for name in crate::secrets::env_names_hidden_from_probes() {
        sh.env_remove(name);
    }
    let mut child = sh
        .arg("-c")
        .arg(command)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        // Its own process group, so that a timeout kills what the shell started too.
        .process_group(0)
        .spawn()
        .map_err(|e| anyhow!("{what}: cannot start `sh -c`: {e}"))?;
    let group = Pid::from_raw(child.id() as i32);
    let stdout = read_all(child.stdout.take(), MAX_STDOUT_BYTES, false);
    let stderr = read_all(child.stderr.take(), STDERR_TAIL_BYTES, true);
    let exited = exit_signal(group);

    let secs = timeout.as_secs_f64();
    if exited.recv_timeout(left(deadline)).is_err() {
        kill_and_reap(&mut child, group);
        bail!("{what}: no answer within {secs}s; killed it");
    }
    // The shell has exited but is not reaped yet, so its process group id cannot be
    // reused while we wait for a background child that may still hold the pipes.
    let (Ok(out), Ok(err)) = (
        stdout.recv_timeout(left(deadline)),
        stderr.recv_timeout(left(deadline)),
    ) else {
        kill_and_reap(&mut child, group);
        bail!(
            "{what}: exited, but something it started kept its output open past \
             {secs}s; killed its process group"
        );
    };
    let status = child
        .wait()
        .map_err(|e| anyhow!("{what}: waiting for it failed: {e}"))?;
    let out = out.map_err(|e| anyhow!("{what}: reading its stdout failed: {e}"))?;
    let err = err.unwrap_or_default();
    Ok((status, out, err))
}

/// A command that did not exit 0: how it ended and the tail of its stderr, on one line.
pub(crate) fn check_exit(what: &str, status: ExitStatus, stderr: &[u8]) -> Result<()> {
    if status.success() {
        return Ok(());
    }
    let how = match (
        status.code(),
        std::os::unix::process::ExitStatusExt::signal(&status),
    ) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(signal)) => format!("was killed by signal {signal}"),
        (None, None) => format!("ended with {status}"),
    };
    let tail = stderr_tail(stderr);
    if tail.is_empty() {
        bail!("{what} {how} (no stderr)");
    }
    bail!("{what} {how}: {tail}");
}

fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}

/// Signals once the child has exited, without reaping it (`WNOWAIT`): reaping stays with
/// the caller, so the pid and process group id stay ours until then.
fn exit_signal(pid: Pid) -> Receiver<()> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
        while let Err(Errno::EINTR) = waitid(Id::Pid(pid), flags) {}
        let _ = tx.send(());
    });
    rx
}

fn kill_and_reap(child: &mut Child, group: Pid) {
    // ESRCH (already gone) is fine; the reap below is what prevents a zombie.
    let _ = killpg(group, Signal::SIGKILL);
    let _ = child.wait();
}

/// Reads a pipe to its end on a thread. Keeps the first `keep` bytes (plus one, to tell
/// that there was more), or the last `keep` bytes when `tail`; the rest is drained so the
/// writer never blocks on a full pipe.
fn read_all(
    pipe: Option<impl Read + Send + 'static>,
    keep: usize,
    tail: bool,
) -> Receiver<io::Result<Vec<u8>>> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let Some(mut pipe) = pipe else {
            let _ = tx.send(Ok(Vec::new()));
            return;
        };
        let mut kept = Vec::new();
        let mut buf = [0u8; 8192];
        let result = loop {
            match pipe.read(&mut buf) {
                Ok(0) => break Ok(kept),
                Ok(n) => {
                    kept.extend_from_slice(&buf[..n]);
                    if tail && kept.len() > keep {
                        kept.drain(..kept.len() - keep);
                    } else if !tail && kept.len() > keep + 1 {
                        kept.truncate(keep + 1);
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(e),
            }
        };
        let _ = tx.send(result);
    });
    rx
}

/// The last few lines of stderr on one line, at most [`STDERR_TAIL_CHARS`] characters.
fn stderr_tail(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    let lines: Vec<&str> = text.lines().filter(|l| !l.trim().is_empty()).collect();
    let last = lines[lines.len().saturating_sub(3)..].join(" | ");
    let flat = one_line(&last);
    let chars = flat.chars().count();
    if chars > STDERR_TAIL_CHARS {
        let cut: String = flat.chars().skip(chars - STDERR_TAIL_CHARS).collect();
        format!("…{cut}")
    } else {
        flat
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stderr_tail_keeps_the_last_lines_on_one_line() {
        assert_eq!(stderr_tail(b"a\n\nb\nc\nd\n"), "b | c | d");
        assert_eq!(stderr_tail(b""), "");
        let long = "x".repeat(1000);
        let tail = stderr_tail(long.as_bytes());
        assert_eq!(tail.chars().count(), STDERR_TAIL_CHARS + 1);
        assert!(tail.starts_with('…'));
    }
}
