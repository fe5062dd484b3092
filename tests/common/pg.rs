//! A throwaway PostgreSQL for this test process, holding Curio's tables
//! (tests/fixtures/curio_real_schema.sql, generated from Curio's migrations by
//! scripts/curio-schema), with a fresh database per test.
//!
//! One server per process, started on first use: `initdb` into a temp dir, `postgres` on
//! 127.0.0.1 at a free port with its unix socket in that dir, run as an unprivileged user
//! when we are root (PostgreSQL refuses root). Each test gets `CREATE DATABASE ... TEMPLATE`
//! of a database that already holds the schema, so tests are independent and can run in
//! parallel.
//!
//! Stopping: the test harness exits without running destructors of statics, so cleanup
//! cannot hang off a `Drop`. initdb and the server are run by a small bash watchdog whose
//! stdin is a pipe from this process that nothing ever writes to. When this process ends,
//! however it ends (normal exit, panic, SIGKILL), the kernel closes the pipe; the watchdog
//! sees EOF, stops postgres (fast shutdown), waits for it, and removes the temp dir. The
//! watchdog has its own process group, so a Ctrl-C on `cargo test` reaches only this
//! process, and the watchdog still cleans up after it.

use std::ffi::OsStr;
use std::fs;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

use postgres::{Client, Config, NoTls};

/// The server checks this password (scram-sha-256 over TCP), so probes exercise real auth.
pub const USER: &str = "fleetagent";
pub const PASSWORD: &str = "pg-Test-pw-7f3a";

const TEMPLATE_DB: &str = "curio_template";
const SCHEMA_SQL: &str = include_str!("../fixtures/curio_real_schema.sql");
const START_TIMEOUT: Duration = Duration::from_secs(60);
const START_ATTEMPTS: u32 = 4;
const MISSING_BINARIES: &str =
    "PostgreSQL server binaries (initdb, postgres) not found under /usr/lib/postgresql/*/bin: run scripts/ensure-postgres";

/// bash: `watchdog DIR N INITDB... POSTGRES...` (the first N words after N are the initdb
/// command). It owns the temp dir and the server from the start. Its stdin is a pipe from
/// the test process that nobody writes to, so "readable" means EOF: the test process is
/// gone. Then it stops postgres (SIGINT, fast shutdown), waits for it, and removes DIR.
/// Should the test process die during initdb, it notices right after initdb ends.
const WATCHDOG: &str = r#"
set -u
dir=$1; n=$2; shift 2
init=("${@:1:n}"); serve=("${@:n+1}")
exec 3<&0 0</dev/null
if ! "${init[@]}" >"$dir/initdb.log" 2>&1; then
    echo "initdb failed: $(tail -n 5 "$dir/initdb.log" | tr '\n' ' ')" >&2
elif ! read -t 0 -u 3; then
    "${serve[@]}" &
    pg=$!
    cat <&3 >/dev/null
    kill -INT "$pg" 2>/dev/null
    wait "$pg"
fi
rm -rf "$dir"
"#;

struct Server {
    port: u16,
    admin: Mutex<Client>,
    /// Held open for the life of the process: its EOF is the watchdog's stop signal.
    _stop_pipe: ChildStdin,
    _watchdog: Child,
}

static SERVER: OnceLock<Result<Server, String>> = OnceLock::new();
static NEXT_DB: AtomicU32 = AtomicU32::new(1);

/// A database of its own for one test, with Curio's tables empty.
pub struct TestDb {
    pub name: String,
    pub port: u16,
    client: Client,
}

impl TestDb {
    /// A URL with the password, as `FLEETAGENT_HARMONYDB_URL` would hold it.
    pub fn url(&self) -> String {
        format!(
            "postgresql://{USER}:{PASSWORD}@127.0.0.1:{}/{}?sslmode=disable",
            self.port, self.name
        )
    }

    pub fn exec(&mut self, sql: &str) {
        if let Err(e) = self.client.batch_execute(sql) {
            panic!("test SQL failed on {}: {e:?}\n{sql}", self.name);
        }
    }

    /// The one integer `sql` returns (e.g. Curio's own count, to compare with a reading).
    pub fn query_i64(&mut self, sql: &str) -> i64 {
        match self.client.query_one(sql, &[]) {
            Ok(row) => row.get(0),
            Err(e) => panic!("test SQL failed on {}: {e:?}\n{sql}", self.name),
        }
    }

    /// Another connection to this database (e.g. to hold a lock while a probe runs).
    pub fn connect(&self) -> Client {
        connect(self.port, &self.name).unwrap_or_else(|e| panic!("{e}"))
    }
}

