//! The chart of `demo --scenario dependency`: arrivals per second at the dependency (the count
//! in the trailing second, every 50 ms) against the budget, with the phases marked. SVG, drawn
//! with `plotters` (its SVG backend only: no font or system library; the viewer renders text).

use std::path::Path;

use plotters::prelude::*;

use super::{Phase, DEPENDENCY_CAPACITY, RETRY, TOTAL};
use crate::dependency::Arrival;

const SECOND_NS: u64 = 1_000_000_000;
const STEP_NS: u64 = 50_000_000;

/// One run to draw.
pub struct Series<'a> {
    pub budget_on: bool,
    /// Hosts sharing the budget through the fleet agent (their slack widens the bounds).
    pub hosts: u32,
    pub phases: &'a [Phase],
    pub arrivals: &'a [Arrival],
}

/// (seconds since the run's start, arrivals in the trailing second), every 50 ms.
fn trailing(series: &Series<'_>, pick: impl Fn(&Arrival) -> bool) -> Vec<(f64, f64)> {
    let (Some(first), Some(last)) = (series.phases.first(), series.phases.last()) else {
        return Vec::new();
    };
    let times: Vec<u64> = series
        .arrivals
        .iter()
        .filter(|a| pick(a))
        .map(|a| a.at_ns)
        .collect();
    let mut points = Vec::new();
    let (mut lo, mut hi) = (0, 0);
    let mut t = first.start_ns + STEP_NS;
    while t <= last.end_ns {
        while hi < times.len() && times[hi] <= t {
            hi += 1;
        }
        while lo < hi && times[lo] + SECOND_NS <= t {
            lo += 1;
        }
        points.push(((t - first.start_ns) as f64 / 1e9, (hi - lo) as f64));
        t += STEP_NS;
    }
    points
}

pub fn draw(path: &Path, runs: &[Series<'_>]) -> Result<(), String> {
    let fail = |e: &dyn std::fmt::Display| format!("{}: {e}", path.display());
    let panels = runs.len().max(1) as u32;
    let root = SVGBackend::new(path, (1100, 560 * panels)).into_drawing_area();
    root.fill(&WHITE).map_err(|e| fail(&e))?;
    let x_max = runs
        .iter()
        .filter_map(|r| Some((r.phases.last()?.end_ns - r.phases.first()?.start_ns) as f64 / 1e9))
        .fold(1.0, f64::max);
    for (run, area) in runs.iter().zip(root.split_evenly((runs.len(), 1))) {
        panel(&area, run, x_max).map_err(|e| fail(&e))?;
    }
    root.present().map_err(|e| fail(&e))?;
    Ok(())
}

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type DrawResult = Result<(), DrawingAreaErrorKind<std::io::Error>>;

/// One run's panel: its arrivals and retries per second, the bounds, the phases.
fn panel(area: &Area<'_>, run: &Series<'_>, x_max: f64) -> DrawResult {
    let total = trailing(run, |_| true);
    let retries = trailing(run, |a| a.retry);
    let y_top = total
        .iter()
        .map(|p| p.1)
        .fold(DEPENDENCY_CAPACITY as f64, f64::max);
    // Headroom above the lines for the phase labels and the legend.
    let y_max = (y_top * 1.6 / 50.0).ceil() * 50.0;
    let title = match (run.budget_on, run.hosts) {
        (true, 1) => "Arrivals per second at the dependency, with the budget".to_owned(),
        (true, h) => {
            format!("Arrivals per second at the dependency, with the budget shared by {h} hosts")
        }
        _ => "The same run without a limiter (note the scale)".to_owned(),
    };
    let mut chart = ChartBuilder::on(area)
        .caption(title, ("sans-serif", 22))
        .margin(16)
        .x_label_area_size(44)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds since the start")
        .y_desc("calls arrived in the trailing second")
        .y_label_formatter(&|v| format!("{v:.0}"))
        .x_label_formatter(&|v| format!("{v:.0}"))
        .light_line_style(WHITE.mix(0.0))
        .draw()?;

    // Phase changes: a vertical line and the label at the top.
    if let Some(first) = run.phases.first() {
        for p in run.phases {
            let x = (p.start_ns - first.start_ns) as f64 / 1e9;
            chart.draw_series(std::iter::once(PathElement::new(
                vec![(x, 0.0), (x, y_max)],
                RGBColor(150, 150, 150).stroke_width(1),
            )))?;
            chart.draw_series(std::iter::once(Text::new(
                p.label.to_owned(),
                (x + x_max * 0.004, y_max * 0.985),
                ("sans-serif", 13).into_font().color(&RGBColor(80, 80, 80)),
            )))?;
        }
    }

    let hline = |y: f64| vec![(0.0, y), (x_max, y)];
    let capacity = RGBColor(0, 0, 0);
    let budget = RGBColor(0, 140, 60);
    let retry_color = RGBColor(230, 120, 0);
    let line_color = if run.budget_on {
        RGBColor(30, 90, 200)
    } else {
        RGBColor(210, 40, 40)
    };
    chart
        .draw_series(DashedLineSeries::new(
            hline(DEPENDENCY_CAPACITY as f64),
            8,
            5,
            capacity.stroke_width(2),
        ))?
        .label(format!("the dependency accepts {DEPENDENCY_CAPACITY}/s"))
        .legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 24, y)], capacity.stroke_width(2))
        });
    let slack = if run.hosts > 1 {
        2 * u64::from(run.hosts)
    } else {
        0
    };
    let retry_bound = RETRY.0 + RETRY.1 + slack;
    let budget_label = if slack == 0 {
        format!(
            "budget bound in any 1 s: {} + {}/s x 1 s = {}",
            TOTAL.1,
            TOTAL.0,
            TOTAL.0 + TOTAL.1
        )
    } else {
        format!(
            "budget bound in any 1 s ({} hosts): {} + {slack} + {} = {}",
            run.hosts,
            TOTAL.1,
            TOTAL.0,
            TOTAL.0 + TOTAL.1 + slack
        )
    };
    chart
        .draw_series(DashedLineSeries::new(
            hline((TOTAL.0 + TOTAL.1 + slack) as f64),
            8,
            5,
            budget.stroke_width(2),
        ))?
        .label(budget_label)
        .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 24, y)], budget.stroke_width(2)));
    chart
        .draw_series(DashedLineSeries::new(
            hline(retry_bound as f64),
            8,
            5,
            retry_color.mix(0.6).stroke_width(1),
        ))?
        .label(format!("retry bound in any 1 s: {retry_bound}"))
        .legend(move |(x, y)| {
            PathElement::new(
                vec![(x, y), (x + 24, y)],
                retry_color.mix(0.6).stroke_width(1),
            )
        });
    let which = if run.budget_on {
        "with the budget"
    } else {
        "without a limiter"
    };
    chart
        .draw_series(LineSeries::new(total, line_color.stroke_width(3)))?
        .label(format!("all calls, {which}"))
        .legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 24, y)], line_color.stroke_width(3))
        });
    chart
        .draw_series(LineSeries::new(retries, retry_color.stroke_width(2)))?
        .label(format!("retries, {which}"))
        .legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 24, y)], retry_color.stroke_width(2))
        });
    let plot_width = chart.plotting_area().dim_in_pixel().0 as i32;
    chart
        .configure_series_labels()
        // Below the row of phase labels, in the headroom above the lines.
        .position(SeriesLabelPosition::Coordinate(plot_width - 370, 28))
        .background_style(WHITE.mix(0.9))
        .border_style(RGBColor(180, 180, 180))
        .label_font(("sans-serif", 13))
        .draw()?;
    Ok(())
}
