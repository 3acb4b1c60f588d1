//! A real PostgreSQL server for the tests, from the machine's `postgresql` package.
//!
//! [`database`] gives each test a database of its own on one server started at the
//! first call of the run; tests that stop and restart a server start their own
//! ([`Server::start`]). A server lives in a temporary folder, listens only on a Unix
//! socket there (no TCP port), and is stopped, and its folder removed, by a watcher
//! when the test process ends. As root (CI), the server runs as the `postgres` user,
//! since PostgreSQL refuses to run as root.
//!
//! No server binaries is a test failure naming the package to install, never a skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

/// A running server.
#[derive(Debug)]
pub struct Server {
    /// Its folder: data in `data/`, the socket in `socket/`.
    dir: PathBuf,
    bin: PathBuf,
    /// Commits wait for the disk (`fsync = on`, as in production); the tests' servers
    /// skip that.
    durable: bool,
}

/// The server this run's tests share.
pub fn shared() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

/// The URL of a new, empty database on the shared server.
pub fn database() -> String {
    shared().create_database()
}

/// The URL of a new, empty database on a server of its own whose commits wait for the
/// disk, as a production server's do: for `make bench`.
#[allow(
    dead_code,
    reason = "make bench's (benches/call.rs includes this file); no test needs it"
)]
pub fn durable_database() -> String {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER
        .get_or_init(|| Server::start_with(true))
        .create_database()
}

/// The folder holding PostgreSQL's server programs.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("WARDEN_TEST_PG_BIN") {
        return PathBuf::from(dir);
    }
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let version = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((version, bin))
        })
        .collect();
    found.sort();
    match found.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "no PostgreSQL server found under /usr/lib/postgresql: install Debian's \
             `postgresql` package (apt-get install -y postgresql; .ci/run does), or set \
             WARDEN_TEST_PG_BIN to the folder holding `postgres` and `initdb`"
        ),
    }
}

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// `program` with `args`, run as the `postgres` user when this process is root.
fn as_server_user(program: &Path) -> Command {
    if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--"]).arg(program);
        c
    } else {
        Command::new(program)
    }
}

impl Server {
    /// Initialises and starts a new server (`fsync = off`); returns once it accepts
    /// connections.
    pub fn start() -> Server {
        Server::start_with(false)
    }

    fn start_with(durable: bool) -> Server {
        let bin = bin_dir();
        let dir = std::env::temp_dir().join(format!(
            "warden-pg-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(dir.join("socket")).unwrap();
        if is_root() {
            let uid = Command::new("id")
                .args(["-u", "postgres"])
                .output()
                .unwrap();
            assert!(
                uid.status.success(),
                "no `postgres` user: install Debian's `postgresql` package"
            );
            let status = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(&dir)
                .status()
                .unwrap();
            assert!(status.success());
        }
        // The tests' servers skip initdb's flush too (`-N`). A durable one (the
        // benchmark's) waits for it: otherwise the kernel writes the new cluster's
        // ~40 MB back during the first half minute of measuring, and every commit's
        // flush queues behind it.
        let mut initdb = as_server_user(&bin.join("initdb"));
        if !durable {
            initdb.arg("-N");
        }
        let out = initdb
            .args(["-A", "trust", "-U", "postgres", "-D"])
            .arg(dir.join("data"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let server = Server { dir, bin, durable };
        server.run();
        server
    }

    /// Starts the server process (again) with a watcher that stops it, and removes its
    /// folder, once this test process is gone.
    fn run(&self) {
        let script = format!(
            "'{postgres}' -D '{dir}/data' -k '{dir}/socket' -c listen_addresses= \
             -c fsync={fsync} -c max_connections=300 -c shared_buffers=32MB \
             >>'{dir}/log' 2>&1 & pg=$!; \
             while [ -d /proc/{parent} ] && kill -0 $pg 2>/dev/null; do sleep 0.5; done; \
             if ! [ -d /proc/{parent} ]; then kill -INT $pg; wait $pg; rm -rf '{dir}'; fi",
            postgres = self.bin.join("postgres").display(),
            dir = self.dir.display(),
            fsync = if self.durable { "on" } else { "off" },
            parent = std::process::id(),
        );
        let sh = Path::new("/bin/sh");
        let mut watcher = as_server_user(sh)
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::spawn(move || watcher.wait());
        self.wait_ready();
    }

    fn wait_ready(&self) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let ok = Command::new(self.bin.join("pg_isready"))
                .arg("-h")
                .arg(self.socket())
                .args(["-U", "postgres", "-q"])
                .status()
                .is_ok_and(|s| s.success());
            if ok {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "PostgreSQL did not start within 30 s: {}",
                std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("socket")
    }

    /// The URL of database `name` on this server.
    pub fn url(&self, name: &str) -> String {
        format!(
            "postgresql://postgres@localhost/{name}?host={}",
            self.socket().display()
        )
    }

    /// Runs `sql` on database `name` with `psql`; its output.
    pub fn psql(&self, name: &str, sql: &str) -> String {
        let out = Command::new(self.bin.join("psql"))
            .arg("-h")
            .arg(self.socket())
            .args([
                "-U",
                "postgres",
                "-d",
                name,
                "-v",
                "ON_ERROR_STOP=1",
                "-At",
                "-c",
                sql,
            ])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql failed on {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A new empty database; its URL.
    pub fn create_database(&self) -> String {
        let name = format!("t{}", NEXT.fetch_add(1, Ordering::Relaxed));
        self.psql("postgres", &format!("CREATE DATABASE {name}"));
        self.url(&name)
    }

    /// Stops the server (a fast shutdown: connections are cut).
    pub fn stop(&self) {
        let status = as_server_user(&self.bin.join("pg_ctl"))
            .args(["-D"])
            .arg(self.dir.join("data"))
            .args(["-m", "fast", "-w", "stop"])
            .stdout(Stdio::null())
            .status()
            .unwrap();
        assert!(status.success(), "pg_ctl stop failed");
    }

    /// Starts a stopped server again.
    pub fn restart(&self) {
        self.run();
    }
}

static NEXT: AtomicU32 = AtomicU32::new(0);
