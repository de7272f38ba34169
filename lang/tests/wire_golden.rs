//! The wire format pinned: one sample of every frame and every broker message, with the
//! exact bytes it encodes to. Frames are bincode (standard configuration) of the serde
//! derives, so the order of enum variants and of struct fields *is* the format: a reorder,
//! a renamed type with another shape, or a changed integer type changes these bytes and
//! fails here. Changing them on purpose means a new `PROTOCOL_VERSION` (see `wire`).

use std::sync::Arc;

use padres_lang::wire::{
    BrokerMessage, BrokerStats, CloseCode, ErrorCode, Forwarded, Frame, LinkTraffic, Query, Report, Role,
    RouteEntry, RoutesReport, Token, decode, encode,
};
use padres_lang::{Message, MessageId, Name, Stamp, Stamped};

fn name(s: &str) -> Name {
    Name::new(s).expect("a valid name")
}

fn id(seq: u64) -> MessageId {
    MessageId::new(name("B1"), seq)
}

fn message(text: &str) -> Message {
    text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn adv() -> Arc<padres_lang::Advertisement> {
    Arc::new("[class,eq,'stock'],[price,>,0]".parse().expect("advertisement"))
}

fn sub() -> Arc<padres_lang::Subscription> {
    Arc::new("[class,eq,'stock'],[price,<=,1.5]".parse().expect("subscription"))
}

fn stamp() -> Stamp {
    Stamp::new(1_795_000_000_000, name("B1"), 42)
}

fn publication() -> Arc<padres_lang::Publication> {
    Arc::new("[class,'stock'],[price,1],[ok,true] payload=0x00ff".parse().expect("publication"))
}

/// The variant's name; exhaustive, so a new variant does not compile until it has a
/// sample and golden bytes below.
fn broker_variant(m: &BrokerMessage) -> &'static str {
    match m {
        BrokerMessage::Advertise { .. } => "Advertise",
        BrokerMessage::Unadvertise { .. } => "Unadvertise",
        BrokerMessage::Subscribe { .. } => "Subscribe",
        BrokerMessage::Unsubscribe { .. } => "Unsubscribe",
        BrokerMessage::Publish { .. } => "Publish",
        BrokerMessage::TreeSubscribe { .. } => "TreeSubscribe",
        BrokerMessage::TreeUnsubscribe { .. } => "TreeUnsubscribe",
        BrokerMessage::TreePublish { .. } => "TreePublish",
        BrokerMessage::Settled { what: Forwarded::Advertisement(_) } => "Settled/Advertisement",
        BrokerMessage::Settled { what: Forwarded::Subscription(_) } => "Settled/Subscription",
        BrokerMessage::Settled { what: Forwarded::TreeSubscription { .. } } => "Settled/TreeSubscription",
        BrokerMessage::Settled { what: Forwarded::Composite(_) } => "Settled/Composite",
        BrokerMessage::Settled { what: Forwarded::Unadvertisement(_) } => "Settled/Unadvertisement",
        BrokerMessage::CompositeSubscribe { .. } => "CompositeSubscribe",
        BrokerMessage::CompositeUnsubscribe { .. } => "CompositeUnsubscribe",
        BrokerMessage::CompositeMatch { .. } => "CompositeMatch",
        BrokerMessage::HistoryAdvertise { .. } => "HistoryAdvertise",
        BrokerMessage::HistoryUnadvertise { .. } => "HistoryUnadvertise",
        BrokerMessage::HistoryQuery { .. } => "HistoryQuery",
        BrokerMessage::HistoryAnswer { .. } => "HistoryAnswer",
        BrokerMessage::HistoryDone { .. } => "HistoryDone",
        BrokerMessage::TreeRepair { .. } => "TreeRepair",
        BrokerMessage::TreesSettled { .. } => "TreesSettled",
    }
}

