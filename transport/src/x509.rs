//! The few fields of an X.509 certificate (RFC 5280) that trust decisions here read: the
//! subject (its common names, and its attributes for issuing under it), the validity
//! period, whether it is a CA (basicConstraints), and the subject alternative names (DNS,
//! IP, URI).
//!
//! A reader of DER over a byte slice: every length is checked against what is left, every
//! part read must end where its length says, an extension may appear once, booleans are
//! DER's (`00` or `FF`), and a malformed certificate gives `None`. Nothing is allocated but
//! the lists of names.
//! Signatures are not its business: rustls and webpki verify them; this reads
//! certificates that were verified, pinned byte for byte, or named by the operator.

/// The parts of a certificate read here; the strings borrow from its DER.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Certificate<'a> {
    /// The issuer's distinguished name as written (the contents of its SEQUENCE).
    pub issuer_name: &'a [u8],
    /// The subject's distinguished name as written: a certificate it issues carries these
    /// bytes as its issuer.
    pub subject_name: &'a [u8],
    /// The subject public key info, the whole DER element.
    pub public_key_info: &'a [u8],
    /// The subject's attributes in order: each one's OID (its DER contents), the tag of
    /// its value's string type, and the value's bytes.
    pub subject: Vec<Attribute<'a>>,
    /// The start of the validity period, in seconds since the Unix epoch.
    pub not_before: i64,
    /// The end of the validity period, in seconds since the Unix epoch.
    pub not_after: i64,
    /// basicConstraints says CA:TRUE.
    pub is_ca: bool,
    /// DNS names among the subject alternative names.
    pub dns_names: Vec<&'a str>,
    /// IP addresses among them (4 or 16 bytes each).
    pub ip_addresses: Vec<&'a [u8]>,
    /// URIs among them.
    pub uris: Vec<&'a str>,
}

/// One attribute of a distinguished name, e.g. the common name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Attribute<'a> {
    /// The attribute type's OID, as DER contents (`55 04 03` for the common name).
    pub oid: &'a [u8],
    /// The universal tag of the value's string type (12 UTF8String, 19 PrintableString, …).
    pub tag: u8,
    /// The value's bytes.
    pub value: &'a [u8],
}

/// The common name's OID, 2.5.4.3.
pub const COMMON_NAME: &[u8] = &[0x55, 0x04, 0x03];
const BASIC_CONSTRAINTS: &[u8] = &[0x55, 0x1d, 0x13];
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1d, 0x11];

const BOOLEAN: u8 = 0x01;
const INTEGER: u8 = 0x02;
const BIT_STRING: u8 = 0x03;
const OCTET_STRING: u8 = 0x04;
const OID: u8 = 0x06;
const UTC_TIME: u8 = 0x17;
const GENERALIZED_TIME: u8 = 0x18;
const SEQUENCE: u8 = 0x30;
const SET: u8 = 0x31;
const VERSION: u8 = 0xa0;
const EXTENSIONS: u8 = 0xa3;
const DNS_NAME: u8 = 0x82;
const URI: u8 = 0x86;
const IP_ADDRESS: u8 = 0x87;

