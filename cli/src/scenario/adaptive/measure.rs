//! What the adaptive scenario measures from the calls its workers made, per phase and arm, and
//! how it reports them: the table, the targets, `--json` and the chart.

use std::fmt::Write as _;
use std::path::Path;

use super::KNEES;

/// How close to the knee the mean in flight must stay, and the convergence deadline.
const WITHIN: f64 = 0.25;
const CONVERGE_S: f64 = 5.0;
/// Bins of the convergence measure and the chart.
const BIN_NS: u64 = 250_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arm {
    Shared,
    PerProcess,
    Fixed,
}

impl Arm {
    /// The arm's key in `--json` and in file names.
    pub(crate) fn key(self) -> &'static str {
        match self {
            Arm::Shared => "shared",
            Arm::PerProcess => "per_process",
            Arm::Fixed => "fixed",
        }
    }
}

/// One call at the caller: when it was sent, when its answer came, whether it was ok.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub start: u64,
    pub end: u64,
    pub ok: bool,
}

pub(crate) fn read_calls(path: &Path) -> Result<Vec<Call>, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    text.lines()
        .map(|l| {
            let f: Vec<u64> = l
                .split_whitespace()
                .filter_map(|w| w.parse().ok())
                .collect();
            match f.as_slice() {
                &[start, end, ok] if end >= start => Ok(Call {
                    start,
                    end,
                    ok: ok == 1,
                }),
                _ => Err(format!("{}: bad call line {l:?}", path.display())),
            }
        })
        .collect()
}

/// One phase of one arm.
#[derive(Debug, Clone)]
pub(crate) struct PhaseResult {
    pub knee: u32,
    pub in_flight_mean: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    /// p99 of the calls started once the phase converged (the whole phase if it never did).
    pub p99_settled_ms: f64,
    pub goodput_per_s: f64,
    pub converged_after_s: Option<f64>,
    /// Mean in flight per 250 ms bin, for the chart.
    pub bins: Vec<f64>,
}