fn frame_variant(f: &Frame) -> String {
    match f {
        Frame::Hello { role: Role::Client, .. } => "Hello/Client".into(),
        Frame::Hello { role: Role::Broker, .. } => "Hello/Broker".into(),
        Frame::Welcome { .. } => "Welcome".into(),
        Frame::Request { message, .. } => format!("Request/{}", message.command()),
        Frame::Ok { .. } => "Ok".into(),
        Frame::Error { .. } => "Error".into(),
        Frame::Notification { .. } => "Notification".into(),
        Frame::Bye { .. } => "Bye".into(),
        Frame::Broker { message, .. } => format!("Broker/{}", broker_variant(message)),
        Frame::Publish { .. } => "Publish".into(),
        Frame::Query { query: Query::Stats, .. } => "Query/Stats".into(),
        Frame::Query { query: Query::Routes { .. }, .. } => "Query/Routes".into(),
        Frame::Query { query: Query::DropLink { .. }, .. } => "Query/DropLink".into(),
        Frame::Report { report: Report::Stats(_), .. } => "Report/Stats".into(),
        Frame::Report { report: Report::Routes(_), .. } => "Report/Routes".into(),
        Frame::Report { report: Report::LinkDropped(_), .. } => "Report/LinkDropped".into(),
        Frame::CompositeNotification { .. } => "CompositeNotification".into(),
        Frame::EndOfHistory { .. } => "EndOfHistory".into(),
        Frame::Resume { .. } => "Resume".into(),
        Frame::Ack { .. } => "Ack".into(),
    }
}