impl<'a> Certificate<'a> {
    /// Reads a certificate from its DER; `None` if it is not one.
    pub fn parse(der: &'a [u8]) -> Option<Self> {
        let (certificate, rest) = expect(der, SEQUENCE)?;
        if !rest.is_empty() {
            return None;
        }
        let mut outer = Reader(certificate);
        let tbs = outer.expect(SEQUENCE)?;
        outer.expect(SEQUENCE)?; // signature algorithm
        outer.expect(BIT_STRING)?; // signature
        if !outer.0.is_empty() {
            return None;
        }
        let mut fields = Reader(tbs);
        if fields.peek() == Some(VERSION) {
            fields.next()?;
        }
        fields.expect(INTEGER)?; // serial number
        fields.expect(SEQUENCE)?; // signature algorithm
        let issuer_name = fields.expect(SEQUENCE)?;
        let mut validity = Reader(fields.expect(SEQUENCE)?);
        let not_before = time(validity.next()?)?;
        let not_after = time(validity.next()?)?;
        let subject_name = fields.expect(SEQUENCE)?;
        let subject = attributes(subject_name)?;
        let public_key_info = fields.element(SEQUENCE)?;
        let mut certificate = Self {
            issuer_name,
            subject_name,
            public_key_info,
            subject,
            not_before,
            not_after,
            is_ca: false,
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            uris: Vec::new(),
        };
        // Then the issuer's and subject's unique ids ([1], [2]) and the extensions ([3]),
        // each at most once, in that order, and nothing else.
        let mut last = 0;
        while !fields.0.is_empty() {
            let (tag, contents) = fields.next()?;
            let rank = match tag {
                0x81 | 0xa1 => 1,
                0x82 | 0xa2 => 2,
                EXTENSIONS => 3,
                _ => return None,
            };
            if rank <= last {
                return None;
            }
            last = rank;
            if tag == EXTENSIONS {
                certificate.extensions(contents)?;
            }
        }
        Some(certificate)
    }

    /// The subject's common names that are text.
    pub fn common_names(&self) -> impl Iterator<Item = &'a str> + '_ {
        self.subject.iter().filter(|a| a.oid == COMMON_NAME).filter_map(Attribute::text)
    }

    /// Whether `unix_seconds` falls within the validity period.
    pub fn valid_at(&self, unix_seconds: i64) -> bool {
        (self.not_before..=self.not_after).contains(&unix_seconds)
    }

    /// Reads the extensions (`[3] EXPLICIT SEQUENCE OF Extension`) this module knows.
    fn extensions(&mut self, explicit: &'a [u8]) -> Option<()> {
        let (list, rest) = expect(explicit, SEQUENCE)?;
        if !rest.is_empty() {
            return None;
        }
        let mut list = Reader(list);
        // RFC 5280 4.2: no extension twice (a second basicConstraints or subjectAltName
        // could say otherwise than the first).
        let mut seen: Vec<&[u8]> = Vec::new();
        while !list.0.is_empty() {
            let mut extension = Reader(list.expect(SEQUENCE)?);
            let oid = extension.expect(OID)?;
            if seen.contains(&oid) {
                return None;
            }
            seen.push(oid);
            if extension.peek() == Some(BOOLEAN) {
                boolean(extension.expect(BOOLEAN)?)?; // critical
            }
            let value = extension.expect(OCTET_STRING)?;
            if !extension.0.is_empty() {
                return None;
            }
            if oid == BASIC_CONSTRAINTS {
                let mut constraints = Reader(whole(value, SEQUENCE)?);
                if constraints.peek() == Some(BOOLEAN) {
                    self.is_ca = boolean(constraints.expect(BOOLEAN)?)?;
                }
                if constraints.peek() == Some(INTEGER) {
                    constraints.expect(INTEGER)?; // pathLenConstraint
                }
                if !constraints.0.is_empty() {
                    return None;
                }
            } else if oid == SUBJECT_ALT_NAME {
                let mut names = Reader(whole(value, SEQUENCE)?);
                while !names.0.is_empty() {
                    let (tag, name) = names.next()?;
                    match tag {
                        DNS_NAME => self.dns_names.push(std::str::from_utf8(name).ok()?),
                        URI => self.uris.push(std::str::from_utf8(name).ok()?),
                        IP_ADDRESS => self.ip_addresses.push(name),
                        _ => {} // otherName, rfc822Name, directoryName, …: not read here
                    }
                }
            }
        }
        Some(())
    }
}

