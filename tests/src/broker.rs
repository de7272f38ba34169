//! Real `padres-broker` processes for end-to-end tests: started on loopback ports chosen
//! at run time, each with its own data directory, killed (and the directory removed) when
//! dropped.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use padres_client::Client;

/// A broker process, killed when dropped.
#[derive(Debug)]
pub struct Broker {
    /// The process.
    pub child: Child,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Where its HTTP listener is, if it was started with `--http`.
    pub http: Option<SocketAddr>,
    /// Its data directory (its certificate is `cert.pem` there).
    pub dir: PathBuf,
    /// The flags it was started with (but --listen), to restart it the same way.
    pub args: Vec<String>,
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        // PADRES_KEEP_TEST_DIRS=1 keeps the data directories (logs, stores) to look at.
        if std::env::var_os("PADRES_KEEP_TEST_DIRS").is_none() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// The data directory of broker `name` in test `test`, under the system temporary directory.
pub fn data_dir(test: &str, name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("padres-e2e-{test}-{name}-{}", std::process::id()))
}

/// Spawns a broker listening on `listen` and reads the addresses it prints: the HTTP
/// listener's first if it has one, then the QUIC one.
fn spawn(dir: &Path, listen: &str, args: &[String]) -> (Child, SocketAddr, Option<SocketAddr>) {
    let mut command = Command::new(crate::binary("padres-broker"));
    command.args(["--listen", listen, "--data-dir"]).arg(dir).args(args);
    let mut child = command.stdout(Stdio::piped()).stderr(Stdio::null()).spawn().expect("broker starts");
    let mut stdout = BufReader::new(child.stdout.take().expect("stdout"));
    let mut http = None;
    loop {
        let mut line = String::new();
        stdout.read_line(&mut line).expect("reads the listening line");
        if let Some((_, a)) =
            line.trim().rsplit_once("http://").or_else(|| line.trim().rsplit_once("https://"))
        {
            http = Some(a.parse().unwrap_or_else(|_| panic!("no HTTP address in {line:?}")));
            continue;
        }
        let addr = line
            .trim()
            .rsplit_once("quic://")
            .and_then(|(_, a)| a.parse().ok())
            .unwrap_or_else(|| panic!("no address in {line:?}"));
        return (child, addr, http);
    }
}

/// A broker named `name` with extra flags.
pub fn start_with(name: &str, test: &str, extra: &[String]) -> Broker {
    let dir = data_dir(test, name);
    let mut args = vec!["--name".to_owned(), name.to_owned()];
    args.extend(extra.iter().cloned());
    let (child, addr, http) = spawn(&dir, "127.0.0.1:0", &args);
    Broker { child, addr, http, dir, args }
}

/// A broker named `name` without neighbours.
pub fn start_broker(name: &str, test: &str) -> Broker {
    start_with(name, test, &[])
}

/// Flags that make a broker dial `neighbour`, trusting its certificate.
pub fn neighbour_of(n: &Broker) -> Vec<String> {
    vec![
        "--neighbour".into(),
        format!("quic://{}", n.addr),
        "--peer-cert".into(),
        n.dir.join("cert.pem").display().to_string(),
    ]
}

/// A broker that dials `neighbour` (trusting its certificate), if given.
pub fn start_linked_broker(name: &str, test: &str, neighbour: Option<&Broker>) -> Broker {
    start_with(name, test, &neighbour.map(neighbour_of).unwrap_or_default())
}

impl Broker {
    /// Kills the process (no clean shutdown) and starts it again on the same port with
    /// the same data directory and flags.
    pub fn kill_and_restart(&mut self) {
        self.kill();
        self.start_again();
    }

    /// Sends the process SIGTERM and waits for it to exit, at most `seconds`; its exit
    /// status, or `None` if it still runs.
    pub async fn terminate(&mut self, seconds: u64) -> Option<std::process::ExitStatus> {
        let status =
            Command::new("kill").args(["-TERM", &self.child.id().to_string()]).status().expect("kill runs");
        assert!(status.success());
        for _ in 0..seconds * 20 {
            if let Some(exited) = self.child.try_wait().expect("waits") {
                return Some(exited);
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        None
    }

    /// Kills the process (no clean shutdown); [`Broker::start_again`] brings it back.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Starts a killed broker again on the same port with the same data directory and flags.
    pub fn start_again(&mut self) {
        let (child, addr, http) = spawn(&self.dir, &self.addr.to_string(), &self.args);
        assert_eq!(addr, self.addr);
        self.child = child;
        self.http = http;
    }
}

/// A client of `broker` named `name`, trusting its certificate.
pub async fn client(broker: &Broker, name: &str) -> Client {
    Client::connect(broker.addr, "localhost", &broker.dir.join("cert.pem"), name).await.expect("connects")
}

/// The advertisements in `routes` other than the brokers' own for their reports (class
/// `padres_broker`, one per broker that reports: `padres_broker::monitor`).
pub fn client_advertisements(routes: &padres_lang::wire::RoutesReport) -> usize {
    routes.srt.iter().filter(|entry| !entry.text.contains("'padres_broker'")).count()
}

/// Checks `condition` on a broker's routes until it holds (tables settle as messages
/// travel), or fails after ten seconds.
pub async fn until_routes(
    observer: &Client,
    what: &str,
    condition: impl Fn(&padres_lang::wire::RoutesReport) -> bool,
) {
    let mut last = None;
    for _ in 0..200 {
        let routes = observer.routes(1000).await.expect("routes");
        if condition(&routes) {
            return;
        }
        last = Some(routes);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("{what}: never held; last routes {last:#?}");
}
