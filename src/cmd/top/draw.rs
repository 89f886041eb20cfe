//! The screen of `outboxctl top`, drawn from a [`View`] and nothing else: no I/O, no clock, no
//! database, so a frame can be drawn into ratatui's `TestBackend` from known data and read back.
//!
//! Every text that comes from the database (types, ids, errors, schema names) passes through
//! [`crate::output::escape_controls`] first: a control character in an error must not move the
//! cursor or retitle the terminal.

use std::time::Duration;

use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Row, Sparkline, Table};
use ratatui::Frame;

use crate::ops::stats::{Figures, BACKLOG_COLUMNS};
use crate::ops::top::Sample;
use crate::output::escape_controls;

/// What one frame shows: the last sample read (if any yet) and, when the last read failed, why.
#[derive(Debug, Clone, Copy)]
pub struct View<'a> {
    pub schema: &'a str,
    pub interval: Duration,
    pub sample: Option<&'a Sample>,
    /// The last read's error, one line; the figures below it are then the last ones read.
    pub error: Option<&'a str>,
}

/// Draws the whole screen.
pub fn draw(frame: &mut Frame<'_>, view: &View<'_>) {
    let area = frame.area();
    let [title, status, backlog, spark, relays, groups, blocked, dead] = Layout::vertical([
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(1),
        Constraint::Length(5),
        Constraint::Length(relays_height(view)),
        Constraint::Fill(1),
        Constraint::Length(blocked_height(view)),
        Constraint::Fill(1),
    ])
    .areas(area);
    frame.render_widget(Paragraph::new(title_line(view)), title);
    frame.render_widget(Paragraph::new(status_line(view)), status);
    let Some(s) = view.sample else {
        return;
    };
    frame.render_widget(Paragraph::new(backlog_line(s)), backlog);
    draw_throughput(frame, spark, s);
    draw_relays(frame, relays, s);
    draw_groups(frame, groups, s);
    if blocked.height > 0 {
        draw_blocked(frame, blocked, s);
    }
    draw_dead(frame, dead, s);
}

fn bold() -> Style {
    Style::default().add_modifier(Modifier::BOLD)
}