impl<'a> Attribute<'a> {
    /// The value as text, if its type is one of the text ones (UTF8String,
    /// NumericString, PrintableString, IA5String) and it is valid UTF-8.
    pub fn text(&self) -> Option<&'a str> {
        matches!(self.tag, 0x0c | 0x12 | 0x13 | 0x16).then(|| std::str::from_utf8(self.value).ok()).flatten()
    }

    /// The OID's arcs, e.g. `[2, 5, 4, 3]`; `None` if the encoding is bad.
    pub fn oid_arcs(&self) -> Option<Vec<u64>> {
        let mut arcs = Vec::new();
        let mut arc: u64 = 0;
        for (i, byte) in self.oid.iter().enumerate() {
            if arc == 0 && *byte == 0x80 {
                return None; // a subidentifier in more bytes than it needs
            }
            arc = arc.checked_mul(128)?.checked_add(u64::from(byte & 0x7f))?;
            if byte & 0x80 == 0 {
                arcs.push(arc);
                arc = 0;
            } else if i + 1 == self.oid.len() {
                return None;
            }
        }
        // The first subidentifier holds two arcs: 40 × the first (0, 1 or 2) + the second.
        let first = *arcs.first()?;
        if first == u64::MAX {
            return None; // its second arc, 2**64 - 81, is more than rcgen writes
        }
        let top = (first / 40).min(2);
        arcs[0] = first - 40 * top;
        arcs.insert(0, top);
        Some(arcs)
    }
}

/// A distinguished name's attributes: `SEQUENCE OF SET OF SEQUENCE { OID, value }`.
fn attributes(name: &[u8]) -> Option<Vec<Attribute<'_>>> {
    let mut found = Vec::new();
    let mut rdns = Reader(name);
    while !rdns.0.is_empty() {
        let mut set = Reader(rdns.expect(SET)?);
        while !set.0.is_empty() {
            let mut pair = Reader(set.expect(SEQUENCE)?);
            let oid = pair.expect(OID)?;
            let (tag, value) = pair.next()?;
            found.push(Attribute { oid, tag, value });
        }
    }
    Some(found)
}

/// A UTCTime (`YYMMDDHHMMSSZ`, years 1950-2049) or GeneralizedTime (`YYYYMMDDHHMMSSZ`), as
/// Unix seconds.
fn time((tag, text): (u8, &[u8])) -> Option<i64> {
    let digits = |from: usize, n: usize| -> Option<i64> {
        let part = text.get(from..from + n)?;
        part.iter().try_fold(0i64, |acc, &b| b.is_ascii_digit().then(|| acc * 10 + i64::from(b - b'0')))
    };
    let (year, at) = match (tag, text.len()) {
        (UTC_TIME, 13) => {
            let yy = digits(0, 2)?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, 2)
        }
        (GENERALIZED_TIME, 15) => (digits(0, 4)?, 4),
        _ => return None,
    };
    if text.last() != Some(&b'Z') {
        return None;
    }
    let (month, day) = (digits(at, 2)?, digits(at + 2, 2)?);
    let (hour, minute, second) = (digits(at + 4, 2)?, digits(at + 6, 2)?, digits(at + 8, 2)?);
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    let days_in_month = match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        1..=12 => 31,
        _ => return None,
    };
    if !(1..=days_in_month).contains(&day) || hour > 23 || minute > 59 || second > 59 {
        return None;
    }
    Some(days_from_civil(year, month, day) * 86_400 + hour * 3_600 + minute * 60 + second)
}

/// Days from 1970-01-01 to the given date of the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * ((month + 9) % 12) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// One DER element at the start of `input`: its tag, its contents, and what follows.
/// Only the forms DER allows: a one-byte tag and a definite length in the fewest bytes.
fn element(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1f == 0x1f {
        return None; // a multi-byte tag: none of the fields read here has one
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7f);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let (bytes, rest) = rest.split_at(count);
        let length = bytes.iter().fold(0usize, |acc, &b| (acc << 8) | usize::from(b));
        if length < 0x80 || bytes[0] == 0 {
            return None; // not the shortest form
        }
        (length, rest)
    };
    (rest.len() >= length).then(|| (tag, &rest[..length], &rest[length..]))
}