/// Creates a fresh database from the schema template. Panics with a clear message when
/// PostgreSQL cannot be started: a test that needs it must fail, never skip.
pub fn fresh_db() -> TestDb {
    let server = match SERVER.get_or_init(start) {
        Ok(server) => server,
        Err(e) => panic!("test PostgreSQL: {e}"),
    };
    let name = format!("test_{}", NEXT_DB.fetch_add(1, Ordering::Relaxed));
    server
        .admin
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .batch_execute(&format!("CREATE DATABASE {name} TEMPLATE {TEMPLATE_DB}"))
        .unwrap_or_else(|e| panic!("test PostgreSQL: CREATE DATABASE {name}: {e:?}"));
    let client = connect(server.port, &name).unwrap_or_else(|e| panic!("{e}"));
    TestDb {
        name,
        port: server.port,
        client,
    }
}

fn connect(port: u16, dbname: &str) -> Result<Client, String> {
    Config::new()
        .host("127.0.0.1")
        .port(port)
        .user(USER)
        .password(PASSWORD)
        .dbname(dbname)
        .connect_timeout(Duration::from_secs(10))
        .connect(NoTls)
        .map_err(|e| format!("test PostgreSQL: connecting to {dbname} on port {port}: {e:?}"))
}

/// The newest `/usr/lib/postgresql/<version>/bin` holding `initdb` and `postgres`.
fn bin_dir() -> Result<PathBuf, String> {
    let root = Path::new("/usr/lib/postgresql");
    let entries = fs::read_dir(root).map_err(|_| MISSING_BINARIES.to_string())?;
    let mut found: Vec<(Vec<u32>, PathBuf)> = entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let version: Vec<u32> = e
                .file_name()
                .to_str()?
                .split('.')
                .map(|p| p.parse().ok())
                .collect::<Option<_>>()?;
            let bin = e.path().join("bin");
            (bin.join("initdb").is_file() && bin.join("postgres").is_file())
                .then_some((version, bin))
        })
        .collect();
    found.sort();
    found
        .pop()
        .map(|(_, bin)| bin)
        .ok_or_else(|| MISSING_BINARIES.to_string())
}

/// Who runs the server: nobody special when we are not root; else `postgres`, or `nobody`.
struct RunAs {
    ids: Option<(nix::unistd::Uid, nix::unistd::Gid, String)>,
}

impl RunAs {
    fn pick() -> Result<RunAs, String> {
        if !nix::unistd::geteuid().is_root() {
            return Ok(RunAs { ids: None });
        }
        for name in ["postgres", "nobody"] {
            if let Ok(Some(user)) = nix::unistd::User::from_name(name) {
                return Ok(RunAs {
                    ids: Some((user.uid, user.gid, name.to_string())),
                });
            }
        }
        Err(
            "running as root and neither a `postgres` nor a `nobody` user exists to run PostgreSQL"
                .into(),
        )
    }

    /// `program args...`, wrapped in `setpriv` to drop root. setpriv execs the program, so
    /// its pid is the server's.
    fn command(&self, program: &Path) -> Command {
        match &self.ids {
            None => Command::new(program),
            Some((uid, gid, _)) => {
                let mut c = Command::new("setpriv");
                c.arg(format!("--reuid={uid}"))
                    .arg(format!("--regid={gid}"))
                    .arg("--clear-groups")
                    .arg("--")
                    .arg(program);
                c
            }
        }
    }

    fn give(&self, path: &Path) -> Result<(), String> {
        if let Some((uid, gid, name)) = &self.ids {
            nix::unistd::chown(path, Some(*uid), Some(*gid))
                .map_err(|e| format!("chown {} to {name}: {e}", path.display()))?;
        }
        Ok(())
    }
}

fn start() -> Result<Server, String> {
    let bin = bin_dir()?;
    let run_as = RunAs::pick()?;
    let mut last_error = String::new();
    for _ in 0..START_ATTEMPTS {
        match start_once(&bin, &run_as) {
            Ok(server) => return Ok(server),
            Err(Attempt::PortTaken(log)) => last_error = log,
            Err(Attempt::Failed(e)) => return Err(e),
        }
    }
    Err(format!(
        "no free port after {START_ATTEMPTS} attempts; last log: {last_error}"
    ))
}

enum Attempt {
    /// Another process took the port between our probe of it and the server's bind.
    PortTaken(String),
    Failed(String),
}

