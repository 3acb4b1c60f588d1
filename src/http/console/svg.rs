//! The usage chart of a tool: calls and fuel per day as two small bar charts, drawn on
//! the server as inline SVG (no script, no image request), coloured by the stylesheet,
//! with the same numbers in a table for screen readers and text browsers.

use maud::{Markup, html};

use super::fmt::{month_day, si};
use crate::registry::DayUsage;

/// The chart's drawing box, in SVG user units.
const WIDTH: u64 = 420;
const HEIGHT: u64 = 120;
/// Room under the bars for the day labels, and above them for the maximum.
const AXIS: u64 = 18;
const TOP: u64 = 14;

/// One value per day from `from_day` for `days` days (0 for days without calls).
fn series(usage: &[DayUsage], from_day: i64, days: i64, value: fn(&DayUsage) -> u64) -> Vec<u64> {
    (0..days)
        .map(|i| {
            usage
                .iter()
                .find(|u| u.day == from_day + i)
                .map_or(0, value)
        })
        .collect()
}

fn bars(id: &str, title: &str, unit: &str, values: &[u64], from_day: i64) -> Markup {
    let max = values.iter().copied().max().unwrap_or(0);
    let n = u64::try_from(values.len()).unwrap_or(1).max(1);
    let slot = WIDTH / n;
    let plot = HEIGHT - AXIS - TOP;
    let total: u64 = values.iter().sum();
    let last = from_day + i64::try_from(values.len()).unwrap_or(1) - 1;
    let title_id = format!("{id}-title");
    let desc_id = format!("{id}-desc");
    html! {
        figure.chart {
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img"
                aria-labelledby={ (title_id) " " (desc_id) } {
                title id=(title_id) { (title) }
                desc id=(desc_id) {
                    (si(total)) " " (unit) " from " (month_day(from_day)) " to " (month_day(last))
                    ", at most " (si(max)) " a day."
                }
                line.axis x1="0" y1=(HEIGHT - AXIS) x2=(WIDTH) y2=(HEIGHT - AXIS) {}
                @for (i, v) in values.iter().enumerate() {
                    @let i = u64::try_from(i).unwrap_or(0);
                    @let h = if max == 0 { 0 } else { (v * plot).div_ceil(max) };
                    rect.bar x=(i * slot + 2) y=(HEIGHT - AXIS - h) width=(slot.saturating_sub(4))
                        height=(h) {
                        title { (month_day(from_day + i64::try_from(i).unwrap_or(0))) ": " (si(*v)) " " (unit) }
                    }
                }
                text.label x="0" y="10" { "max " (si(max)) }
                text.label x="0" y=(HEIGHT - 4) { (month_day(from_day)) }
                text.label.end x=(WIDTH) y=(HEIGHT - 4) { (month_day(last)) }
            }
            figcaption { (title) ": " (si(total)) " " (unit) " in " (values.len()) " days" }
        }
    }
}

/// The two charts and their table, for `days` days from `from_day`.
pub(super) fn usage(usage: &[DayUsage], from_day: i64, days: i64) -> Markup {
    let calls = series(usage, from_day, days, |u| u.calls);
    let fuel = series(usage, from_day, days, |u| u.fuel);
    html! {
        div.charts {
            (bars("calls", "Calls per day", "calls", &calls, from_day))
            (bars("fuel", "Fuel per day", "fuel", &fuel, from_day))
        }
        details {
            summary { "Usage as a table" }
            table {
                caption { "Calls and fuel per day (UTC)" }
                thead { tr { th scope="col" { "Day" } th scope="col" { "Calls" } th scope="col" { "Fuel" } } }
                tbody {
                    @for (i, (c, f)) in calls.iter().zip(&fuel).enumerate() {
                        tr {
                            td { (month_day(from_day + i64::try_from(i).unwrap_or(0))) }
                            td.num { (c) }
                            td.num { (f) }
                        }
                    }
                }
            }
        }
    }
}