fn samples() -> Vec<Frame> {
    let error_codes = [
        ErrorCode::BadRequest,
        ErrorCode::NotAdvertised,
        ErrorCode::UnknownId,
        ErrorCode::LimitExceeded,
        ErrorCode::Forbidden,
        ErrorCode::VersionMismatch,
        ErrorCode::Internal,
    ];
    let mut frames = vec![
        Frame::Hello {
            version: 3,
            role: Role::Client,
            name: name("c1"),
            token: Some(Token("s3cret".to_owned())),
        },
        Frame::Hello { version: 3, role: Role::Broker, name: name("B2"), token: None },
        Frame::Welcome { version: 3, broker: name("B1") },
        Frame::Request { req: 7, message: message("a [class,eq,'stock'],[price,>,0]") },
        Frame::Request { req: 8, message: message("s [class,eq,'stock'],[sym,str-prefix,'I']") },
        Frame::Request {
            req: 9,
            message: message(
                "cs {[class,eq,'a'],[x,eq,$S$v]} & {[class,eq,'b'],[x,eq,$S$v]} within 10s until {[class,eq,'end'],[x,eq,$S$v]}",
            ),
        },
        Frame::Request { req: 10, message: message("p [class,'stock'],[price,-2],[t,2026-11-23T10:00:00Z]") },
        Frame::Request { req: 11, message: message("unsub B1/3") },
        Frame::Request { req: 12, message: message("unadv B1/4") },
        Frame::Ok { req: 7, id: Some(id(1)) },
        Frame::Ok { req: 8, id: None },
        Frame::Notification { subs: vec![id(2), id(3)], publication: publication() },
        Frame::Bye { code: CloseCode::DuplicateLink, reason: "bye".into() },
        Frame::Publish { publication: publication() },
        Frame::Query { req: 1, query: Query::Stats },
        Frame::Query { req: 2, query: Query::Routes { limit: 10, offset: 20, filter: "stock".into() } },
        Frame::Report {
            req: 1,
            report: Report::Stats(Box::new(BrokerStats {
                broker: name("B1"),
                uptime_ms: 1,
                clients: 2,
                connections: 3,
                neighbours: vec![name("B2")],
                advertisements: 4,
                subscriptions: 5,
                client_requests: 6,
                publications_in: 7,
                notifications_out: 8,
                broker_messages_in: 9,
                broker_messages_out: 10,
                slow_clients_dropped: 11,
                links_refused: 12,
                links_cut: 13,
                composites: 14,
                detectors: 15,
                partial_matches: 16,
                partial_match_bytes: 28,
                partial_match_bytes_cap: 29,
                composite_matches: 17,
                partials_evicted: 18,
                partials_expired: 19,
                partials_ended: 20,
                pairs_dropped: 21,
                history_stored: 22,
                history_dropped: 23,
                history_failed: 24,
                history_removed: 25,
                history_queued: 26,
                history_rows: 27,
                link_sessions_resumed: 30,
                link_messages_resent: 31,
                link_duplicates_dropped: 32,
                link_sessions_expired: 33,
                client_sessions_resumed: 34,
                client_frames_resent: 35,
                client_sessions_expired: 36,
                link_traffic: vec![LinkTraffic {
                    peer: name("B2"),
                    class: "job_status".into(),
                    messages: 37,
                    bytes: 38,
                }],
                clients_refused: 39,
                permission_denials: 40,
                neighbour_restarts: 41,
                restart_publications_sent: 42,
                restart_duplicates_dropped: 43,
                settle_timeouts: 44,
            })),
        },
        Frame::Report {
            req: 2,
            report: Report::Routes(RoutesReport {
                broker: name("B1"),
                neighbours: vec![name("B2")],
                srt: vec![RouteEntry { id: id(1), text: "a".into(), from: "client 1".into(), to: vec![] }],
                srt_total: 1,
                prt: vec![RouteEntry {
                    id: id(2),
                    text: "s".into(),
                    from: "broker B2".into(),
                    to: vec![name("B3")],
                }],
                prt_total: 1,
                composites: vec![RouteEntry {
                    id: id(3),
                    text: "{[class,eq,'a']}&{[class,eq,'b']}".into(),
                    from: "client 2".into(),
                    to: vec![name("B4")],
                }],
                composites_total: 1,
                offset: 0,
                filter: "a".into(),
                srt_matched: 1,
                prt_matched: 0,
                composites_matched: 1,
            }),
        },
    ];
    frames.extend(error_codes.map(|code| Frame::Error { req: Some(1), code, message: "why".into() }));
    frames.push(Frame::Error { req: None, code: ErrorCode::BadRequest, message: String::new() });
    let broker = [
        BrokerMessage::Advertise { id: id(1), adv: adv(), hops: 3, epoch: 2 },
        BrokerMessage::Unadvertise { id: id(1), lost: true },
        BrokerMessage::Subscribe { id: id(2), sub: sub() },
        BrokerMessage::Unsubscribe { id: id(2) },
        BrokerMessage::Publish { publication: publication(), stamp: stamp() },
        BrokerMessage::TreeSubscribe { id: id(2), trees: vec![id(1), id(4)], sub: sub() },
        BrokerMessage::TreeUnsubscribe { id: id(2), trees: vec![id(1)] },
        BrokerMessage::TreePublish { tree: id(1), publication: publication(), stamp: stamp() },
        BrokerMessage::Settled { what: Forwarded::Advertisement(id(1)) },
        BrokerMessage::Settled { what: Forwarded::Subscription(id(2)) },
        BrokerMessage::Settled { what: Forwarded::TreeSubscription { id: id(2), tree: id(1) } },
        BrokerMessage::Settled { what: Forwarded::Composite(id(3)) },
        BrokerMessage::Settled { what: Forwarded::Unadvertisement(id(1)) },
        BrokerMessage::CompositeSubscribe {
            id: id(3),
            cs: Arc::new("{[class,eq,'a']};{[class,eq,'b']} within 1m".parse().expect("composite")),
        },
        BrokerMessage::CompositeUnsubscribe { id: id(3) },
        BrokerMessage::CompositeMatch {
            id: id(3),
            pubs: vec![
                (0, Arc::new(Stamped { stamp: stamp(), publication: publication() })),
                (1, Arc::new(Stamped { stamp: stamp(), publication: publication() })),
            ],
        },
        BrokerMessage::HistoryAdvertise { id: id(4), filter: sub() },
        BrokerMessage::HistoryUnadvertise { id: id(4) },
        BrokerMessage::HistoryQuery { query: id(2), sub: sub(), limit: 100, timeout_ms: 3_750 },
        BrokerMessage::HistoryAnswer {
            query: id(2),
            pubs: vec![Arc::new(Stamped { stamp: stamp(), publication: publication() })],
        },
        BrokerMessage::HistoryDone { query: id(2), missing: vec![name("B3")] },
        BrokerMessage::TreeRepair { tree: id(1), epoch: 2 },
        BrokerMessage::TreesSettled { id: id(2), trees: vec![id(1), id(4)] },
    ];
    frames.extend(
        broker.into_iter().enumerate().map(|(n, message)| Frame::Broker { seq: n as u64 + 1, message }),
    );
    frames.push(Frame::CompositeNotification {
        sub: id(3),
        pubs: vec![(0, publication()), (1, publication())],
    });
    frames.push(Frame::EndOfHistory { sub: id(2), count: 5, missing: vec![name("B3")], truncated: false });
    frames.push(Frame::Query { req: 3, query: Query::DropLink { peer: name("B2"), down_ms: 1500 } });
    frames.push(Frame::Report { req: 3, report: Report::LinkDropped(true) });
    frames.push(Frame::Resume { session: 300, received: 7, fresh: false });
    frames.push(Frame::Ack { received: 70_000 });
    frames
}