fn start_once(bin: &Path, run_as: &RunAs) -> Result<Server, Attempt> {
    let failed = Attempt::Failed;
    // Under /tmp when dropping root: a $TMPDIR below /root would not be reachable.
    let parent = if run_as.ids.is_some() {
        PathBuf::from("/tmp")
    } else {
        std::env::temp_dir()
    };
    let tmp = tempfile::Builder::new()
        .prefix("fleetagent-pg-")
        .tempdir_in(&parent)
        .map_err(|e| failed(format!("creating a temp dir in {}: {e}", parent.display())))?;
    let dir = tmp.path().to_path_buf();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700))
        .map_err(|e| failed(format!("chmod {}: {e}", dir.display())))?;
    run_as.give(&dir).map_err(failed)?;
    let pwfile = dir.join("pwfile");
    fs::write(&pwfile, format!("{PASSWORD}\n"))
        .and_then(|_| fs::set_permissions(&pwfile, fs::Permissions::from_mode(0o600)))
        .map_err(|e| failed(format!("writing {}: {e}", pwfile.display())))?;
    run_as.give(&pwfile).map_err(failed)?;

    let data = dir.join("data");
    let mut initdb = run_as.command(&bin.join("initdb"));
    initdb
        .arg("--pgdata")
        .arg(&data)
        .arg(format!("--username={USER}"))
        .arg(format!("--pwfile={}", pwfile.display()))
        .args(["--auth-local=trust", "--auth-host=scram-sha-256"])
        .args([
            "--encoding=UTF8",
            "--locale=C",
            "--no-sync",
            "--no-instructions",
        ]);
    let initdb_words: Vec<&OsStr> = std::iter::once(initdb.get_program())
        .chain(initdb.get_args())
        .collect();

    let port = free_port().map_err(failed)?;
    let mut server = run_as.command(&bin.join("postgres"));
    server
        .arg("-D")
        .arg(&data)
        .arg("-p")
        .arg(port.to_string())
        .arg("-k")
        .arg(&dir)
        .args(["-c", "listen_addresses=127.0.0.1"])
        // A scratch server: durability buys nothing and costs test time.
        .args(["-c", "fsync=off", "-c", "synchronous_commit=off"])
        .args(["-c", "full_page_writes=off", "-c", "max_connections=100"]);
    let mut watchdog = Command::new("bash");
    watchdog
        .arg("-c")
        .arg(WATCHDOG)
        .arg("fleetagent-pg-watchdog")
        .arg(&dir)
        .arg(initdb_words.len().to_string())
        .args(&initdb_words)
        .arg(server.get_program())
        .args(server.get_args())
        .current_dir(&dir)
        .env("LC_ALL", "C")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .process_group(0);
    let mut child = watchdog
        .spawn()
        .map_err(|e| failed(format!("starting the postgres watchdog (bash): {e}")))?;
    // From here on the watchdog removes the temp dir, even if this process dies in initdb.
    let _ = tmp.keep();
    let stop_pipe = child.stdin.take().expect("piped stdin");
    let log = server_log(child.stderr.take().expect("piped stderr"));

    let give_up = |child: &mut Child, stop_pipe: ChildStdin, what: Attempt| {
        drop(stop_pipe);
        let _ = child.wait();
        what
    };
    let deadline = Instant::now() + START_TIMEOUT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match log.recv_timeout(left) {
            Ok(line) => {
                let ready = line.contains("database system is ready to accept connections");
                let port_taken =
                    line.contains("could not bind") || line.contains("Address already in use");
                seen.push(line);
                if ready {
                    break;
                }
                if port_taken {
                    return Err(give_up(
                        &mut child,
                        stop_pipe,
                        Attempt::PortTaken(seen.join(" | ")),
                    ));
                }
            }
            Err(RecvTimeoutError::Timeout) => {
                let msg = format!(
                    "postgres not ready within {}s; log: {}",
                    START_TIMEOUT.as_secs(),
                    seen.join(" | ")
                );
                return Err(give_up(&mut child, stop_pipe, failed(msg)));
            }
            Err(RecvTimeoutError::Disconnected) => {
                let msg = format!("postgres exited while starting; log: {}", seen.join(" | "));
                return Err(give_up(&mut child, stop_pipe, failed(msg)));
            }
        }
    }

    let prepared = connect(port, "postgres").and_then(|mut admin| {
        admin
            .batch_execute(&format!("CREATE DATABASE {TEMPLATE_DB}"))
            .map_err(|e| format!("CREATE DATABASE {TEMPLATE_DB}: {e:?}"))?;
        let mut template = connect(port, TEMPLATE_DB)?;
        template
            .batch_execute(SCHEMA_SQL)
            .map_err(|e| format!("loading tes../fixtures/curio_real_schema.sql: {e:?}"))?;
        // CREATE DATABASE ... TEMPLATE needs the template free of connections.
        drop(template);
        Ok(admin)
    });
    match prepared {
        Ok(admin) => Ok(Server {
            port,
            admin: Mutex::new(admin),
            _stop_pipe: stop_pipe,
            _watchdog: child,
        }),
        Err(e) => Err(give_up(&mut child, stop_pipe, failed(e))),
    }
}

/// A port nothing listens on right now. Another process may still take it before the
/// server binds; `start` retries on that.
fn free_port() -> Result<u16, String> {
    let listener =
        TcpListener::bind("127.0.0.1:0").map_err(|e| format!("finding a free port: {e}"))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| format!("finding a free port: {e}"))
}

/// The server's log lines while it starts; afterwards the pipe is drained and dropped so
/// the server never blocks writing its log.
fn server_log(stderr: impl std::io::Read + Send + 'static) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut reader = BufReader::new(stderr);
        let mut line = Vec::new();
        while matches!(reader.read_until(b'\n', &mut line), Ok(n) if n > 0) {
            let _ = tx.send(String::from_utf8_lossy(&line).trim().to_string());
            line.clear();
        }
    });
    rx
}
