//! What a demo run prints: totals over every worker, the bounds each limit guarantees over the
//! measured interval, and whether the file's own counters agree.

use super::*;

/// Totals and bounds over every worker's report.
pub(super) struct Summary {
    pub(super) decisions: u64,
    pub(super) run_ns: u64,
    pub(super) bucket_decisions: u64,
    pub(super) bucket_admitted: u64,
    pub(super) bucket_span_ns: u64,
    pub(super) bucket_bound: u64,
    pub(super) log_decisions: u64,
    pub(super) log_admitted: u64,
    pub(super) log_span_ns: u64,
    pub(super) log_windows: u64,
    pub(super) log_bound: u64,
    pub(super) limits: Limits,
}

/// The span from the earliest first reading to the latest last one, over reports that admitted.
pub(super) fn span(
    reports: &[WorkerReport],
    pick: impl Fn(&WorkerReport) -> Option<(u64, u64)>,
) -> u64 {
    let spans: Vec<(u64, u64)> = reports.iter().filter_map(pick).collect();
    match (
        spans.iter().map(|s| s.0).min(),
        spans.iter().map(|s| s.1).max(),
    ) {
        (Some(first), Some(last)) => last.saturating_sub(first),
        _ => 0,
    }
}

impl Summary {
    pub(super) fn new(reports: &[WorkerReport], limits: Limits) -> Summary {
        let Limits {
            burst,
            emission_ns,
            log_limit,
            window_ns,
        } = limits;
        let sum = |f: fn(&WorkerReport) -> u64| reports.iter().map(f).sum::<u64>();
        let bucket_span_ns = span(reports, |r| {
            (r.bucket_admitted > 0).then_some((r.bucket_first_ns, r.bucket_last_ns))
        });
        let log_span_ns = span(reports, |r| {
            (r.log_admitted > 0).then_some((r.log_first_ns, r.log_last_ns + LOG_TIME_UNIT_NS))
        });
        let log_windows = log_span_ns / window_ns + 1;
        let run_ns = match (
            reports.iter().map(|r| r.start_ns).min(),
            reports.iter().map(|r| r.end_ns).max(),
        ) {
            (Some(a), Some(b)) => b.saturating_sub(a),
            _ => 0,
        };
        Summary {
            decisions: sum(WorkerReport::decisions),
            run_ns,
            bucket_decisions: sum(|r| r.bucket_decisions),
            bucket_admitted: sum(|r| r.bucket_admitted),
            bucket_span_ns,
            bucket_bound: burst + bucket_span_ns / emission_ns,
            log_decisions: sum(|r| r.log_decisions),
            log_admitted: sum(|r| r.log_admitted),
            log_span_ns,
            log_windows,
            log_bound: log_limit.saturating_mul(log_windows),
            limits,
        }
    }

    pub(super) fn bucket_within(&self) -> bool {
        self.bucket_admitted <= self.bucket_bound
    }

    pub(super) fn log_within(&self) -> bool {
        self.log_admitted <= self.log_bound
    }
}

pub(super) fn seconds(ns: u64) -> String {
    format!("{:.6} s", ns as f64 / 1e9)
}

pub(super) fn percent(part: u64, whole: u64) -> String {
    if whole == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", part as f64 * 100.0 / whole as f64)
    }
}

pub(super) fn yes_no(ok: bool) -> String {
    if ok { "yes" } else { "NO" }.to_owned()
}