/// A DER boolean's contents: `FF` true, `00` false, anything else refused.
fn boolean(contents: &[u8]) -> Option<bool> {
    match contents {
        [0xff] => Some(true),
        [0x00] => Some(false),
        _ => None,
    }
}

/// The contents of `input`, which must be one element with `tag` and nothing after it.
fn whole(input: &[u8], tag: u8) -> Option<&[u8]> {
    expect(input, tag).and_then(|(contents, rest)| rest.is_empty().then_some(contents))
}

/// The element at the start of `input`, which must have `tag`: its contents and the rest.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    element(input).and_then(|(found, contents, rest)| (found == tag).then_some((contents, rest)))
}

/// Elements one after another.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn peek(&self) -> Option<u8> {
        self.0.first().copied()
    }

    fn next(&mut self) -> Option<(u8, &'a [u8])> {
        let (tag, contents, rest) = element(self.0)?;
        self.0 = rest;
        Some((tag, contents))
    }

    fn expect(&mut self, tag: u8) -> Option<&'a [u8]> {
        let (contents, rest) = expect(self.0, tag)?;
        self.0 = rest;
        Some(contents)
    }

    /// As [`Reader::expect`], but the whole element: tag, length and contents.
    fn element(&mut self, tag: u8) -> Option<&'a [u8]> {
        let before = self.0;
        self.expect(tag)?;
        Some(&before[..before.len() - self.0.len()])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A self-signed certificate rcgen makes for `params`, as DER.
    fn made(params: &rcgen::CertificateParams) -> Vec<u8> {
        let key = rcgen::KeyPair::generate().expect("a key");
        params.self_signed(&key).expect("signed").der().to_vec()
    }

    #[test]
    fn reads_the_names_validity_and_constraints_rcgen_writes() {
        let mut params = rcgen::CertificateParams::new(vec!["b1.example".to_owned(), "127.0.0.1".to_owned()])
            .expect("params");
        params.distinguished_name.push(rcgen::DnType::CommonName, "B1");
        params.distinguished_name.push(rcgen::DnType::OrganizationName, "padres");
        params.subject_alt_names.push(rcgen::SanType::URI("padres-client:ops".try_into().expect("a URI")));
        params.not_before = rcgen::date_time_ymd(2026, 1, 2);
        // After 2049 the time is written as a GeneralizedTime.
        params.not_after = rcgen::date_time_ymd(2060, 1, 1);
        let der = made(&params);
        let cert = Certificate::parse(&der).expect("parses");
        assert_eq!(cert.common_names().collect::<Vec<_>>(), ["B1"]);
        assert_eq!(cert.subject.len(), 2);
        assert_eq!(cert.subject[1].oid_arcs(), Some(vec![2, 5, 4, 10]));
        assert_eq!(cert.subject[1].text(), Some("padres"));
        assert_eq!(cert.dns_names, ["b1.example"]);
        assert_eq!(cert.ip_addresses, [&[127u8, 0, 0, 1][..]]);
        assert_eq!(cert.uris, ["padres-client:ops"]);
        assert!(!cert.is_ca);
        assert_eq!((cert.not_before, cert.not_after), (1_767_312_000, 2_840_140_800));
        assert!(cert.valid_at(1_767_312_000) && cert.valid_at(2_840_140_800));
        assert!(!cert.valid_at(1_767_311_999) && !cert.valid_at(2_840_140_801));

        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Constrained(1));
        assert!(Certificate::parse(&made(&params)).expect("parses").is_ca);
        params.is_ca = rcgen::IsCa::ExplicitNoCa;
        assert!(!Certificate::parse(&made(&params)).expect("parses").is_ca);
    }

    #[test]
    fn damaged_certificates_are_refused_without_panicking() {
        let params = rcgen::CertificateParams::new(vec!["b1.example".to_owned()]).expect("params");
        let der = made(&params);
        for end in 0..der.len() {
            assert_eq!(Certificate::parse(&der[..end]), None, "cut at {end}");
        }
        let mut longer = der.clone();
        longer.push(0);
        assert_eq!(Certificate::parse(&longer), None, "a byte after it");
        // Every byte changed in turn: read or refused, never a panic.
        for at in 0..der.len() {
            for flip in [0x01, 0x80, 0xff] {
                let mut damaged = der.clone();
                damaged[at] ^= flip;
                let _ = Certificate::parse(&damaged);
            }
        }
    }

    #[test]
    fn a_certificate_names_its_issuer_as_the_issuer_names_itself() {
        use rcgen::PublicKeyData as _;
        let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new()).expect("params");
        ca_params.distinguished_name.push(rcgen::DnType::CommonName, "fed CA");
        ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        let ca_key = rcgen::KeyPair::generate().expect("a key");
        let ca_der = ca_params.self_signed(&ca_key).expect("signed").der().to_vec();
        let issuer = rcgen::Issuer::from_params(&ca_params, &ca_key);
        let leaf_key = rcgen::KeyPair::generate().expect("a key");
        let mut leaf_params = rcgen::CertificateParams::new(vec!["b1.example".to_owned()]).expect("params");
        leaf_params.distinguished_name.push(rcgen::DnType::CommonName, "B1");
        let leaf_der = leaf_params.signed_by(&leaf_key, &issuer).expect("signed").der().to_vec();
        let ca = Certificate::parse(&ca_der).expect("parses");
        let leaf = Certificate::parse(&leaf_der).expect("parses");
        assert_eq!(leaf.issuer_name, ca.subject_name);
        assert_ne!(leaf.subject_name, ca.subject_name);
        assert_eq!(ca.issuer_name, ca.subject_name, "self-signed");
        assert!(ca.is_ca && !leaf.is_ca);
        assert_eq!(leaf.public_key_info, leaf_key.subject_public_key_info());
        assert_eq!(ca.public_key_info, ca_key.subject_public_key_info());
    }

    /// One DER element: `tag`, the length in DER's form, `contents`.
    fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
        let n = contents.len();
        let mut out = vec![tag];
        match u8::try_from(n) {
            Ok(short) if short < 0x80 => out.push(short),
            Ok(one) => out.extend([0x81, one]),
            Err(_) => out.extend([0x82, (n >> 8) as u8, (n & 0xff) as u8]),
        }
        out.extend_from_slice(contents);
        out
    }

    /// A certificate written by hand (its signature is not read here): version 3 or none
    /// (version 1), `after_key` after the public key info, and the signature or not.
    fn written(version: bool, after_key: &[Vec<u8>], signature: bool) -> Vec<u8> {
        let algorithm = tlv(SEQUENCE, &tlv(OID, &[0x2a, 0x86, 0x48, 0xce, 0x3d, 0x04, 0x03, 0x02]));
        let name =
            tlv(SEQUENCE, &tlv(SET, &tlv(SEQUENCE, &[tlv(OID, COMMON_NAME), tlv(0x0c, b"B1")].concat())));
        let validity =
            tlv(SEQUENCE, &[tlv(UTC_TIME, b"260101000000Z"), tlv(UTC_TIME, b"360101000000Z")].concat());
        let key = tlv(SEQUENCE, &[algorithm.clone(), tlv(BIT_STRING, &[0, 4, 1, 2])].concat());
        let mut tbs = Vec::new();
        if version {
            tbs.push(tlv(VERSION, &tlv(INTEGER, &[2])));
        }
        tbs.extend([tlv(INTEGER, &[1]), algorithm.clone(), name.clone(), validity, name, key]);
        tbs.extend_from_slice(after_key);
        let mut outer = vec![tlv(SEQUENCE, &tbs.concat()), algorithm];
        if signature {
            outer.push(tlv(BIT_STRING, &[0, 1]));
        }
        tlv(SEQUENCE, &outer.concat())
    }

    fn read(after_key: &[Vec<u8>]) -> Option<Certificate<'static>> {
        let der: &'static [u8] = Box::leak(written(true, after_key, true).into_boxed_slice());
        Certificate::parse(der)
    }

    fn extensions(list: &[Vec<u8>]) -> Vec<u8> {
        tlv(EXTENSIONS, &tlv(SEQUENCE, &list.concat()))
    }

    fn extension(oid: &[u8], critical: Option<u8>, value: &[u8]) -> Vec<u8> {
        let mut parts = vec![tlv(OID, oid)];
        parts.extend(critical.map(|c| tlv(BOOLEAN, &[c])));
        parts.push(tlv(OCTET_STRING, value));
        tlv(SEQUENCE, &parts.concat())
    }

    fn ca(flag: u8) -> Vec<u8> {
        extension(BASIC_CONSTRAINTS, Some(0xff), &tlv(SEQUENCE, &tlv(BOOLEAN, &[flag])))
    }

    fn san(names: &[Vec<u8>]) -> Vec<u8> {
        extension(SUBJECT_ALT_NAME, None, &tlv(SEQUENCE, &names.concat()))
    }

    #[test]
    fn basic_constraints_are_read_as_der_writes_them_only() {
        let plain = read(&[]).expect("no extensions");
        assert!(!plain.is_ca && plain.dns_names.is_empty());
        assert_eq!(plain.common_names().collect::<Vec<_>>(), ["B1"]);
        assert!(Certificate::parse(&written(false, &[], true)).is_some(), "version 1: no [0]");
        assert_eq!(Certificate::parse(&written(true, &[], false)), None, "no signature");

        assert!(read(&[extensions(&[ca(0xff)])]).expect("a CA").is_ca);
        assert!(!read(&[extensions(&[ca(0x00)])]).expect("CA:FALSE written out").is_ca);
        let empty = extension(BASIC_CONSTRAINTS, None, &tlv(SEQUENCE, &[]));
        assert!(!read(&[extensions(&[empty])]).expect("CA:FALSE by default").is_ca);
        let path = tlv(SEQUENCE, &[tlv(BOOLEAN, &[0xff]), tlv(INTEGER, &[1])].concat());
        assert!(
            read(&[extensions(&[extension(BASIC_CONSTRAINTS, None, &path)])]).expect("a path length").is_ca
        );

        assert_eq!(read(&[extensions(&[ca(0x01)])]), None, "a boolean DER does not allow");
        assert_eq!(read(&[extensions(&[ca(0xff), ca(0xff)])]), None, "basicConstraints twice");
        let more = [tlv(SEQUENCE, &tlv(BOOLEAN, &[0xff])), vec![0]].concat();
        assert_eq!(
            read(&[extensions(&[extension(BASIC_CONSTRAINTS, None, &more)])]),
            None,
            "a byte after it"
        );
        let critical = extension(BASIC_CONSTRAINTS, Some(0x01), &tlv(SEQUENCE, &[]));
        assert_eq!(read(&[extensions(&[critical])]), None, "critical as 01");
    }

    #[test]
    fn alternative_names_of_the_three_kinds_read_here_and_others_skipped() {
        let names = [
            tlv(0xa0, &[tlv(OID, &[0x2b, 0x06]), tlv(0xa0, &tlv(0x0c, b"x"))].concat()), // otherName
            tlv(0x81, b"ops@b1.example"),                                                // rfc822Name
            tlv(0xa4, &tlv(SEQUENCE, &[])),                                              // directoryName
            tlv(DNS_NAME, b"b1.example"),
            tlv(URI, b"padres-client:ops"),
            tlv(IP_ADDRESS, &[10, 0, 0, 1]),
        ];
        let cert = read(&[extensions(&[san(&names)])]).expect("names");
        assert_eq!(cert.dns_names, ["b1.example"]);
        assert_eq!(cert.uris, ["padres-client:ops"]);
        assert_eq!(cert.ip_addresses, [&[10u8, 0, 0, 1][..]]);
        let dns = |name: &[u8]| tlv(DNS_NAME, name);
        assert_eq!(
            read(&[extensions(&[san(&[dns(b"a.example")]), san(&[dns(b"b.example")])])]),
            None,
            "twice"
        );
        assert_eq!(read(&[extensions(&[san(&[dns(&[0xff, 0xfe])])])]), None, "a DNS name that is not UTF-8");
    }

    #[test]
    fn what_follows_the_public_key_is_read_in_order_or_refused() {
        let with_ca = extensions(&[ca(0xff)]);
        assert!(
            read(&[tlv(0x81, &[0]), tlv(0x82, &[0]), with_ca.clone()]).expect("ids, then extensions").is_ca
        );
        assert_eq!(read(&[with_ca.clone(), tlv(0x81, &[0])]), None, "an id after the extensions");
        assert_eq!(read(&[with_ca.clone(), with_ca.clone()]), None, "extensions twice");
        assert_eq!(read(&[with_ca.clone(), tlv(OCTET_STRING, &[0])]), None, "something else");
        assert_eq!(read(&[with_ca, vec![SEQUENCE]]), None, "an element cut short");
    }

    #[test]
    fn times_of_both_forms() {
        assert_eq!(time((UTC_TIME, b"700101000000Z")), Some(0));
        assert_eq!(time((UTC_TIME, b"491231235959Z")), Some(2_524_607_999));
        assert_eq!(time((GENERALIZED_TIME, b"20260301120000Z")), Some(1_772_366_400));
        assert_eq!(time((GENERALIZED_TIME, b"19691231235959Z")), Some(-1));
        assert_eq!(time((GENERALIZED_TIME, b"20240229000000Z")), Some(1_709_164_800), "a leap day");
        for bad in [
            &b"700101000000"[..],
            b"701301000000Z",
            b"70010100000aZ",
            b"7001010000Z",
            b"250229000000Z", // no 29 February in 2025
            b"700431000000Z",
            b"700101000060Z",
        ] {
            assert_eq!(time((UTC_TIME, bad)), None, "{bad:?}");
        }
    }

    #[test]
    fn lengths_in_the_shortest_form_only() {
        assert_eq!(element(&[0x04, 0x02, 1, 2, 9]), Some((0x04, &[1u8, 2][..], &[9u8][..])));
        assert_eq!(element(&[0x04, 0x81, 0x02, 1, 2]), None, "a long form for a short length");
        assert_eq!(element(&[0x04, 0x80]), None, "indefinite length");
        assert_eq!(element(&[0x04, 0x03, 1, 2]), None, "longer than what is left");
        assert_eq!(element(&[0x1f, 0x01, 0x00]), None, "a multi-byte tag");
        assert_eq!(element(&[0x04, 0x82, 0x00, 0x80]), None, "a leading zero in the length");
        assert_eq!(element(&[0x04, 0x85, 1, 0, 0, 0, 0]), None, "five length bytes");
        assert_eq!(element(&[0x04, 0x84, 0x7f, 0xff, 0xff, 0xff, 1]), None, "longer than the input");
    }

    #[test]
    fn oid_arcs() {
        let attribute = |oid| Attribute { oid, tag: 0x0c, value: b"" };
        assert_eq!(attribute(COMMON_NAME).oid_arcs(), Some(vec![2, 5, 4, 3]));
        assert_eq!(
            attribute(&[0x2a, 0x86, 0x48, 0x86, 0xf7, 0x0d]).oid_arcs(),
            Some(vec![1, 2, 840, 113_549])
        );
        assert_eq!(attribute(&[0x2a, 0x86]).oid_arcs(), None, "an arc cut short");
        assert_eq!(attribute(&[0x88, 0x37, 0x01]).oid_arcs(), Some(vec![2, 999, 1]));
        assert_eq!(attribute(&[0x55, 0x80, 0x04]).oid_arcs(), None, "a subidentifier with a leading 0x80");
        let largest = [0x81, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(attribute(&largest).oid_arcs(), None, "2**64 - 1");
        let larger = [0x82, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f];
        assert_eq!(attribute(&larger).oid_arcs(), None, "past 64 bits");
    }
}
