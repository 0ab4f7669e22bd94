//! The report of a run: per-phase figures against the bounds, the instances, and on against off.

use super::*;

/// What the table says about one phase.
pub(super) struct PhaseFigures {
    sends: u64,
    first: u64,
    retries: u64,
    busy: u64,
    ok: u64,
    most_1s: u64,
    most_retry_1s: u64,
    in_flight: u32,
    within: bool,
}

pub(super) fn figures(run: &Run, p: &Phase, delay_ns: u64) -> PhaseFigures {
    let inside: Vec<Arrival> = run
        .arrivals
        .iter()
        .filter(|a| a.at_ns >= p.start_ns && a.at_ns < p.end_ns)
        .copied()
        .collect();
    let most_1s = dependency::most_in_window(&inside, SECOND_NS, |_| true);
    let most_retry_1s = dependency::most_in_window(&inside, SECOND_NS, |a| a.retry);
    let in_flight = inside.iter().map(|a| a.in_flight).max().unwrap_or(0);
    let slack = run.slack();
    let within = if run.budget_on {
        let sends = |pick: &dyn Fn(&Arrival) -> bool| -> Vec<(u64, u64)> {
            run.arrivals
                .iter()
                .filter(|a| a.t0_ns >= p.start_ns && a.t0_ns < p.end_ns && pick(a))
                .map(|a| (a.t0_ns, a.t1_ns))
                .collect()
        };
        let at: Vec<(u64, u64)> = inside.iter().map(|a| (a.at_ns, a.at_ns)).collect();
        fullest_window(&mut sends(&|_| true), TOTAL.0, TOTAL.1, 0, slack).2
            && fullest_window(&mut sends(&|a| !a.retry), FIRST.0, FIRST.1, 0, slack).2
            && fullest_window(&mut sends(&|a| a.retry), RETRY.0, RETRY.1, 0, slack).2
            && fullest_window(&mut at.clone(), TOTAL.0, TOTAL.1, delay_ns, slack).2
            && u64::from(in_flight) <= PERMITS
    } else {
        true
    };
    PhaseFigures {
        sends: inside.len() as u64,
        first: inside.iter().filter(|a| !a.retry).count() as u64,
        retries: inside.iter().filter(|a| a.retry).count() as u64,
        busy: inside.iter().filter(|a| a.outcome == Outcome::Busy).count() as u64,
        ok: inside.iter().filter(|a| a.outcome == Outcome::Ok).count() as u64,
        most_1s,
        most_retry_1s,
        in_flight,
        within,
    }
}

pub(super) fn per_s(n: u64, ns: u64) -> String {
    format!("{:.0}", n as f64 * 1e9 / ns.max(1) as f64)
}

