//! `qdr-validate FILE...`: checks Interconnect manifests offline, as the cluster would
//! (CRD schema and CEL rules, then the webhook's defaults, validation and warnings).
//! Prints every problem with its file, document index and field; exits 1 if there is any,
//! 0 otherwise, 2 when a file cannot be read.

use std::path::PathBuf;

use clap::Parser;

/// Check Interconnect manifests offline, as the cluster would: the CRD's schema and CEL
/// rules, then the webhook's defaults, validation and warnings. Documents of other kinds
/// are skipped.
#[derive(Debug, Parser)]
#[command(name = "qdr-validate", version, about)]
struct Args {
    /// YAML files (several documents each allowed); `-` reads standard input.
    #[arg(required = true)]
    files: Vec<PathBuf>,
}

fn main() {
    let args = Args::parse();
    let report = match qdr_webhook::validate_command::check_files(&args.files) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("qdr-validate: {e}");
            std::process::exit(2);
        }
    };
    for w in &report.warnings {
        eprintln!("Warning: {w}");
    }
    for e in &report.errors {
        println!("{e}");
    }
    eprintln!("{} Interconnect(s) checked, {} problem(s)", report.checked, report.errors.len());
    std::process::exit(if report.errors.is_empty() { 0 } else { 1 });
}
