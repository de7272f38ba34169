//! The few fields of an X.509 certificate (RFC 5280) that trust decisions here read: the
//! subject (its common names, and its attributes for issuing under it), the validity
//! period, whether it is a CA (basicConstraints), and the subject alternative names (DNS,
//! IP, URI).
//!
//! A reader of DER over a byte slice: every length is checked against what is left, a
//! malformed certificate gives `None`, and nothing is allocated but the lists of names.
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
        let (tbs, _signature) = expect(certificate, SEQUENCE)?;
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
        fields.expect(SEQUENCE)?; // subject public key info
        let mut certificate = Self {
            issuer_name,
            subject_name,
            subject,
            not_before,
            not_after,
            is_ca: false,
            dns_names: Vec::new(),
            ip_addresses: Vec::new(),
            uris: Vec::new(),
        };
        // Issuer and subject unique ids ([1], [2]) may come before the extensions ([3]).
        while let Some((tag, contents)) = fields.next() {
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
        while !list.0.is_empty() {
            let mut extension = Reader(list.expect(SEQUENCE)?);
            let oid = extension.expect(OID)?;
            if extension.peek() == Some(BOOLEAN) {
                extension.next()?; // critical
            }
            let value = extension.expect(OCTET_STRING)?;
            if oid == BASIC_CONSTRAINTS {
                let (constraints, _) = expect(value, SEQUENCE)?;
                let mut constraints = Reader(constraints);
                if constraints.peek() == Some(BOOLEAN) {
                    self.is_ca = constraints.expect(BOOLEAN)?.first().is_some_and(|b| *b != 0);
                }
            } else if oid == SUBJECT_ALT_NAME {
                let (names, _) = expect(value, SEQUENCE)?;
                let mut names = Reader(names);
                while let Some((tag, name)) = names.next() {
                    match tag {
                        DNS_NAME => self.dns_names.push(std::str::from_utf8(name).ok()?),
                        URI => self.uris.push(std::str::from_utf8(name).ok()?),
                        IP_ADDRESS => self.ip_addresses.push(name),
                        _ => {}
                    }
                }
                if !names.0.is_empty() {
                    return None;
                }
            }
        }
        Some(())
    }
}

impl<'a> Attribute<'a> {
    /// The value as text, if its type is one of the text ones (UTF8String,
    /// PrintableString, IA5String) and it is valid UTF-8.
    pub fn text(&self) -> Option<&'a str> {
        matches!(self.tag, 0x0c | 0x13 | 0x16).then(|| std::str::from_utf8(self.value).ok()).flatten()
    }

    /// The OID's arcs, e.g. `[2, 5, 4, 3]`; `None` if the encoding is bad.
    pub fn oid_arcs(&self) -> Option<Vec<u64>> {
        let mut arcs = Vec::new();
        let mut arc: u64 = 0;
        for (i, byte) in self.oid.iter().enumerate() {
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
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || minute > 59 || second > 60 {
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
    fn times_of_both_forms() {
        assert_eq!(time((UTC_TIME, b"700101000000Z")), Some(0));
        assert_eq!(time((UTC_TIME, b"491231235959Z")), Some(2_524_607_999));
        assert_eq!(time((GENERALIZED_TIME, b"20260301120000Z")), Some(1_772_366_400));
        assert_eq!(time((GENERALIZED_TIME, b"19691231235959Z")), Some(-1));
        for bad in [&b"700101000000"[..], b"701301000000Z", b"70010100000aZ", b"7001010000Z"] {
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
    }
}