pub(super) fn report(run: &Run, phase_seconds: f64) -> (String, bool) {
    let mut out = String::new();
    let on = run.budget_on;
    let slack = run.slack();
    // How a bound is written: "24 + 240/s x T", with the fleet's slack when there is one.
    let formula = |burst: u64, rate: u64, t: &str| {
        if slack == 0 {
            format!("floor({burst} + {rate}/s x {t})")
        } else {
            format!("{burst} + 2 x {} hosts + floor({rate}/s x {t})", run.hosts)
        }
    };
    let _ = writeln!(
        out,
        "shmlimit demo --scenario dependency, budget {}: {} phases of {phase_seconds} s\n",
        if on { "on" } else { "OFF (no limiter)" },
        run.phases.len()
    );
    if on {
        let _ = writeln!(
            out,
            "  dependency  accepts {DEPENDENCY_CAPACITY}/s, {SERVICE_MS} ms per call, fails {FAIL_PERCENT}% (then {STORM_FAIL_PERCENT}%)\n  budget      total {}/s burst {}  =  first attempts {}/s burst {}  +  retries {}/s burst {}\n              checked all or nothing before every attempt; {PERMITS} calls in flight; a request\n              waits at most 1 s for its first attempts (or is rejected at once); {CLIENT_RATE}/s per client\n  instances   each ~{REQUESTS_PER_SECOND} requests/s of 1-13 items (1 in 20 oversized, rejected), retries up to 3\n",
            TOTAL.0, TOTAL.1, FIRST.0, FIRST.1, RETRY.0, RETRY.1
        );
        if let Some(shares) = &run.shares {
            let _ = writeln!(
                out,
                "  fleet       {} hosts, each its own limiter file; total, first and retry are shares kept by
              one fleet agent per host and limit through Redis ({}); {} permits and
              {}/s of intake per host. Every bound gains the fleet's slack of 2 x {} hosts.
    at the start: {shares}
",
                run.hosts,
                run.redis_url.as_deref().unwrap_or("?"),
                PERMITS / u64::from(run.hosts),
                FIRST.0 / u64::from(run.hosts),
                run.hosts,
            );
        }
    } else {
        let _ = writeln!(
            out,
            "  the same instances and requests, with no limiter: every attempt is sent when a sender\n  is free; the dependency answers `busy` past {DEPENDENCY_CAPACITY} calls/s (and those are retried too)\n"
        );
    }
    let delay_ns = run
        .arrivals
        .iter()
        .filter(|a| a.t0_ns > 0)
        .map(|a| a.at_ns.saturating_sub(a.t0_ns))
        .max()
        .unwrap_or(0);
    let mut header = vec![
        "phase",
        "instances",
        "sends/s",
        "first/s",
        "retries/s",
        "ok/s",
        "most in 1 s",
        "retries in 1 s",
        "busy",
        "rejected",
        "client-limited",
        "in flight",
    ];
    if on {
        header.push("within bound");
    }
    let mut table = Table::new(&header, 1);
    let mut within = true;
    for p in &run.phases {
        let f = figures(run, p, delay_ns);
        within &= f.within;
        let ns = p.end_ns - p.start_ns;
        let mut row = vec![
            p.label.to_owned(),
            p.instances.to_string(),
            per_s(f.sends, ns),
            per_s(f.first, ns),
            per_s(f.retries, ns),
            per_s(f.ok, ns),
            if on {
                format!("{} / {}", f.most_1s, TOTAL.1 + TOTAL.0 + slack)
            } else {
                f.most_1s.to_string()
            },
            if on {
                format!("{} / {}", f.most_retry_1s, RETRY.1 + RETRY.0 + slack)
            } else {
                f.most_retry_1s.to_string()
            },
            thousands(f.busy),
            thousands(p.deadline_rejected),
            thousands(p.client_limited),
            if on {
                format!("{} / {PERMITS}", f.in_flight)
            } else {
                f.in_flight.to_string()
            },
        ];
        if on {
            row.push(if f.within { "yes" } else { "NO" }.to_owned());
        }
        table.row(row);
    }
    out.push_str(&table.render());
    out.push('\n');
    let _ = writeln!(
        out,
        concat!(
            "  sends/s, first/s, retries/s: arrivals at the dependency per second of the phase; ok/s: those\n",
            "  it answered ok; most in 1 s: the most arrivals in any sliding second (/ the bound B + r x 1 s);\n",
            "  busy: refused by the dependency past its 300/s; rejected: requests refused at once because\n",
            "  their first attempts could not start within 1 s (the intake reservation); client-limited:\n",
            "  over 10/s for one client; in flight: the most calls the dependency held at once (/ the permits)."
        )
    );
    if on {
        let all = |pick: &dyn Fn(&Arrival) -> bool| -> Vec<(u64, u64)> {
            run.arrivals
                .iter()
                .filter(|a| pick(a))
                .map(|a| (a.t0_ns, a.t1_ns))
                .collect()
        };
        let checks = [
            (
                "total",
                fullest_window(&mut all(&|_| true), TOTAL.0, TOTAL.1, 0, slack),
                TOTAL,
            ),
            (
                "first",
                fullest_window(&mut all(&|a| !a.retry), FIRST.0, FIRST.1, 0, slack),
                FIRST,
            ),
            (
                "retry",
                fullest_window(&mut all(&|a| a.retry), RETRY.0, RETRY.1, 0, slack),
                RETRY,
            ),
        ];
        let _ = writeln!(
            out,
            "\n  every window of the whole run (each pair of sends, dated by the limiter's admission):"
        );
        for (name, (count, bound, ok), (rate, burst)) in checks {
            within &= ok;
            let _ = writeln!(
                out,
                "    {name:<6} tightest window {count} sends against {} = {bound}: {}",
                formula(burst, rate, "T"),
                if ok { "within" } else { "EXCEEDED" }
            );
        }
        let mut at: Vec<(u64, u64)> = run.arrivals.iter().map(|a| (a.at_ns, a.at_ns)).collect();
        let (count, bound, ok) = fullest_window(&mut at, TOTAL.0, TOTAL.1, delay_ns, slack);
        within &= ok;
        let _ = writeln!(
            out,
            "    at the dependency: tightest window {count} arrivals against {} = {bound}, D = {:.2} ms\n      (the longest a send took to arrive): {}",
            formula(TOTAL.1, TOTAL.0, "(T + D)"),
            delay_ns as f64 / 1e6,
            if ok { "within" } else { "EXCEEDED" }
        );
        let in_flight = run.arrivals.iter().map(|a| a.in_flight).max().unwrap_or(0);
        within &= u64::from(in_flight) <= PERMITS;
        let _ = writeln!(
            out,
            "    calls in flight at the dependency: at most {in_flight} against {PERMITS} permits"
        );
        if let Some(storm) = run.phases.last() {
            let f = figures(run, storm, delay_ns);
            let ns = storm.end_ns - storm.start_ns;
            let _ = writeln!(
                out,
                "    retry storm: first attempts kept {}/s of their {}/s while retries were held to {}/s",
                per_s(f.first, ns),
                FIRST.0,
                per_s(f.retries, ns)
            );
        }
        let total_ns = run.phases.last().map(|p| p.end_ns).unwrap_or(0)
            - run.phases.first().map(|p| p.start_ns).unwrap_or(0);
        let _ = writeln!(
            out,
            "    budget utilisation: {} sends in {:.1} s = {}/s, {:.0}% of {}/s",
            thousands(run.arrivals.len() as u64),
            total_ns as f64 / 1e9,
            per_s(run.arrivals.len() as u64, total_ns),
            run.arrivals.len() as f64 * 1e9 / total_ns.max(1) as f64 * 100.0 / TOTAL.0 as f64,
            TOTAL.0
        );
    }
    let _ = writeln!(out, "\n  the dependency's own count:");
    for line in run.dependency_summary.lines().take(2) {
        let _ = writeln!(out, "    {line}");
    }
    out.push('\n');
    out.push_str(&instances_report(run));
    let _ = writeln!(
        out,
        "  within bound: {}\n",
        if !on {
            "(no budget)"
        } else if within {
            "yes, every bound on every window"
        } else {
            "NO"
        }
    );
    (out, within)
}

