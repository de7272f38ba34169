//! Seeded, deterministic workloads for the matching engine.
//!
//! | name | subscriptions | shape |
//! |---|---|---|
//! | W1 dense | 1,000,000 | 20 numeric attributes uniform in [0, 10^6); 10 distinct attributes per subscription, each `[a,>=,lo],[a,<=,lo+w]`, w = 0.5·10^6, lo uniform in [0, 10^6 − w); publications carry all 20 |
//! | W2 | 1,000,000 | as W1 with 50 attributes, 5 intervals, w = 0.3·10^6 |
//! | W3 sparse | 1,000,000 | 400 attributes drawn Zipf(α = 1); 5 distinct attributes per subscription, intervals as W1; publications carry 20 attributes drawn the same way |
//! | W4 PADRES-like | 200,000 | 50 classes drawn Zipf(α = 1); 1–4 predicates mixing string `eq` / `str-prefix` on 5 symbol attributes (100 symbols) and numeric ranges on 10 attributes in [0, 1000); publications with 6–10 attributes |

use std::sync::Arc;

use padres_lang::{Name, Op, Predicate, Publication, Subscription, Value};

/// xorshift64*: small, fast and the same everywhere.
#[derive(Debug, Clone)]
pub(crate) struct Rng(u64);

impl Rng {
    /// A generator for `seed`.
    pub(crate) fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    /// The next 64 random bits.
    pub(crate) fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in `0..n`.
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

/// Zipf(α = 1) over `0..n`, by inverting the cumulative distribution.
#[derive(Debug)]
pub(crate) struct Zipf {
    cumulative: Vec<f64>,
}

impl Zipf {
    /// The distribution over `n` ranks.
    pub(crate) fn new(n: usize) -> Self {
        let mut total = 0.0;
        let mut cumulative = Vec::with_capacity(n);
        for k in 1..=n {
            total += 1.0 / k as f64;
            cumulative.push(total);
        }
        for c in &mut cumulative {
            *c /= total;
        }
        Self { cumulative }
    }

    /// One draw.
    pub(crate) fn sample(&self, rng: &mut Rng) -> usize {
        let u = (rng.next_u64() >> 11) as f64 / (1_u64 << 53) as f64;
        self.cumulative.partition_point(|&c| c < u).min(self.cumulative.len() - 1)
    }

    /// `k` distinct draws.
    pub(crate) fn distinct(&self, rng: &mut Rng, k: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(k);
        while out.len() < k {
            let x = self.sample(rng);
            if !out.contains(&x) {
                out.push(x);
            }
        }
        out
    }
}

/// One workload: how to make its subscriptions and publications.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Workload {
    /// Dense: 20 attributes, 10 intervals per subscription.
    W1,
    /// Dense: 50 attributes, 5 narrower intervals.
    W2,
    /// Sparse: 400 Zipf attributes, 5 per subscription, 20 per publication.
    W3,
    /// PADRES-like: 50 classes, strings and ranges.
    W4,
}

const DOMAIN: u64 = 1_000_000;

fn name(text: &str) -> Name {
    Name::new(text).expect("generated names are identifiers")
}

fn pred(attr: &Name, op: Op, value: Value) -> Predicate {
    Predicate::new(attr.clone(), op, padres_lang::Operand::Value(value)).expect("type-correct")
}

fn class_pred(class: &str) -> Predicate {
    pred(&name("class"), Op::Eq, Value::str(class))
}

/// Generates the subscriptions and publications of a workload.
#[derive(Debug)]
pub(crate) struct Generator {
    workload: Workload,
    rng: Rng,
    attrs: Vec<Name>,
    zipf: Option<Zipf>,
    classes: Vec<String>,
}

impl Generator {
    /// A generator for `workload` seeded with `seed`.
    pub(crate) fn new(workload: Workload, seed: u64) -> Self {
        let (attrs, zipf, classes) = match workload {
            Workload::W1 => {
                ((0..20).map(|i| format!("a{i}")).collect::<Vec<_>>(), None, vec!["w".to_owned()])
            }
            Workload::W2 => ((0..50).map(|i| format!("a{i}")).collect(), None, vec!["w".to_owned()]),
            Workload::W3 => {
                ((0..400).map(|i| format!("a{i}")).collect(), Some(Zipf::new(400)), vec!["w".to_owned()])
            }
            Workload::W4 => {
                let attrs = (0..5).map(|i| format!("s{i}")).chain((0..10).map(|i| format!("n{i}"))).collect();
                (attrs, Some(Zipf::new(50)), (0..50).map(|i| format!("c{i}")).collect())
            }
        };
        Self { workload, rng: Rng::new(seed), attrs: attrs.iter().map(|a| name(a)).collect(), zipf, classes }
    }

    /// The default number of subscriptions.
    pub(crate) fn full_size(workload: Workload) -> usize {
        match workload {
            Workload::W4 => 200_000,
            _ => 1_000_000,
        }
    }

    fn interval(&mut self, attr: usize, width: u64, out: &mut Vec<Predicate>) {
        let lo = self.rng.below(DOMAIN - width);
        let a = &self.attrs[attr];
        out.push(pred(a, Op::Ge, Value::Int(lo as i64)));
        out.push(pred(a, Op::Le, Value::Int((lo + width) as i64)));
    }

