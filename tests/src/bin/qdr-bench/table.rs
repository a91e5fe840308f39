//! The one table `make bench` prints: a [`Row`] per figure (every run kept, shown as the
//! median with min and max), and the printer. It measures nothing.

/// One figure of the table.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    /// What was measured, as the table's first column says it.
    pub(crate) what: String,
    /// One figure per run.
    pub(crate) runs: Vec<f64>,
    /// The unit of every figure (`ms`, `req/s`, `MiB`, ...; empty for a count).
    pub(crate) unit: &'static str,
    /// The target, as text (`≤ 32`); empty when there is none.
    pub(crate) target: String,
}

impl Row {
    /// A one-run row of a mean time in `seconds`, printed in milliseconds, with no target.
    pub(crate) fn mean_ms(what: String, seconds: f64) -> Row {
        Row { what, runs: vec![seconds * 1000.0], unit: "ms", target: String::new() }
    }

    /// A one-run row of `value` in `unit`, with no target.
    pub(crate) fn once(what: impl Into<String>, value: f64, unit: &'static str) -> Row {
        Row { what: what.into(), runs: vec![value], unit, target: String::new() }
    }

    /// Median, min and max of the runs.
    pub(crate) fn stats(&self) -> (f64, f64, f64) {
        stats(&self.runs)
    }
}

/// Median, min and max of `runs` (at least one).
fn stats(runs: &[f64]) -> (f64, f64, f64) {
    let mut v = runs.to_vec();
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

/// The median of `runs` as a row shows it (0 when there are none).
pub(crate) fn median(runs: &[f64]) -> f64 {
    if runs.is_empty() { 0.0 } else { stats(runs).0 }
}

/// What this machine's plain clients achieve, one line each ([`machine`]), printed above
/// the table so that runs on other machines can be compared.
static MACHINE: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());

/// Notes a plain client's throughput on this machine (a line of the table's header).
pub(crate) fn machine(line: String) {
    MACHINE.lock().unwrap_or_else(|e| e.into_inner()).push(line);
}

/// Prints the table of `rows` (`runs` per figure) as Markdown, with the machine's core count,
/// its plain clients' throughput ([`machine`]) and the caveats that go with its figures.
pub(crate) fn print(rows: &[Row], runs: usize) {
    println!(
        "\nqdr-operator benchmarks{}: {} cores, {runs} runs per figure (median [min – max]).",
        if crate::smoke() {
            " (SMOKE MODE: small scales and short windows, figures not comparable with a full run or its targets)"
        } else {
            ""
        },
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0)
    );
    let machine = MACHINE.lock().unwrap_or_else(|e| e.into_inner());
    if machine.is_empty() {
        println!(
            "This machine's plain-client throughput: not measured in this run (the webhook and controller groups measure it)."
        );
    }
    for line in machine.iter() {
        println!("This machine: {line}.");
    }
    println!(
        "Warning: absolute figures on a shared machine are noisy; here the load generator, the webhook, the API server and etcd share the same cores.\n"
    );
    println!("| benchmark | median | min – max | unit | target |\n|---|---:|---:|---|---|");
    for r in rows {
        let (m, lo, hi) = r.stats();
        println!("| {} | {m:.3} | {lo:.3} – {hi:.3} | {} | {} |", r.what, r.unit, r.target);
    }
    println!(
        "\nThe Go operator is not run side by side: the Go module proxy answers 403 for every version of \
         github.com/interconnectedcloud/qdr-operator, so it cannot be built here."
    );
}