/// Time-weighted calls in flight over `[lo, hi)`.
fn mean_in_flight(calls: &[Call], lo: u64, hi: u64) -> f64 {
    let busy: u64 = calls
        .iter()
        .map(|c| c.end.min(hi).saturating_sub(c.start.max(lo)))
        .sum();
    busy as f64 / (hi - lo).max(1) as f64
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

/// Per phase: the figures of `calls`. A 250 ms bin that `remeasure(start, end)` says overlaps a
/// re-measure of the RTT (the adaptive limit at its minimum by design, 160 ms in every 20 s)
/// is not judged for convergence; the mean in flight and the latencies count every call.
pub(crate) fn phases(
    spans: &[(u64, u64)],
    calls: &[Call],
    remeasure: &dyn Fn(u64, u64) -> bool,
) -> Vec<PhaseResult> {
    spans
        .iter()
        .zip(KNEES)
        .map(|(&(lo, hi), (_, knee))| {
            let latencies = |from: u64| {
                let mut lat: Vec<f64> = calls
                    .iter()
                    .filter(|c| c.start >= from && c.start < hi)
                    .map(|c| (c.end - c.start) as f64 / 1e6)
                    .collect();
                lat.sort_by(f64::total_cmp);
                lat
            };
            let lat = latencies(lo);
            let ok = calls
                .iter()
                .filter(|c| c.ok && c.end >= lo && c.end < hi)
                .count();
            let bins: Vec<f64> = (lo..hi)
                .step_by(BIN_NS as usize)
                .map(|b| mean_in_flight(calls, b, (b + BIN_NS).min(hi)))
                .collect();
            let k = knee as f64;
            // The first bin from which every bin to the end is within 25% of the knee (or in
            // a re-measure).
            let settled = bins.iter().enumerate().rposition(|(i, &m)| {
                let b = lo + i as u64 * BIN_NS;
                (m - k).abs() > WITHIN * k && !remeasure(b, (b + BIN_NS).min(hi))
            });
            let converged_after_s = match settled {
                None => Some(0.0),
                Some(i) if i + 1 < bins.len() => Some((i + 1) as f64 * BIN_NS as f64 / 1e9),
                Some(_) => None,
            };
            let settled_from = lo + (converged_after_s.unwrap_or(0.0) * 1e9) as u64;
            PhaseResult {
                knee,
                p99_settled_ms: percentile(&latencies(settled_from), 0.99),
                in_flight_mean: mean_in_flight(calls, lo, hi),
                p50_ms: percentile(&lat, 0.50),
                p99_ms: percentile(&lat, 0.99),
                goodput_per_s: ok as f64 / ((hi - lo) as f64 / 1e9),
                converged_after_s,
                bins,
            }
        })
        .collect()
}

/// The table and the shared arm's missed targets.
pub(crate) fn report(
    results: &[(Arm, Vec<PhaseResult>)],
    unloaded_ms: f64,
    phase_seconds: f64,
) -> (String, Vec<String>) {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "adaptive scenario: 8 worker processes x 24 callers; a dependency of 20 ms calls whose \
         knee moves 32 -> 12 -> 48 every {phase_seconds} s; unloaded latency {unloaded_ms:.1} ms"
    );
    let _ = writeln!(
        out,
        "{:<8} {:>4}  {:<11} {:>9} {:>6} {:>7} {:>7} {:>9} {:>9} {:>10}",
        "phase",
        "knee",
        "arm",
        "in flight",
        "x knee",
        "p50 ms",
        "p99 ms",
        "p99 conv.",
        "goodput/s",
        "converged"
    );
    let mut missed = Vec::new();
    for (p, (name, _)) in KNEES.iter().enumerate() {
        for (arm, phases) in results {
            let r = &phases[p];
            let ratio = r.in_flight_mean / r.knee as f64;
            let _ = writeln!(
                out,
                "{:<8} {:>4}  {:<11} {:>9.1} {:>6.2} {:>7.1} {:>7.1} {:>9.1} {:>9.0} {:>10}",
                name,
                r.knee,
                arm.key(),
                r.in_flight_mean,
                ratio,
                r.p50_ms,
                r.p99_ms,
                r.p99_settled_ms,
                r.goodput_per_s,
                r.converged_after_s
                    .map_or("never".to_owned(), |s| format!("{s:.2} s"))
            );
            if *arm == Arm::Shared {
                if (ratio - 1.0).abs() > WITHIN {
                    missed.push(format!(
                        "{name}: mean in flight {:.1} is {ratio:.2} x the knee",
                        r.in_flight_mean
                    ));
                }
                if r.converged_after_s.is_none_or(|s| s > CONVERGE_S) {
                    missed.push(format!("{name}: not converged within {CONVERGE_S} s"));
                }
                if r.p99_settled_ms > 2.0 * unloaded_ms {
                    missed.push(format!(
                        "{name}: p99 once converged {:.1} ms is over 2 x the unloaded {unloaded_ms:.1} ms",
                        r.p99_settled_ms
                    ));
                }
            }
        }
    }
    let worst = |arm: Arm| {
        results
            .iter()
            .filter(|(a, _)| *a == arm)
            .flat_map(|(_, ps)| ps.iter().map(|r| r.in_flight_mean / r.knee as f64))
            .fold(0.0f64, f64::max)
    };
    let _ = writeln!(
        out,
        "highest mean in flight / knee: shared {:.2}, per_process {:.2}, fixed {:.2}",
        worst(Arm::Shared),
        worst(Arm::PerProcess),
        worst(Arm::Fixed)
    );
    let _ = writeln!(
        out,
        "shared arm targets (mean within 25% of the knee, converged within 5 s, p99 once converged <= 2 x unloaded): {}",
        if missed.is_empty() { "met".to_owned() } else { format!("missed: {}", missed.join("; ")) }
    );
    (out, missed)
}