fn title_line(view: &View<'_>) -> Line<'static> {
    let when = view
        .sample
        .map(|s| s.now.format("%Y-%m-%d %H:%M:%SZ").to_string())
        .unwrap_or_else(|| "connecting…".into());
    Line::from(vec![
        Span::styled("outboxctl top", bold()),
        Span::raw(format!(
            "  schema {}  every {}  {when}  (q quits)",
            escape_controls(view.schema),
            humantime::format_duration(view.interval)
        )),
    ])
}

fn status_line(view: &View<'_>) -> Line<'static> {
    match view.error {
        Some(e) => Line::from(Span::styled(
            format!(
                "database error, retrying every {}{}: {}",
                humantime::format_duration(view.interval),
                if view.sample.is_some() {
                    " (the figures are the last read)"
                } else {
                    ""
                },
                escape_controls(e)
            ),
            Style::default()
                .fg(Color::White)
                .bg(Color::Red)
                .add_modifier(Modifier::BOLD),
        )),
        None => Line::raw(""),
    }
}

fn backlog_line(s: &Sample) -> Line<'static> {
    let t = &s.total;
    let mut spans = vec![Span::styled("Backlog ", bold())];
    let mut figure = |name: &str, n: i64, alarm: bool| {
        spans.push(Span::raw(format!(" {name} ")));
        let style = if alarm && n > 0 {
            bold().fg(Color::Red)
        } else {
            bold()
        };
        spans.push(Span::styled(n.to_string(), style));
        spans.push(Span::raw(" "));
    };
    figure("ready", t.ready, false);
    figure("scheduled", t.scheduled, false);
    figure("retrying", t.retrying, true);
    figure("in flight", t.in_flight, false);
    figure("dead", t.dead_lettered, true);
    spans.push(Span::raw("  lag "));
    spans.push(Span::styled(short(t.oldest_pending_lag_seconds), bold()));
    if let Some(b) = &s.blocked {
        spans.push(Span::raw("  blocked keys "));
        spans.push(Span::styled(
            format!("{} ({} events)", b.blocked_keys, b.blocked_events),
            if b.blocked_keys > 0 {
                bold().fg(Color::Red)
            } else {
                bold()
            },
        ));
    }
    Line::from(spans)
}

/// Events per second in one interval of `n` events.
fn rate(n: u64, interval: Duration) -> f64 {
    n as f64 / interval.as_secs_f64().max(1e-6)
}

fn draw_throughput(frame: &mut Frame<'_>, area: Rect, s: &Sample) {
    let block = Block::default().borders(Borders::ALL);
    let inner = block.inner(area);
    // The newest bars that fit, newest on the right; the title speaks of those.
    let shown = &s.published[s.published.len().saturating_sub(inner.width as usize)..];
    let last = shown.last().copied().unwrap_or(0);
    let peak = shown.iter().copied().max().unwrap_or(0);
    let title = format!(
        " Throughput: {}/s now, peak {}/s, over {} ",
        per_second(rate(last, s.interval)),
        per_second(rate(peak, s.interval)),
        humantime::format_duration(s.interval * shown.len() as u32)
    );
    frame.render_widget(block.title(title), area);
    frame.render_widget(
        Sparkline::default()
            .data(shown.iter().copied())
            .style(Style::default().fg(Color::Green)),
        inner,
    );
}

fn per_second(r: f64) -> String {
    if r >= 100.0 || r == 0.0 {
        format!("{r:.0}")
    } else {
        format!("{r:.1}")
    }
}

fn draw_relays(frame: &mut Frame<'_>, area: Rect, s: &Sample) {
    let title = format!(" Relays connected ({}) ", s.relays.len());
    let block = Block::default().borders(Borders::ALL).title(title);
    if s.relays.is_empty() {
        let text = "none connected now (a cron relay shows while it runs)";
        frame.render_widget(Paragraph::new(text).block(block), area);
        return;
    }
    let rows = s.relays.iter().map(|r| {
        let style = if r.here {
            Style::default()
        } else {
            Style::default().add_modifier(Modifier::DIM)
        };
        Row::new(vec![
            r.pid.map(|p| p.to_string()).unwrap_or_else(|| "?".into()),
            format!("{} {}", escape_controls(&r.mode), r.kind),
            escape_controls(&r.schema).into_owned(),
            r.client_addr.clone().unwrap_or_else(|| "local".into()),
            format!("{}/{}", r.active, r.connections),
            r.idle_seconds
                .map(|i| format!("{} ago", short(i)))
                .unwrap_or_else(|| "?".into()),
        ])
        .style(style)
    });
    let widget = table(
        rows,
        &[
            ("pid", Constraint::Length(8)),
            ("relay", Constraint::Length(12)),
            ("schema", Constraint::Fill(1)),
            ("client", Constraint::Length(16)),
            ("busy/conns", Constraint::Length(10)),
            ("last active", Constraint::Length(11)),
        ],
        block,
    );
    frame.render_widget(widget, area);
}

/// A table in `block` whose columns are given as (header, width) pairs, the header in bold.
fn table<'a>(
    rows: impl IntoIterator<Item = Row<'a>>,
    columns: &[(&'a str, Constraint)],
    block: Block<'a>,
) -> Table<'a> {
    Table::new(rows, columns.iter().map(|c| c.1))
        .header(Row::new(columns.iter().map(|c| c.0)).style(bold()))
        .block(block)
}

/// The relays' box: as tall as its rows, up to 6, and one line when there is none.
fn relays_height(view: &View<'_>) -> u16 {
    match view.sample {
        Some(s) if !s.relays.is_empty() => 3 + s.relays.len().min(6) as u16,
        _ => 3,
    }
}

fn draw_groups(frame: &mut Frame<'_>, area: Rect, s: &Sample) {
    let title = format!(" Top {}s by backlog ", s.by);
    let block = Block::default().borders(Borders::ALL).title(title);
    if s.groups.is_empty() {
        frame.render_widget(Paragraph::new("nothing pending").block(block), area);
        return;
    }
    let row = |name: &str, f: &Figures| {
        let mut cells = vec![escape_controls(name).into_owned()];
        cells.extend(f.backlog_cells());
        cells.push(short(f.oldest_pending_lag_seconds));
        Row::new(cells)
    };
    let mut columns = vec![(s.by, Constraint::Fill(1))];
    columns.extend(BACKLOG_COLUMNS.map(|c| (c, Constraint::Length(10))));
    columns.push(("lag", Constraint::Length(8)));
    let widget = table(s.groups.iter().map(|(k, f)| row(k, f)), &columns, block);
    frame.render_widget(widget, area);
}

/// The blocked keys' box: absent when no key is blocked, else as tall as its rows (up to 5).
fn blocked_height(view: &View<'_>) -> u16 {
    match view.sample {
        Some(s) if !s.blocked_keys.is_empty() => 3 + s.blocked_keys.len().min(5) as u16,
        _ => 0,
    }
}

fn draw_blocked(frame: &mut Frame<'_>, area: Rect, s: &Sample) {
    let n = s.blocked.as_ref().map(|b| b.blocked_keys).unwrap_or(0);
    let title =
        format!(" Blocked ordered keys ({n}): `outboxctl ordering skip` or `requeue` the head ");
    let rows = s.blocked_keys.iter().map(|k| {
        Row::new(vec![
            escape_controls(&k.aggregate_type).into_owned(),
            k.tenant_id.to_string(),
            escape_controls(&k.aggregate_id).into_owned(),
            k.head_id.to_string(),
            format!("{} ago", short(secs_between(s, k.blocked_at))),
            k.pending.to_string(),
        ])
    });
    let widget = table(
        rows,
        &[
            ("aggregate type", Constraint::Fill(1)),
            ("tenant", Constraint::Length(36)),
            ("aggregate id", Constraint::Fill(1)),
            ("head", Constraint::Length(10)),
            ("blocked", Constraint::Length(10)),
            ("pending", Constraint::Length(8)),
        ],
        Block::default().borders(Borders::ALL).title(title),
    );
    frame.render_widget(widget, area);
}

fn draw_dead(frame: &mut Frame<'_>, area: Rect, s: &Sample) {
    let title = format!(" Newest dead letters ({} in all) ", s.total.dead_lettered);
    let block = Block::default().borders(Borders::ALL).title(title);
    if s.dead.is_empty() {
        frame.render_widget(Paragraph::new("none").block(block), area);
        return;
    }
    let rows = s.dead.iter().map(|d| {
        Row::new(vec![
            d.id.to_string(),
            format!("{} ago", short(secs_between(s, d.dead_lettered_at))),
            escape_controls(&d.event_type).into_owned(),
            d.attempt_count.to_string(),
            escape_controls(d.last_error.as_deref().unwrap_or("-")).into_owned(),
        ])
    });
    let widget = table(
        rows,
        &[
            ("id", Constraint::Length(10)),
            ("dead", Constraint::Length(10)),
            ("event type", Constraint::Length(20)),
            ("tries", Constraint::Length(5)),
            ("error", Constraint::Fill(1)),
        ],
        block,
    );
    frame.render_widget(widget, area);
}

fn secs_between(s: &Sample, t: chrono::DateTime<chrono::Utc>) -> f64 {
    ((s.now - t).num_milliseconds() as f64 / 1e3).max(0.0)
}

/// A duration in seconds, in at most two units: `0s`, `42s`, `3m 12s`, `2h 5m`, `3d 4h`.
pub fn short(secs: f64) -> String {
    let s = secs.max(0.0).round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m {}s", s / 60, s % 60),
        3600..86400 => format!("{}h {}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d {}h", s / 86400, s % 86400 / 3600),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::db::ordering::{Blocked, BlockedKey};
    use crate::db::top::DeadLetterRow;
    use crate::ops::top::RelayView;
    use chrono::{DateTime, Utc};
    use ratatui::backend::TestBackend;
    use ratatui::Terminal;

    fn now() -> DateTime<Utc> {
        "2026-12-07T03:12:04Z".parse().unwrap()
    }

    fn sample() -> Sample {
        let total = Figures {
            ready: 1204,
            scheduled: 30,
            in_flight: 100,
            retrying: 4,
            dead_lettered: 3,
            oldest_pending_lag_seconds: 123.0,
            ..Figures::default()
        };
        let group = Figures {
            ready: 1000,
            in_flight: 100,
            oldest_pending_lag_seconds: 123.0,
            ..Figures::default()
        };
        Sample {
            schema: "public".into(),
            now: now(),
            total,
            blocked: Some(Blocked {
                blocked_keys: 1,
                blocked_events: 5,
                oldest_blocked_at: Some(now()),
            }),
            blocked_keys: vec![BlockedKey {
                aggregate_type: "account".into(),
                tenant_id: uuid::Uuid::nil(),
                aggregate_id: "acc-17".into(),
                head_id: 99,
                blocked_at: now() - chrono::Duration::seconds(90),
                pending: 5,
            }],
            by: "event type",
            groups: vec![
                ("order.placed".into(), group),
                ("order.paid".into(), Figures::default()),
            ],
            interval: Duration::from_secs(1),
            published: (0..300)
                .map(|i| if i == 299 { 812 } else { i % 7 })
                .collect(),
            relays: vec![RelayView {
                mode: "tx".into(),
                kind: "daemon".into(),
                pid: Some(4242),
                schema: "public".into(),
                here: true,
                client_addr: Some("10.1.2.3".into()),
                connections: 4,
                active: 1,
                idle_seconds: Some(0.2),
            }],
            dead: vec![DeadLetterRow {
                id: 77,
                event_type: "order.shipped".into(),
                aggregate_type: "order".into(),
                dead_lettered_at: now() - chrono::Duration::seconds(65),
                attempt_count: 10,
                last_error: Some("HTTP 503\n\u{1b}[2Jgone".into()),
            }],
        }
    }

    /// Draws `view` on a `width` x `height` test terminal; the screen's text, one line per row.
    fn render(view: &View<'_>, width: u16, height: u16) -> String {
        let mut t = Terminal::new(TestBackend::new(width, height)).unwrap();
        t.draw(|f| draw(f, view)).unwrap();
        let buf = t.backend().buffer().clone();
        let mut out = String::new();
        for y in 0..buf.area.height {
            for x in 0..buf.area.width {
                out.push_str(buf[(x, y)].symbol());
            }
            out.push('\n');
        }
        out
    }

    fn view(s: Option<&Sample>, error: Option<&'static str>) -> String {
        let v = View {
            schema: "public",
            interval: Duration::from_secs(1),
            sample: s,
            error,
        };
        render(&v, 120, 40)
    }

    #[test]
    fn a_frame_shows_the_backlog_the_relays_the_groups_and_the_dead_letters() {
        let s = sample();
        let text = view(Some(&s), None);
        for want in [
            "outboxctl top  schema public  every 1s  2026-12-07 03:12:04Z",
            "ready 1204",
            "scheduled 30",
            "retrying 4",
            "in flight 100",
            "dead 3",
            "lag 2m 3s",
            "blocked keys 1 (5 events)",
            "Throughput: 812/s now, peak 812/s, over 1m 58s",
            "Relays connected (1)",
            "4242",
            "10.1.2.3",
            "Top event types by backlog",
            "order.placed",
            "Blocked ordered keys (1)",
            "acc-17",
            "Newest dead letters (3 in all)",
            "order.shipped",
            "1m 5s ago",
            // The error's control characters are escaped, not sent to the terminal.
            r"HTTP 503\n\u{1b}[2Jgone",
        ] {
            assert!(text.contains(want), "no `{want}` in\n{text}");
        }
        let relay = text.lines().find(|l| l.contains("4242")).unwrap();
        for cell in ["tx daemon", "public", "1/4", "0s ago"] {
            assert!(relay.contains(cell), "{cell} not in {relay}");
        }
        assert!(!text.contains('\u{1b}'), "{text}");
        // The sparkline: bars of several heights in its box, the tallest the newest.
        let spark: Vec<&str> = text
            .lines()
            .skip_while(|l| !l.contains("Throughput"))
            .skip(1)
            .take(3)
            .collect();
        let bars: String = spark.concat();
        assert!(bars.contains('█'), "{text}");
        assert!(
            "▁▂▃▄▅▆▇".chars().any(|c| bars.contains(c)) || bars.contains(' '),
            "{text}"
        );
        let top_row = spark[0].trim_end_matches('│').trim_end();
        assert!(
            top_row.ends_with('█'),
            "the newest bar is the tallest: {spark:?}"
        );
    }

    #[test]
    fn a_failed_read_says_so_above_the_last_figures() {
        let s = sample();
        let text = view(Some(&s), Some("connection refused\u{7}"));
        assert!(
            text.contains(
                r"database error, retrying every 1s (the figures are the last read): connection refused\u{7}"
            ),
            "{text}"
        );
        assert!(text.contains("ready 1204"), "{text}");
        let text = view(None, Some("connection refused"));
        assert!(text.contains("connecting…"), "{text}");
        assert!(text.contains("database error, retrying every 1s: connection refused"));
    }

    #[test]
    fn an_empty_outbox_says_nothing_is_there() {
        let mut s = sample();
        s.total = Figures::default();
        s.blocked = None;
        s.blocked_keys.clear();
        s.groups.clear();
        s.relays.clear();
        s.dead.clear();
        s.published = vec![0; 300];
        let text = view(Some(&s), None);
        for want in [
            "ready 0",
            "lag 0s",
            "Throughput: 0/s now, peak 0/s",
            "none connected now",
            "nothing pending",
            "Newest dead letters (0 in all)",
        ] {
            assert!(text.contains(want), "no `{want}` in\n{text}");
        }
        assert!(!text.contains("Blocked ordered keys"), "{text}");
        assert!(!text.contains("blocked keys"), "{text}");
    }

    #[test]
    fn a_small_terminal_still_draws() {
        let s = sample();
        let v = View {
            schema: "public",
            interval: Duration::from_secs(1),
            sample: Some(&s),
            error: None,
        };
        for (w, h) in [(80, 24), (40, 10), (1, 1)] {
            let text = render(&v, w, h);
            assert_eq!(text.lines().count(), h as usize);
        }
        assert!(render(&v, 80, 24).contains("ready 1204"));
    }

    #[test]
    fn durations_are_short() {
        assert_eq!(short(0.4), "0s");
        assert_eq!(short(59.4), "59s");
        assert_eq!(short(192.0), "3m 12s");
        assert_eq!(short(7500.0), "2h 5m");
        assert_eq!(short(273_600.0), "3d 4h");
        assert_eq!(short(-3.0), "0s");
    }
}