pub(super) fn instances_report(run: &Run) -> String {
    let mut out = String::new();
    let sum = |name: &str| -> u64 {
        run.instances
            .iter()
            .flat_map(|i| i.counters.iter())
            .filter(|(k, _)| k == name)
            .map(|(_, v)| *v)
            .sum()
    };
    let reported = run
        .instances
        .iter()
        .filter(|i| !i.counters.is_empty())
        .count();
    let _ = writeln!(
        out,
        "  instances' own counts ({reported} that ended normally; SIGKILLed ones report nothing):\n    requests {}, oversized rejected {}, client-limited {}, rejected by deadline {} ({} items),\n    items sent {} first + {} retries, failed {}, busy {}, gave up after retries {}, dropped late {}",
        thousands(sum("requests")),
        thousands(sum("oversized")),
        thousands(sum("client_limited")),
        thousands(sum("deadline_rejected")),
        thousands(sum("deadline_rejected_items")),
        thousands(sum("sent_first")),
        thousands(sum("sent_retry")),
        thousands(sum("failed")),
        thousands(sum("busy")),
        thousands(sum("gave_up")),
        thousands(sum("late")),
    );
    let mut table = Table::new(
        &[
            "processes",
            "count",
            "RSS min",
            "RSS median",
            "RSS max",
            "ended",
        ],
        1,
    );
    for (label, kind) in [
        ("Rust instances", Kind::Rust),
        ("Python instances", Kind::Python),
    ] {
        let mut rss: Vec<u64> = run
            .instances
            .iter()
            .filter(|i| i.kind == kind)
            .map(|i| i.peak_rss_kib)
            .collect();
        if rss.is_empty() {
            continue;
        }
        rss.sort_unstable();
        let mut ended: Vec<String> = Vec::new();
        for why in ["ran to the end", "removed", "SIGKILLed"] {
            let n = run
                .instances
                .iter()
                .filter(|i| i.kind == kind && i.ended == Some(why))
                .count();
            if n > 0 {
                ended.push(format!("{n} {why}"));
            }
        }
        table.row(vec![
            label.to_owned(),
            rss.len().to_string(),
            mib(rss[0]),
            mib(rss[rss.len() / 2]),
            mib(rss[rss.len() - 1]),
            ended.join(", "),
        ]);
    }
    if let Some((agents, redis)) = &run.fleet_rss_kib {
        let mut agents = agents.clone();
        agents.sort_unstable();
        if let (Some(lo), Some(hi)) = (agents.first(), agents.last()) {
            table.row(vec![
                "fleet agents".to_owned(),
                agents.len().to_string(),
                mib(*lo),
                mib(agents[agents.len() / 2]),
                mib(*hi),
                "at the end".to_owned(),
            ]);
        }
        if let Some(r) = redis {
            table.row(vec![
                "redis-server".to_owned(),
                "1".to_owned(),
                mib(*r),
                mib(*r),
                mib(*r),
                "at the end".to_owned(),
            ]);
        }
    }
    table.row(vec![
        "dependency".to_owned(),
        "1".to_owned(),
        mib(run.dependency_rss_kib),
        mib(run.dependency_rss_kib),
        mib(run.dependency_rss_kib),
        String::new(),
    ]);
    out.push_str(&table.render());
    let _ = writeln!(
        out,
        "  RSS: the most resident memory seen for each process (sampled every 200 ms and at its end)"
    );
    out
}

pub(super) fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

pub(super) fn comparison(on: &Run, off: &Run) -> String {
    let mut out = String::new();
    let mut table = Table::new(
        &[
            "phase",
            "sends/s with budget",
            "sends/s without",
            "busiest 1 s with",
            "busiest 1 s without",
        ],
        1,
    );
    for (a, b) in on.phases.iter().zip(&off.phases) {
        let fa = figures(on, a, 0);
        let fb = figures(off, b, 0);
        table.row(vec![
            a.label.to_owned(),
            per_s(fa.sends, a.end_ns - a.start_ns),
            per_s(fb.sends, b.end_ns - b.start_ns),
            fa.most_1s.to_string(),
            fb.most_1s.to_string(),
        ]);
    }
    let _ = writeln!(
        out,
        "what the limiter prevents (the same schedule, with and without it):"
    );
    out.push_str(&table.render());
    out.push('\n');
    out
}