/// `{"phases": [{"name", "knee", "arms": {arm: {...}}}], "unloaded_latency_ms"}`.
pub(crate) fn json(results: &[(Arm, Vec<PhaseResult>)], unloaded_ms: f64) -> String {
    let num = |x: f64| {
        if x.is_finite() {
            format!("{x:.3}")
        } else {
            "null".to_owned()
        }
    };
    let phases: Vec<String> = KNEES
        .iter()
        .enumerate()
        .map(|(p, (name, knee))| {
            let arms: Vec<String> = results
                .iter()
                .map(|(arm, ps)| {
                    let r = &ps[p];
                    format!(
                        "\"{}\": {{\"in_flight_mean\": {}, \"latency_p50_ms\": {}, \"latency_p99_ms\": {}, \"latency_p99_converged_ms\": {}, \"goodput_per_s\": {}, \"converged_after_s\": {}}}",
                        arm.key(),
                        num(r.in_flight_mean),
                        num(r.p50_ms),
                        num(r.p99_ms),
                        num(r.p99_settled_ms),
                        num(r.goodput_per_s),
                        r.converged_after_s.map_or("null".to_owned(), num)
                    )
                })
                .collect();
            format!(
                "{{\"name\": \"{name}\", \"knee\": {knee}, \"arms\": {{{}}}}}",
                arms.join(", ")
            )
        })
        .collect();
    format!(
        "{{\"phases\": [{}], \"unloaded_latency_ms\": {}}}\n",
        phases.join(", "),
        num(unloaded_ms)
    )
}

/// An SVG of the calls in flight per 250 ms bin, one line per arm, and the knee.
pub(crate) fn chart(path: &Path, results: &[(Arm, Vec<PhaseResult>)]) -> std::io::Result<()> {
    let series: Vec<(Arm, Vec<f64>)> = results
        .iter()
        .map(|(arm, ps)| (*arm, ps.iter().flat_map(|r| r.bins.clone()).collect()))
        .collect();
    let knees: Vec<f64> = results
        .first()
        .map(|(_, ps)| {
            ps.iter()
                .flat_map(|r| r.bins.iter().map(|_| r.knee as f64))
                .collect()
        })
        .unwrap_or_default();
    let n = series
        .iter()
        .map(|(_, s)| s.len())
        .max()
        .unwrap_or(1)
        .max(2);
    let top = series
        .iter()
        .flat_map(|(_, s)| s.iter().copied())
        .chain(knees.iter().copied())
        .fold(1.0f64, f64::max)
        * 1.1;
    let (w, h, pad) = (900.0, 360.0, 40.0);
    let x = |i: usize| pad + (w - 2.0 * pad) * i as f64 / (n - 1) as f64;
    let y = |v: f64| h - pad - (h - 2.0 * pad) * v / top;
    let line = |values: &[f64]| -> String {
        values
            .iter()
            .enumerate()
            .map(|(i, &v)| format!("{:.1},{:.1}", x(i), y(v)))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut svg = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{w}\" height=\"{h}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <text x=\"{pad}\" y=\"20\">calls in flight at the dependency per 250 ms (knee dashed; max {top:.0})</text>\n"
    );
    let _ = writeln!(
        svg,
        "<polyline fill=\"none\" stroke=\"#000\" stroke-dasharray=\"4 3\" points=\"{}\"/>",
        line(&knees)
    );
    for ((arm, values), color) in series.iter().zip(["#1f77b4", "#d62728", "#7f7f7f"]) {
        let _ = writeln!(
            svg,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"1.5\" points=\"{}\"/>",
            line(values)
        );
        let idx = series.iter().position(|(a, _)| a == arm).unwrap_or(0);
        let _ = writeln!(
            svg,
            "<text x=\"{}\" y=\"{}\" fill=\"{color}\">{}</text>",
            w - pad - 100.0,
            pad + 15.0 * idx as f64,
            arm.key()
        );
    }
    svg.push_str("</svg>\n");
    std::fs::write(path, svg)
}