/// (sample, bytes in hex: 4-byte length prefix, then the body). Regenerate with
/// `PRINT_GOLDEN=1 cargo test -p padres-lang --test wire_golden -- --nocapture` only
/// together with a protocol version change.
const GOLDEN: &[(&str, &str)] = &[
    ("Hello/Client", "0000000e0003000263310106733363726574"),
    ("Hello/Broker", "0000000700030102423200"),
    ("Welcome", "000000050103024231"),
    ("Request/a", "0000001d0207000205636c6173730000020573746f636b0570726963650e000000"),
    ("Request/s", "0000001c0208010205636c6173730000020573746f636b0373796d0600020149"),
    (
        "Request/cs",
        "0000004a02090203000205636c617373000002016101780001000176000205636c6173730000020162017800010001760100000101fb1027010205636c61737300000203656e6401780001000176",
    ),
    ("Request/p", "00000026020a030305636c617373020573746f636b0570726963650003017404fd0042b20f4403000000"),
    ("Request/unsub", "00000007020b0402423103"),
    ("Request/unadv", "00000007020c0502423104"),
    ("Ok", "0000000703070102423101"),
    ("Ok", "00000003030800"),
    (
        "Notification",
        "00000029050202423102024231030305636c617373020573746f636b0570726963650002026f6b0301010200ff",
    ),
    ("Bye", "00000006060103627965"),
    ("Publish", "00000020080305636c617373020573746f636b0570726963650002026f6b0301010200ff"),
    ("Query/Stats", "00000003090100"),
    ("Query/Routes", "0000000b0902010a140573746f636b"),
    (
        "Report/Stats",
        "000000450a0100024231010203010242320405060708090a0b0c0d0e0f101c1d1112131415161718191a1b1e1f2021222324010242320a6a6f625f73746174757325262728292a2b2c",
    ),
    (
        "Report/Routes",
        "0000006d0a0201024231010242320102423101016108636c69656e7420310001010242310201730962726f6b657220423201024233010102423103217b5b636c6173732c65712c2761275d7d267b5b636c6173732c65712c2762275d7d08636c69656e7420320102423401000161010001",
    ),
    ("Error", "000000080401010003776879"),
    ("Error", "000000080401010103776879"),
    ("Error", "000000080401010203776879"),
    ("Error", "000000080401010303776879"),
    ("Error", "000000080401010403776879"),
    ("Error", "000000080401010503776879"),
    ("Error", "000000080401010603776879"),
    ("Error", "0000000404000000"),
    ("Broker/Advertise", "00000023070100024231010205636c6173730000020573746f636b0570726963650e0000000302"),
    ("Broker/Unadvertise", "000000080702010242310101"),
    (
        "Broker/Subscribe",
        "00000028070302024231020205636c6173730000020573746f636b0570726963650d0001000000000000f83f",
    ),
    ("Broker/Unsubscribe", "0000000707040302423102"),
    (
        "Broker/Publish",
        "0000002f0705040305636c617373020573746f636b0570726963650002026f6b0301010200fffd005e56eea10100000242312a",
    ),
    (
        "Broker/TreeSubscribe",
        "00000031070605024231020202423101024231040205636c6173730000020573746f636b0570726963650d0001000000000000f83f",
    ),
    ("Broker/TreeUnsubscribe", "0000000c070706024231020102423101"),
    (
        "Broker/TreePublish",
        "00000033070807024231010305636c617373020573746f636b0570726963650002026f6b0301010200fffd005e56eea10100000242312a",
    ),
    ("Broker/Settled/Advertisement", "000000080709080002423101"),
    ("Broker/Settled/Subscription", "00000008070a080102423102"),
    ("Broker/Settled/TreeSubscription", "0000000c070b08020242310202423101"),
    ("Broker/Settled/Composite", "00000008070c080302423103"),
    ("Broker/Settled/Unadvertisement", "00000008070d080402423101"),
    (
        "Broker/CompositeSubscribe",
        "0000002b070e090242310303000105636c6173730000020161000105636c61737300000201620102000101fb60ea00",
    ),
    ("Broker/CompositeUnsubscribe", "00000007070f0a02423103"),
    (
        "Broker/CompositeMatch",
        "0000006207100b024231030200fd005e56eea10100000242312a0305636c617373020573746f636b0570726963650002026f6b0301010200ff01fd005e56eea10100000242312a0305636c617373020573746f636b0570726963650002026f6b0301010200ff",
    ),
    (
        "Broker/HistoryAdvertise",
        "0000002807110c024231040205636c6173730000020573746f636b0570726963650d0001000000000000f83f",
    ),
    ("Broker/HistoryUnadvertise", "0000000707120d02423104"),
    (
        "Broker/HistoryQuery",
        "0000002c07130e024231020205636c6173730000020573746f636b0570726963650d0001000000000000f83f64fba60e",
    ),
    (
        "Broker/HistoryAnswer",
        "0000003407140f0242310201fd005e56eea10100000242312a0305636c617373020573746f636b0570726963650002026f6b0301010200ff",
    ),
    ("Broker/HistoryDone", "0000000b0715100242310201024233"),
    ("Broker/TreeRepair", "000000080716110242310102"),
    ("Broker/TreesSettled", "0000001007171202423102020242310102423104"),
    (
        "CompositeNotification",
        "000000460b0242310302000305636c617373020573746f636b0570726963650002026f6b0301010200ff010305636c617373020573746f636b0570726963650002026f6b0301010200ff",
    ),
    ("EndOfHistory", "0000000b0c02423102050102423300"),
    ("Query/DropLink", "00000009090302024232fbdc05"),
    ("Report/LinkDropped", "000000040a030201"),
    ("Resume", "000000060dfb2c010700"),
    ("Ack", "000000060efc70110100"),
];

