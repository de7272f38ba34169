//! The example applications of `examples/`, compiled in: `padres demo` runs payroll with
//! its scripts, the benchmarks and tests run both applications.

/// The payroll application of the PADRES paper (Fig. 8), `examples/payroll.xml`.
pub const PAYROLL: &str = include_str!("../../examples/payroll.xml");

/// Payroll's job commands, `examples/payroll/`: (file name, text), to put in an agent's
/// work directory, executable.
pub const PAYROLL_SCRIPTS: [(&str, &str); 4] = [
    ("extract.sh", include_str!("../../examples/payroll/extract.sh")),
    ("calc.sh", include_str!("../../examples/payroll/calc.sh")),
    ("weekly.sh", include_str!("../../examples/payroll/weekly.sh")),
    ("post.sh", include_str!("../../examples/payroll/post.sh")),
];

/// The month-end application, `examples/month-end.xml`.
pub const MONTH_END: &str = include_str!("../../examples/month-end.xml");
