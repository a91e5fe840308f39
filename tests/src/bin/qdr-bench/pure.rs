//! The library calls, in process: defaults + validate and the router configuration
//! rendering of the small and the large Interconnect, time per call.

use crate::fixtures::{large, qdr_controller_render, small};
use crate::measure::per_call;
use crate::table::Row;

/// The library rows: `runs` times each, µs per call.
pub(crate) fn pure_rows(rows: &mut Vec<Row>, runs: usize) {
    for (label, ic) in [("small (3-router example)", small()), ("large (every list near maxItems)", large())]
    {
        let mut dv = Vec::new();
        let mut render = Vec::new();
        let effective = qdr_api::defaults(&ic);
        for _ in 0..runs {
            dv.push(
                per_call(|| {
                    let d = qdr_api::defaults(std::hint::black_box(&ic));
                    std::hint::black_box(qdr_api::validate(&d));
                }) / 1000.0,
            );
            render.push(
                per_call(|| {
                    std::hint::black_box(qdr_controller_render(&effective));
                }) / 1000.0,
            );
        }
        rows.push(Row {
            what: format!("defaults + validate, {label}"),
            runs: dv,
            unit: "µs",
            target: String::new(),
        });
        rows.push(Row {
            what: format!("router config rendering, {label}"),
            runs: render,
            unit: "µs",
            target: String::new(),
        });
    }
}