pub(super) fn report(
    args: &DemoArgs,
    path: &Path,
    temporary: bool,
    reports: &[WorkerReport],
    s: &Summary,
    agree: bool,
) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let Limits {
        burst,
        emission_ns,
        log_limit,
        window_ns,
    } = s.limits;
    let _ = writeln!(
        out,
        "shmlimit demo: {} worker processes share one limiter file for {} s\n",
        args.workers, args.seconds
    );
    let _ = writeln!(
        out,
        "  file    {}{}",
        path.display(),
        if temporary {
            " (temporary, removed at the end)"
        } else {
            " (kept)"
        }
    );
    let _ = writeln!(
        out,
        "  {BUCKET}  token_bucket  {}",
        render::parameters(&s.limits.bucket())
    );
    let _ = writeln!(
        out,
        "  {LOG}     sliding_log   {}",
        render::parameters(&s.limits.log())
    );
    let _ = writeln!(
        out,
        "  Each worker opened the file by path and alternated try_acquire(1) on {BUCKET} and {LOG}\n  as fast as it could, all at once.\n"
    );
    let c_workers = reports.iter().filter(|r| r.c).count();
    if c_workers > 0 {
        let _ = writeln!(
            out,
            "  --mixed: {c_workers} of them are C processes (ffi/examples/worker.c, linked against\n  libshmlimit.so) calling shmlimit_acquire on {BUCKET} only: the same bucket, the same bound.\n"
        );
    }

    let mut table = Table::new(
        &[
            "pid",
            "decisions",
            "bucket admitted",
            "log admitted",
            "decisions/s",
            "worker",
        ],
        0,
    );
    let rate = |decisions: u64, ns: u64| {
        if ns == 0 {
            "-".to_owned()
        } else {
            per_second(decisions as f64 * 1e9 / ns as f64)
        }
    };
    for r in reports {
        table.row(vec![
            r.pid.to_string(),
            thousands(r.decisions()),
            thousands(r.bucket_admitted),
            thousands(r.log_admitted),
            rate(r.decisions(), r.end_ns.saturating_sub(r.start_ns)),
            if r.c { "C" } else { "Rust" }.to_owned(),
        ]);
    }
    table.row(vec![
        "total".to_owned(),
        thousands(s.decisions),
        thousands(s.bucket_admitted),
        thousands(s.log_admitted),
        rate(s.decisions, s.run_ns),
        String::new(),
    ]);
    out.push_str(&table.render());
    out.push('\n');

    let mut bounds = Table::new(
        &["limit", "admitted", "bound", "within bound", "utilisation"],
        1,
    );
    bounds.row(vec![
        BUCKET.to_owned(),
        thousands(s.bucket_admitted),
        thousands(s.bucket_bound),
        yes_no(s.bucket_within()),
        percent(s.bucket_admitted, s.bucket_bound),
    ]);
    bounds.row(vec![
        LOG.to_owned(),
        thousands(s.log_admitted),
        thousands(s.log_bound),
        yes_no(s.log_within()),
        percent(s.log_admitted, s.log_bound),
    ]);
    out.push_str(&bounds.render());
    out.push('\n');

    let _ = writeln!(
        out,
        "  {BUCKET} bound: floor(B + r*T) = floor({} + {} x {}) = {}: a full bucket plus what refills in T",
        burst,
        render::rate(emission_ns),
        seconds(s.bucket_span_ns),
        thousands(s.bucket_bound)
    );
    let _ = writeln!(
        out,
        "  {LOG} bound:    L * ceil(T/W) = {} x {} = {}: at most {} in any {} window, and {} windows cover T = {}",
        log_limit,
        s.log_windows,
        thousands(s.log_bound),
        log_limit,
        render::duration(window_ns),
        s.log_windows,
        seconds(s.log_span_ns)
    );
    let _ = writeln!(
        out,
        "  (T runs from the first to the last admission on that limit, over all workers)"
    );
    let _ = writeln!(
        out,
        "  throughput:  {} decisions in {} = {} across {} processes",
        thousands(s.decisions),
        seconds(s.run_ns),
        rate(s.decisions, s.run_ns),
        reports.len()
    );
    let _ = writeln!(
        out,
        "  the file's own decision counters match the workers' counts: {}",
        yes_no(agree)
    );
    let within = s.bucket_within() && s.log_within();
    let _ = writeln!(
        out,
        "  within bound: {}",
        if within {
            "yes, on both limits"
        } else {
            "NO: a limit admitted more than its bound"
        }
    );
    out
}
