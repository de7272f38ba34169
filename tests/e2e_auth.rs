//! Client authentication and permissions (`broker/src/auth.rs`, docs/security.md) on a real
//! broker: tokens hashed with `padres-broker auth hash-token`, agents confined to their own
//! statuses and commands, an operator, a monitor that reads history, and what others see of
//! a refused request (nothing).

use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use padres_client::{Client, ClientError, Connect, Notification, Trust};
use padres_lang::wire::ErrorCode;
use padres_tests::binary;
use padres_tests::broker::{Broker, data_dir, start_with, until_routes};

/// The Argon2id hash of `token`, as the broker's CLI makes it.
fn hash(token: &str) -> String {
    let mut child = Command::new(binary("padres-broker"))
        .args(["auth", "hash-token"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("padres-broker runs");
    writeln!(child.stdin.take().expect("stdin"), "{token}").expect("token written");
    let out = child.wait_with_output().expect("hash printed");
    assert!(out.status.success());
    String::from_utf8(out.stdout).expect("utf-8").trim().to_owned()
}

/// A broker whose clients need tokens: two agents, an operator and a monitor; `extra`
/// flags are added.
fn secured_broker(test: &str, extra: &[String]) -> Broker {
    let dir = data_dir(test, "conf");
    std::fs::create_dir_all(&dir).expect("config dir");
    let config = format!(
        r#"
[auth]
anonymous = false

[auth.tokens]
agent-1 = "{a1}"
agent-2 = "{a2}"
operator = "{op}"
monitor = "{mo}"

[auth.groups]
agents = ["agent-1", "agent-2"]

[[auth.permit]]
to = ["agents"]
advertise = ["[class,eq,'job_status'],[agent,eq,'${{principal}}']"]
subscribe = ["[class,eq,'agent_ctl'],[agent,eq,'${{principal}}']"]

[[auth.permit]]
to = ["operator"]
advertise = ["[class,eq,'agent_ctl']", "[class,eq,'trigger']"]
subscribe = ["[class,eq,'job_status']"]
routes = true

[[auth.permit]]
to = ["monitor"]
subscribe = ["[class,eq,'job_status']"]
history = true
"#,
        a1 = hash("secret-1"),
        a2 = hash("secret-2"),
        op = hash("secret-op"),
        mo = hash("secret-mo"),
    );
    let file = dir.join("broker.toml");
    std::fs::write(&file, config).expect("config written");
    let mut args = vec![
        "--config".to_owned(),
        file.display().to_string(),
        "--history".to_owned(),
        "[class,eq,'job_status']".to_owned(),
    ];
    args.extend(extra.iter().cloned());
    let broker = start_with("B1", test, &args);
    let _ = std::fs::remove_dir_all(&dir);
    broker
}

async fn connect(broker: &Broker, name: &str, token: Option<&str>) -> Result<Client, ClientError> {
    let mut connect = Connect::new(broker.addr)
        .trust(Trust::Certificates(vec![broker.dir.join("cert.pem")]))
        .name(name)
        .reconnect(false);
    if let Some(token) = token {
        connect = connect.token(token);
    }
    connect.connect().await
}

fn forbidden(result: Result<Option<padres_lang::MessageId>, ClientError>) -> String {
    match result {
        Err(ClientError::Refused { code: ErrorCode::Forbidden, message }) => message,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_need_tokens_and_principals_stay_within_their_permits() {
    let broker = secured_broker("auth", &[]);

    // No token where anonymous clients are refused, a wrong one, and a principal unknown.
    for (name, token) in [("agent-1", None), ("agent-1", Some("secret-2")), ("nobody", Some("secret-1"))] {
        match connect(&broker, name, token).await {
            Err(ClientError::Refused { code: ErrorCode::Forbidden, message }) => {
                assert!(message.contains("token"), "{message}");
            }
            other => panic!("{name} with {token:?}: expected a refusal, got {other:?}"),
        }
    }

    let mut monitor = connect(&broker, "monitor", Some("secret-mo")).await.expect("the monitor connects");
    monitor.send("s [class,eq,'job_status']").await.expect("the monitor may watch statuses");
    let agent = connect(&broker, "agent-1", Some("secret-1")).await.expect("agent-1 connects");

    // Its own status: allowed, and seen.
    agent.send("a [class,eq,'job_status'],[agent,eq,'agent-1'],[job,isPresent,'']").await.expect("its own");
    agent.send("p [class,'job_status'],[agent,'agent-1'],[job,'A']").await.expect("published");
    match tokio::time::timeout(Duration::from_secs(5), monitor.next_notification()).await {
        Ok(Some(Notification::Publication { publication, .. })) => {
            assert_eq!(publication.get("job").map(ToString::to_string).as_deref(), Some("'A'"));
        }
        other => panic!("the monitor sees agent-1's status: {other:?}"),
    }

    // Another agent's status: refused, with the rule it lacked; a publication without an
    // advertisement is refused too, and the monitor sees nothing of either.
    let why = forbidden(agent.send("a [class,eq,'job_status'],[agent,eq,'agent-2']").await);
    assert!(why.contains("principal 'agent-1' may not advertise"), "{why}");
    assert!(why.contains("[class,eq,'job_status'],[agent,eq,'agent-1']"), "names its permit: {why}");
    let leaves_agent_out = forbidden(agent.send("p [class,'job_status'],[job,'B']").await);
    assert!(leaves_agent_out.contains("may not publish"), "{leaves_agent_out}");
    // Nothing of the refused requests reaches anyone: the monitor's next notification is
    // the allowed publication made after them.
    agent.send("p [class,'job_status'],[agent,'agent-1'],[job,'C']").await.expect("published");
    match tokio::time::timeout(Duration::from_secs(5), monitor.next_notification()).await {
        Ok(Some(Notification::Publication { publication, .. })) => {
            assert_eq!(publication.get("job").map(ToString::to_string).as_deref(), Some("'C'"));
        }
        other => panic!("the monitor's next notification is job C: {other:?}"),
    }

    // Another agent's commands; every agent's commands; a composite with one leaf outside.
    let spy = forbidden(agent.send("s [class,eq,'agent_ctl'],[agent,eq,'agent-2']").await);
    assert!(spy.contains("may not subscribe"), "{spy}");
    agent.send("s [class,eq,'agent_ctl'],[agent,eq,'agent-1']").await.expect("its own commands");
    let leaf = forbidden(
        agent
            .send("cs {[class,eq,'agent_ctl'],[agent,eq,'agent-1']} & {[class,eq,'agent_ctl'],[agent,eq,'agent-2']}")
            .await,
    );
    assert!(leaf.contains("subscribe to a leaf"), "{leaf}");
    // Its own commands from the past: history is a right of its own.
    let past =
        forbidden(agent.send("s [class,eq,'agent_ctl'],[agent,eq,'agent-1'],[time,>=,'now-1h']").await);
    assert!(past.contains("may not read history"), "{past}");

    // The monitor reads history and publishes nothing.
    monitor.send("s [class,eq,'job_status'],[time,>=,'now-1h']").await.expect("the monitor reads history");
    let adv = forbidden(monitor.send("a [class,eq,'job_status']").await);
    assert!(adv.contains("principal 'monitor' may not advertise") && adv.contains("(it has none)"), "{adv}");

    // The operator commands agents.
    let operator = connect(&broker, "operator", Some("secret-op")).await.expect("the operator connects");
    operator
        .send("a [class,eq,'agent_ctl'],[agent,isPresent,''],[command,isPresent,'']")
        .await
        .expect("commands");

    // The routing tables show every client's subscriptions: a right of their own.
    match monitor.routes(10).await {
        Err(ClientError::Refused { code: ErrorCode::Forbidden, message }) => {
            assert!(message.contains("principal 'monitor' may not read the routing tables"), "{message}");
        }
        other => panic!("the monitor may not read the routing tables: {other:?}"),
    }
    let routes = operator.routes(10).await.expect("the operator reads the routing tables");
    assert!(!routes.prt.is_empty(), "{routes:?}");

    let stats = operator.stats().await.expect("stats");
    assert_eq!(stats.clients_refused, 3, "{stats:?}");
    assert_eq!(stats.permission_denials, 7, "{stats:?}");
}

fn run(args: &[&str]) {
    let out = Command::new(binary("padres-broker")).args(args).output().expect("padres-broker runs");
    assert!(out.status.success(), "padres-broker {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_names_its_principal_and_cannot_link_as_a_broker() {
    let test = "auth-cert";
    let ca = data_dir(test, "ca");
    let agent = data_dir(test, "agent-9");
    let b1 = data_dir(test, "B1");
    let (ca_s, agent_s, b1_s) =
        (ca.display().to_string(), agent.display().to_string(), b1.display().to_string());
    run(&["cert", "ca", "--out", &ca_s]);
    run(&["cert", "issue", "--ca", &ca_s, "--name", "B1", "--out", &b1_s]);
    run(&["cert", "issue", "--ca", &ca_s, "--client", "--name", "agent-9", "--out", &agent_s]);
    let conf = data_dir(test, "conf");
    std::fs::create_dir_all(&conf).expect("config dir");
    let file = conf.join("broker.toml");
    let permit = "[auth]\nanonymous = false\n[[auth.permit]]\nto = [\"agent-9\"]\n\
                  subscribe = [\"[class,eq,'agent_ctl'],[agent,eq,'${principal}']\"]\n";
    std::fs::write(&file, permit).expect("config written");
    let ca_pem = ca.join("ca.pem").display().to_string();
    let broker = start_with(
        "B1",
        test,
        &["--config".into(), file.display().to_string(), "--federation-ca".into(), ca_pem.clone()],
    );

    let with_cert = |name: &str| {
        Connect::new(broker.addr)
            .trust(Trust::Certificates(vec![ca.join("ca.pem")]))
            .name(name)
            .reconnect(false)
            .certificate(&agent.join("cert.pem"), &agent.join("key.pem"))
            .expect("the certificate reads")
    };
    let client = with_cert("agent-9").connect().await.expect("the certificate is its credential");
    client.send("s [class,eq,'agent_ctl'],[agent,eq,'agent-9']").await.expect("its own commands");
    let other = forbidden(client.send("s [class,eq,'agent_ctl'],[agent,eq,'agent-1']").await);
    assert!(other.contains("principal 'agent-9'"), "{other}");
    match with_cert("agent-1").connect().await {
        Err(ClientError::Refused { code: ErrorCode::Forbidden, message }) => {
            assert!(message.contains("certificate is for principal 'agent-9'"), "{message}");
        }
        other => panic!("a certificate names one principal: {other:?}"),
    }

    // A broker presenting the client certificate as its own, under the name it carries,
    // is refused at the hello (its data directory is the one the certificate was issued
    // into).
    let _impostor = start_with(
        "agent-9",
        test,
        &["--neighbour".into(), format!("quic://{}", broker.addr), "--federation-ca".into(), ca_pem],
    );
    let mut refused = 0;
    for _ in 0..100 {
        refused = client.stats().await.expect("stats").links_refused;
        if refused > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(refused > 0, "B1 refused the link");
    assert!(client.stats().await.expect("stats").neighbours.is_empty());
    for dir in [ca, conf] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

fn limited(result: Result<Option<padres_lang::MessageId>, ClientError>) -> String {
    match result {
        Err(ClientError::Refused { code: ErrorCode::LimitExceeded, message }) => message,
        other => panic!("expected a limit, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_principal_is_held_to_its_connections_subscriptions_and_publication_rate() {
    let test = "auth-limits";
    let conf = data_dir(test, "conf");
    std::fs::create_dir_all(&conf).expect("config dir");
    let file = conf.join("broker.toml");
    let config = "[auth]\nanonymous = true\n[[auth.permit]]\nto = [\"anonymous\"]\n\
                  advertise = [\"[class,eq,'t']\"]\nsubscribe = [\"[class,eq,'t']\"]\n\
                  max_connections = 2\nmax_subscriptions = 3\nmax_publish_rate = 5\n";
    std::fs::write(&file, config).expect("config written");
    let flags = ["--config", &file.display().to_string(), "--http", "127.0.0.1:0", "--http-gateway"];
    let broker = start_with("B1", test, &flags.map(str::to_owned));
    let _ = std::fs::remove_dir_all(&conf);
    let http = broker.http.expect("the HTTP listener");
    let gateway_publish =
        || padres_tests::http::request("POST", http, "/api/publish", &[], "a [class,eq,'t'],[n,isPresent,0]");

    // Connections: two at once; a third is refused until one closes, and so is a gateway
    // request of the same principal, which counts as one while it lasts.
    let a = connect(&broker, "a", None).await.expect("first");
    assert_eq!(padres_tests::http::status_of(http, &gateway_publish()).await.0, 200, "one of two");
    let b = connect(&broker, "b", None).await.expect("second");
    match connect(&broker, "c", None).await {
        Err(ClientError::Refused { code: ErrorCode::LimitExceeded, message }) => {
            assert!(message.contains("max_connections"), "{message}");
        }
        other => panic!("a third connection: {other:?}"),
    }
    let (status, text) = padres_tests::http::status_of(http, &gateway_publish()).await;
    assert_eq!(status, 429, "{text}");
    assert!(text.contains("max_connections"), "{text}");

    // Subscriptions over both connections: three.
    a.send("s [class,eq,'t'],[n,=,1]").await.expect("1");
    let two = a.send("s [class,eq,'t'],[n,=,2]").await.expect("2").expect("an id");
    b.send("s [class,eq,'t'],[n,=,3]").await.expect("3");
    let fourth = limited(b.send("s [class,eq,'t'],[n,=,4]").await);
    assert!(fourth.contains("holds 3 subscriptions") && fourth.contains("max_subscriptions"), "{fourth}");
    a.send(&format!("unsub {two}")).await.expect("unsubscribed");
    b.send("s [class,eq,'t'],[n,=,4]").await.expect("room again");

    // Publications: a burst of five, then refused until the rate allows more.
    b.send("a [class,eq,'t'],[n,isPresent,0]").await.expect("advertised");
    for n in 0..5 {
        b.send(&format!("p [class,'t'],[n,{n}]")).await.expect("within the burst");
    }
    let sixth = limited(b.send("p [class,'t'],[n,5]").await);
    assert!(sixth.contains("more than 5 a second") && sixth.contains("max_publish_rate"), "{sixth}");
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.send("p [class,'t'],[n,6]").await.expect("the bucket refills at 5 a second");

    // A connection closed makes room for another.
    a.close().await.expect("closed");
    let mut third = None;
    for _ in 0..50 {
        if let Ok(client) = connect(&broker, "c", None).await {
            third = Some(client);
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(third.is_some(), "a connection closed frees its place");
    // a's subscription went with it: c may hold two more beside b's two.
    let c = third.expect("connected");
    c.send("s [class,eq,'t'],[n,=,7]").await.expect("room after a left");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_is_never_sent_to_a_broker_whose_certificate_is_not_verified() {
    let broker = start_with("B1", "auth-insecure", &[]);
    let insecure =
        Connect::new(broker.addr).trust(Trust::Insecure).name("agent-1").token("secret").reconnect(false);
    match insecure.connect().await {
        Err(ClientError::Trust(message)) => assert!(message.contains("not verified"), "{message}"),
        other => panic!("expected a refusal to send the token, got {other:?}"),
    }
    let out = Command::new(binary("padres"))
        .args(["ping", "--insecure", "--token", "secret", "--broker", &format!("quic://{}", broker.addr)])
        .output()
        .expect("padres runs");
    assert!(!out.status.success(), "--token with --insecure is refused");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--insecure"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Says hello to `broker` as a broker named `name`, presenting the certificate in `dir`
/// (if any), and returns the refusal.
async fn hello_as_broker(broker: &Broker, name: &str, dir: Option<&std::path::Path>) -> String {
    use padres_transport::handshake::{Hello, hello};
    let identity = dir.map(|dir| {
        padres_transport::Identity::from_pem_files(&dir.join("cert.pem"), &dir.join("key.pem"))
            .expect("identity")
    });
    let trust = Trust::Certificates(vec![broker.dir.join("cert.pem")]);
    let config = padres_transport::tls::client_config(&trust, identity.as_ref()).expect("client config");
    let endpoint = quinn::Endpoint::client("127.0.0.1:0".parse().expect("address")).expect("endpoint");
    let connection =
        endpoint.connect_with(config, broker.addr, "localhost").expect("dials").await.expect("TLS succeeds");
    let (mut send, mut recv) = connection.open_bi().await.expect("a stream");
    let max = padres_lang::wire::codec::DEFAULT_MAX_FRAME;
    let mut reader = padres_lang::wire::codec::FrameReader::new(max);
    let hello_frame = Hello {
        role: padres_lang::wire::Role::Broker,
        name: padres_lang::Name::new(name).expect("name"),
        token: None,
    };
    match hello(&mut send, &mut recv, &mut reader, hello_frame, max).await {
        Err(padres_transport::HandshakeError::Refused { code: ErrorCode::Forbidden, message }) => message,
        other => panic!("expected {name} refused, got {other:?}"),
    }
}

/// Without a federation CA, `accept_brokers` pins the certificates of the brokers that may
/// dial in: B2's links, and a broker with another certificate is refused, even one that
/// calls itself B2, as is one with none. Pinning also tells brokers from clients, so a
/// broker whose `[auth]` restricts clients accepts B2 (it refuses every broker without).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_ca_only_brokers_whose_certificates_are_pinned_may_dial_in() {
    let test = "auth-pinned";
    // B2's certificate exists before B1 starts, to be pinned there.
    let b2_dir = data_dir(test, "B2");
    let _ = std::fs::remove_dir_all(&b2_dir);
    padres_broker::net::cert::load_or_create(&b2_dir, &["B2".to_owned()]).expect("B2's certificate");
    let b1 =
        secured_broker(test, &["--accept-broker".to_owned(), b2_dir.join("cert.pem").display().to_string()]);
    let dial_b1 = || vec!["--neighbour".to_owned(), format!("quic://{}", b1.addr)];
    let _b2 = start_with("B2", test, &dial_b1());
    // Another broker, and one calling itself B2 with a certificate of its own.
    let mallory = start_with("Mallory", test, &dial_b1());
    let false_b2 = start_with("B2", "auth-pinned-impostor", &dial_b1());

    let observer = connect(&b1, "operator", Some("secret-op")).await.expect("the operator connects");
    until_routes(&observer, "B2 links", |r| r.neighbours.iter().any(|n| n.as_str() == "B2")).await;
    for _ in 0..200 {
        if observer.stats().await.expect("stats").links_refused >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let stats = observer.stats().await.expect("stats");
    assert!(stats.links_refused >= 4, "Mallory and the false B2 are refused as they redial: {stats:?}");
    let neighbours: Vec<&str> = stats.neighbours.iter().map(|n| n.as_str()).collect();
    assert_eq!(neighbours, ["B2"], "only the pinned B2 links");
    for refused in [&mallory, &false_b2] {
        let own = padres_tests::broker::client(refused, "observer").await;
        let stats = own.stats().await.expect("stats");
        assert!(stats.neighbours.is_empty(), "{:?} has no link: {:?}", refused.dir, stats.neighbours);
    }

    // The refusals say why.
    let mallory_dir = data_dir(test, "Mallory");
    let untrusted = hello_as_broker(&b1, "Mallory", Some(&mallory_dir)).await;
    assert!(untrusted.contains("not trusted here") && untrusted.contains("accept_brokers"), "{untrusted}");
    let none = hello_as_broker(&b1, "Mallory", None).await;
    assert!(none.contains("present a certificate") && none.contains("accept_brokers"), "{none}");
    // B2's own certificate under another name is refused too.
    let misnamed = hello_as_broker(&b1, "B3", Some(&b2_dir)).await;
    assert!(misnamed.contains("not issued for broker 'B3'"), "{misnamed}");
    // A pinned certificate vouches for itself alone: one B2's key signed for B3 (B2's
    // certificate and key used as a CA) is refused.
    let minting = data_dir(test, "minting");
    std::fs::create_dir_all(&minting).expect("a directory");
    std::fs::copy(b2_dir.join("cert.pem"), minting.join("ca.pem")).expect("copied");
    std::fs::copy(b2_dir.join("key.pem"), minting.join("ca-key.pem")).expect("copied");
    let minted = data_dir(test, "minted");
    padres_broker::net::cert::issue(&minting, "B3", &[], &minted, true)
        .expect("B2's key signs a certificate");
    let refused = hello_as_broker(&b1, "B3", Some(&minted)).await;
    assert!(refused.contains("none of the pinned ones"), "{refused}");
    for dir in [minting, minted] {
        let _ = std::fs::remove_dir_all(dir);
    }
}

/// `federation_ca` must be a CA: a broker's certificate given there (it would let that
/// broker issue certificates for any principal) stops the broker at start, saying so.
#[test]
fn a_broker_certificate_given_as_the_federation_ca_is_refused_at_start() {
    let dir = data_dir("auth-not-a-ca", "B1");
    let _ = std::fs::remove_dir_all(&dir);
    padres_broker::net::cert::load_or_create(&dir, &["B1".to_owned()]).expect("a certificate");
    let out = Command::new(binary("padres-broker"))
        .args(["--name", "B1", "--listen", "127.0.0.1:0", "--data-dir"])
        .arg(&dir)
        .arg("--federation-ca")
        .arg(dir.join("cert.pem"))
        .output()
        .expect("padres-broker runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(stderr.contains("not a CA's"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `text` with each resolved time bound (`[time,>=,2026-…Z]`) written `[time,>=,T]`.
fn without_times(text: &str) -> String {
    let mut out = String::new();
    let mut rest = text;
    while let Some(at) = rest.find("[time,") {
        let (before, from) = rest.split_at(at);
        out.push_str(before);
        let end = from.find(']').map_or(from.len(), |e| e + 1);
        let op = from["[time,".len()..end].split(',').next().unwrap_or("");
        out.push_str(&format!("[time,{op},T]"));
        rest = &from[end..];
    }
    out.push_str(rest);
    out
}

/// Each byte of `text` that is not a letter or digit, percent-encoded (for a query).
fn encoded(text: &str) -> String {
    text.bytes()
        .map(|b| if b.is_ascii_alphanumeric() { (b as char).to_string() } else { format!("%{b:02X}") })
        .collect()
}

/// What the broker made of session line `line` sent as `name` with `token` through the
/// HTTP gateway: taken, or refused with the broker's reason (the status before it for a
/// refusal before the broker, 401 or 403).
async fn over_http(http: std::net::SocketAddr, name: &str, token: &str, line: &str) -> Result<(), String> {
    use padres_tests::http::{request, status_of};
    let auth = vec![format!("Authorization: Bearer {name}:{token}")];
    let text = match line.split_once(' ') {
        Some(("s" | "cs", what)) => {
            let key = if line.starts_with("cs") { "cs" } else { "s" };
            request("GET", http, &format!("/api/subscribe?{key}={}", encoded(what)), &auth, "")
        }
        _ => request("POST", http, "/api/publish", &auth, line),
    };
    let (status, response) = status_of(http, &text).await;
    if status == 200 {
        return Ok(());
    }
    let body = response.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    let json: serde_json::Value = serde_json::from_str(body).unwrap_or(serde_json::Value::Null);
    let message = json.get("message").or_else(|| json.get(0).and_then(|e| e.get("message")));
    let message = message.and_then(serde_json::Value::as_str).unwrap_or(body);
    Err(if status == 422 { message.to_owned() } else { format!("{status}: {message}") })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http_requests_are_their_principal_held_to_the_same_permits_as_quic_clients() {
    use padres_tests::http::{request, status_of};
    let http_flags: Vec<String> =
        ["--http", "127.0.0.1:0", "--http-gateway", "--http-views", "clients"].map(str::to_owned).to_vec();
    let broker = secured_broker("auth-http", &http_flags);
    let http = broker.http.expect("the HTTP listener");

    // The same permit cases over QUIC and through the gateway: the same outcome, and a
    // refusal in the same words.
    let cases: [(&str, &str, &str); 8] = [
        ("agent-1", "secret-1", "a [class,eq,'job_status'],[agent,eq,'agent-1'],[job,isPresent,'']"),
        ("agent-1", "secret-1", "a [class,eq,'job_status'],[agent,eq,'agent-2']"),
        ("agent-1", "secret-1", "s [class,eq,'agent_ctl'],[agent,eq,'agent-1']"),
        ("agent-1", "secret-1", "s [class,eq,'agent_ctl'],[agent,eq,'agent-2']"),
        ("agent-1", "secret-1", "s [class,eq,'agent_ctl'],[agent,eq,'agent-1'],[time,>=,'now-1h']"),
        (
            "agent-1",
            "secret-1",
            "cs {[class,eq,'agent_ctl'],[agent,eq,'agent-1']} & {[class,eq,'agent_ctl'],[agent,eq,'agent-2']}",
        ),
        ("monitor", "secret-mo", "a [class,eq,'job_status']"),
        ("monitor", "secret-mo", "s [class,eq,'job_status'],[time,>=,'now-1h']"),
    ];
    let mut refused = 0;
    for (name, token, line) in cases {
        let client = connect(&broker, name, Some(token)).await.expect("connects");
        let quic = match client.send(line).await {
            Ok(_) => Ok(()),
            Err(ClientError::Refused { code: ErrorCode::Forbidden, message }) => Err(message),
            Err(other) => panic!("{name}: {line}: {other:?}"),
        };
        let gateway = over_http(http, name, token, line).await;
        // The same words, but for a relative time resolved a millisecond apart.
        let words = |r: &Result<(), String>| r.clone().map_err(|m| without_times(&m));
        assert_eq!(words(&gateway), words(&quic), "{name}: {line}: {gateway:?}");
        refused += usize::from(quic.is_err());
    }
    assert_eq!(refused, 5, "the cases refuse as many as they allow, nearly");

    // No header where anonymous clients are refused, a wrong token, an unknown principal:
    // 401, before anything reaches the broker's router.
    let publish = "a [class,eq,'job_status'],[agent,eq,'agent-1']";
    let (status, text) = status_of(http, &request("POST", http, "/api/publish", &[], publish)).await;
    assert_eq!(status, 401, "{text}");
    assert!(
        text.contains("Bearer NAME:TOKEN") && text.to_ascii_lowercase().contains("www-authenticate"),
        "{text}"
    );
    for (name, token) in [("agent-1", "secret-2"), ("nobody", "secret-1")] {
        let refusal = over_http(http, name, token, publish).await.expect_err("refused");
        assert!(refusal.starts_with("401") && refusal.contains("token"), "{name}: {refusal}");
    }

    // The routing tables need the `routes` right; the read-only views, with http_views =
    // "clients", what a client needs.
    let get = |path: &str, auth: Option<&str>| {
        let headers: Vec<String> = auth.map(|a| format!("Authorization: Bearer {a}")).into_iter().collect();
        request("GET", http, path, &headers, "")
    };
    // (the detectors show clients' composite subscriptions too).
    for path in ["/api/routes", "/api/detectors"] {
        let (status, text) = status_of(http, &get(path, Some("monitor:secret-mo"))).await;
        assert_eq!(status, 403, "{path}: {text}");
        assert!(text.contains("principal 'monitor' may not read the routing tables"), "{text}");
        assert_eq!(status_of(http, &get(path, Some("operator:secret-op"))).await.0, 200, "{path}");
        assert_eq!(status_of(http, &get(path, None)).await.0, 401, "{path}");
    }
    for path in ["/metrics", "/api/stats", "/api/links", "/api/history", "/api/federation"] {
        assert_eq!(status_of(http, &get(path, None)).await.0, 401, "{path} without a token");
        assert_eq!(status_of(http, &get(path, Some("monitor:secret-mo"))).await.0, 200, "{path}");
    }
    // The monitor's page holds no data: anyone gets it (it asks for a token when its views
    // answer 401).
    assert_eq!(status_of(http, &get("/", None)).await.0, 200);

    // The Python example authenticates: as agent-1, its own status advertisement is taken;
    // without a principal, the broker refuses it.
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/gateway.py");
    let python = |name: Option<&str>, token: &str| {
        let mut command = Command::new("python3");
        command.arg(&script).args(["--url", &format!("http://{http}")]);
        if let Some(name) = name {
            command.args(["--name", name]);
        }
        command.env("PADRES_TOKEN", token).args(["publish", publish]);
        command.output().expect("python3 runs (the gateway example needs Python 3)")
    };
    let out = python(Some("agent-1"), "secret-1");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("\"type\": \"reply\""));
    let out = python(None, "");
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Bearer NAME:TOKEN"), "{out:?}");
}