    fn distinct_uniform(&mut self, n: usize, k: usize) -> Vec<usize> {
        let mut out = Vec::with_capacity(k);
        while out.len() < k {
            let x = self.rng.below(n as u64) as usize;
            if !out.contains(&x) {
                out.push(x);
            }
        }
        out
    }

    fn symbol(&mut self) -> String {
        format!("sym{}", self.rng.below(100))
    }

    /// The next subscription.
    pub(crate) fn subscription(&mut self) -> Arc<Subscription> {
        let mut preds = vec![class_pred(&self.classes[0])];
        match self.workload {
            Workload::W1 => {
                for a in self.distinct_uniform(20, 10) {
                    self.interval(a, DOMAIN / 2, &mut preds);
                }
            }
            Workload::W2 => {
                for a in self.distinct_uniform(50, 5) {
                    self.interval(a, DOMAIN * 3 / 10, &mut preds);
                }
            }
            Workload::W3 => {
                let zipf = self.zipf.take().expect("W3 has a Zipf");
                for a in zipf.distinct(&mut self.rng, 5) {
                    self.interval(a, DOMAIN / 2, &mut preds);
                }
                self.zipf = Some(zipf);
            }
            Workload::W4 => {
                let zipf = self.zipf.take().expect("W4 has a Zipf");
                preds[0] = class_pred(&self.classes[zipf.sample(&mut self.rng)]);
                self.zipf = Some(zipf);
                let n = 1 + self.rng.below(4) as usize;
                for a in self.distinct_uniform(15, n) {
                    let attr = self.attrs[a].clone();
                    if a < 5 {
                        let symbol = self.symbol();
                        if self.rng.below(2) == 0 {
                            preds.push(pred(&attr, Op::Eq, Value::str(&symbol)));
                        } else {
                            // sym1 selects sym1 and sym10..sym19.
                            preds.push(pred(&attr, Op::StrPrefix, Value::str(&symbol[..4])));
                        }
                    } else {
                        let lo = self.rng.below(900) as i64;
                        match self.rng.below(3) {
                            0 => preds.push(pred(&attr, Op::Gt, Value::Int(lo))),
                            1 => preds.push(pred(&attr, Op::Lt, Value::Int(lo + 100))),
                            _ => {
                                preds.push(pred(&attr, Op::Ge, Value::Int(lo)));
                                preds.push(pred(&attr, Op::Le, Value::Int(lo + 100)));
                            }
                        }
                    }
                }
            }
        }
        Arc::new(Subscription::new(preds).expect("valid subscription"))
    }

    /// The next publication.
    pub(crate) fn publication(&mut self) -> Publication {
        let mut attrs = vec![(name("class"), Value::str(&self.classes[0]))];
        match self.workload {
            Workload::W1 | Workload::W2 => {
                for a in 0..self.attrs.len() {
                    attrs.push((self.attrs[a].clone(), Value::Int(self.rng.below(DOMAIN) as i64)));
                }
            }
            Workload::W3 => {
                let zipf = self.zipf.take().expect("W3 has a Zipf");
                for a in zipf.distinct(&mut self.rng, 20) {
                    attrs.push((self.attrs[a].clone(), Value::Int(self.rng.below(DOMAIN) as i64)));
                }
                self.zipf = Some(zipf);
            }
            Workload::W4 => {
                let zipf = self.zipf.take().expect("W4 has a Zipf");
                attrs[0].1 = Value::str(&self.classes[zipf.sample(&mut self.rng)]);
                self.zipf = Some(zipf);
                let n = 6 + self.rng.below(5) as usize;
                for a in self.distinct_uniform(15, n) {
                    let value = if a < 5 {
                        Value::str(&self.symbol())
                    } else {
                        Value::Int(self.rng.below(1000) as i64)
                    };
                    attrs.push((self.attrs[a].clone(), value));
                }
            }
        }
        Publication::new(attrs).expect("valid publication")
    }

    /// An advertisement for W4-like content: a class and 2–6 of its attributes, each
    /// either any value or a range.
    pub(crate) fn advertisement(&mut self) -> Arc<padres_lang::Advertisement> {
        let zipf = Zipf::new(50);
        let class = &self.classes.get(zipf.sample(&mut self.rng)).cloned().unwrap_or_else(|| "w".into());
        let mut preds = vec![class_pred(class)];
        let n = 2 + self.rng.below(5) as usize;
        for a in self.distinct_uniform(self.attrs.len().min(15), n) {
            let attr = self.attrs[a].clone();
            if a >= 5 && self.rng.below(2) == 0 {
                let lo = self.rng.below(800) as i64;
                preds.push(pred(&attr, Op::Ge, Value::Int(lo)));
                preds.push(pred(&attr, Op::Le, Value::Int(lo + 200)));
            } else {
                preds.push(pred(&attr, Op::IsPresent, Value::str("")));
            }
        }
        Arc::new(padres_lang::Advertisement::new(preds).expect("valid advertisement"))
    }
}