#[test]
fn every_frame_encodes_to_its_golden_bytes() {
    let frames = samples();
    let mut failures = Vec::new();
    for (i, frame) in frames.iter().enumerate() {
        let mut bytes = Vec::new();
        encode(frame, 1 << 20, &mut bytes).expect("encodes");
        let hex = hex::encode(&bytes);
        let label = frame_variant(frame);
        if std::env::var_os("PRINT_GOLDEN").is_some() {
            println!("    (\"{label}\", \"{hex}\"),");
            continue;
        }
        match GOLDEN.get(i) {
            Some((golden_label, golden_hex)) if *golden_label == label && *golden_hex == hex => {}
            other => failures.push(format!("{label}: encodes to {hex}, golden {other:?}")),
        }
        // And the golden bytes decode back to the sample.
        let (back, used) = decode(&bytes, 1 << 20).expect("decodes");
        assert_eq!((&back, used), (frame, bytes.len()), "{label}");
    }
    assert!(failures.is_empty(), "the wire format changed:\n{}", failures.join("\n"));
    assert_eq!(GOLDEN.len(), frames.len(), "one golden line per sample");
}

#[test]
fn the_samples_cover_every_variant() {
    let labels: std::collections::BTreeSet<String> = samples().iter().map(frame_variant).collect();
    // 18 frame shapes (Request counted per message kind: 6) and 23 broker messages
    // (Settled counted per forwarded kind: 5).
    let expected = 2 + 1 + 6 + 1 + 1 + 1 + 1 + 1 + 3 + 3 + 1 + 1 + 1 + 1 + 23;
    assert_eq!(labels.len(), expected, "{labels:#?}");
}
