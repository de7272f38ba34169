//! padres-workflow: XML application definitions, their calendars, and their translation into
//! subscriptions and advertisements (DESIGN §8, the PADRES paper §4).
//!
//! - [`parse`]: [`parse_application`] reads and validates a definition, reporting every
//!   problem with its line and column ([`WorkflowErrors`]).
//! - [`model`]: what a definition says: [`Application`], [`Job`], [`Dependency`],
//!   [`Trigger`].
//! - [`calendar`]: [`Calendar`], [`RunTerm`], [`HolidayRule`] and [`Schedule`], evaluated
//!   against a generation's date, never the wall clock.
//! - [`duration`]: ISO-8601 durations (`PT2H`).
//! - [`translate`]: [`translate()`] an application into per-job dependency subscriptions and
//!   advertisements, grouped into `agent_ctl` [`Envelope`]s.
//!
//! - [`control`]: commands to agents (`agent_ctl`) and their replies (`agent_reply`).
//! - [`progress`]: what became of a generation, from its jobs' statuses.
//! - [`examples`]: the example applications of `examples/`, compiled in.
//! - [`place`]: locality advice: at which broker each job's agent would put the least
//!   traffic on the overlay's links (the Bauer–Dadam cost model).
//!
//! The format is documented in `docs/workflow-xml.md`. This crate depends on `padres-lang`
//! only (no I/O): brokers never compile XML or calendars; the CLI and the agents do.

pub mod calendar;
pub mod control;
pub mod duration;
pub mod examples;
pub mod model;
pub mod parse;
pub mod place;
pub mod progress;
pub mod translate;

pub use calendar::{Calendar, HolidayRule, RunTerm, Schedule};
pub use model::{Application, Dependency, Job, Pos, Runner, StatusCondition, Trigger};
pub use parse::{WorkflowError, WorkflowErrors, parse_application};
pub use translate::{
    APPL_END, APPL_START, BodyJob, Deployment, Envelope, EnvelopeBody, JobDeployment, JobInfo, Need,
    TriggerSpec, translate,
};
