//! The views' tables: the catalog (and its recipes pane), apps, audit log, webhooks, deliveries and
//! notifications (the endpoints have a module of their own).

use ratatui::layout::{Constraint, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row};
use ratatui::Frame;

use super::{cells, list, note, shown};
use crate::columns::{fit, share, Column};
use crate::state::{CatalogRow, Recipe, Runs, State};

/// An endpoint's state in its colour: green running, yellow on its way, red failed, grey asleep.
pub(super) fn state_colour(state: &str) -> Color {
    match state {
        "running" => Color::Green,
        "initializing" | "pending" | "updating" => Color::Yellow,
        "failed" | "updateFailed" => Color::Red,
        "paused" | "scaledToZero" => Color::DarkGray,
        _ => Color::Reset,
    }
}

/// The catalog's columns, in the order shown, with what each needs: the model and whether it runs here get
/// room first, then task and engines; author, accelerators, license and the date shrink or go first.
const CATALOG: [(&str, Column); 8] = [
    ("MODEL", Column::new(0, 12, 24, true).up_to(40)),
    // Whether it runs on this server: `yes`, `install` (a built-in engine would run it), `no`.
    ("HERE", Column::new(1, 7, 7, true)),
    ("AUTHOR", Column::new(4, 8, 14, false).up_to(24)),
    ("TASK", Column::new(2, 10, 18, false).up_to(24)),
    ("LICENSE", Column::new(6, 8, 11, false).up_to(12)),
    ("ACCELERATORS", Column::new(5, 7, 12, false).up_to(14)),
    ("ENGINES", Column::new(3, 8, 13, false).up_to(18)),
    ("CREATED", Column::new(7, 10, 10, false)),
];

pub(super) fn catalog(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let widths = share(&CATALOG.map(|c| c.1), area.width.saturating_sub(2));
    let shown = shown(CATALOG.map(|c| c.0), &widths);
    // The server's filters, when the catalog shown was asked with some.
    let name = match state.catalog_filters.is_empty() {
        true => "catalog".to_string(),
        false => {
            let filters: Vec<String> = state
                .catalog_filters
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            format!("catalog [{}]", filters.join(" "))
        }
    };
    list(
        frame,
        area,
        state,
        visible,
        (&name, state.catalog.len()),
        &shown,
        |i| catalog_row(state, &state.catalog[i], &widths),
    );
}

/// A model's cells for the columns shown (`widths`), each cut to its width; the mark in its colour.
fn catalog_row<'a>(state: &State, c: &CatalogRow, widths: &[Option<u16>]) -> Row<'a> {
    let runs = state.engines.model_mark(c);
    let texts = [
        c.model.as_str(),
        runs.mark(),
        &c.author,
        &c.task,
        &c.license,
        &c.accelerators,
        &c.engines,
        &c.created,
    ];
    cells(texts, widths, |k, text, w| match k {
        1 => Cell::from(fit(text, w)).style(Style::new().fg(mark_colour(runs))),
        _ => Cell::from(fit(text, w)),
    })
}

/// Green for what runs here, yellow for what would after an install.
fn mark_colour(runs: Runs) -> Color {
    match runs {
        Runs::Here => Color::Green,
        Runs::AfterInstall => Color::Yellow,
        Runs::No | Runs::Unsaid => Color::DarkGray,
    }
}

/// The detail pane: the selected model's recipes (all of them with `enter`).
pub(super) fn recipes(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let item = visible
        .get(state.selected.min(visible.len().saturating_sub(1)))
        .map(|i| &state.catalog[*i]);
    let room = area.height.saturating_sub(3) as usize;
    let mut lines = vec![Line::styled(
        Recipe::header(),
        Style::new().add_modifier(Modifier::BOLD),
    )];
    let title = match item {
        Some(item) => {
            let shown = if item.recipes.len() > room {
                room.saturating_sub(1)
            } else {
                room
            };
            for recipe in item.recipes.iter().take(shown) {
                lines.push(recipe_line(recipe, state.engines.recipe_note(&recipe.id)));
            }
            if item.recipes.len() > shown {
                lines.push(Line::styled(
                    format!("… {} more (enter shows all)", item.recipes.len() - shown),
                    Style::new().fg(Color::DarkGray),
                ));
            }
            format!(" recipes of {} ({}) ", item.repo_id, item.recipes.len())
        }
        None => " recipes ".to_string(),
    };
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

/// A recipe with its note on whether it runs here (green when it does, yellow when an install would).
fn recipe_line(recipe: &Recipe, (runs, note): (Runs, String)) -> Line<'static> {
    Line::from(vec![
        Span::raw(format!("{:<78}", recipe.line())),
        Span::styled(note, Style::new().fg(mark_colour(runs))),
    ])
}

pub(super) fn apps(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let whose = match (&state.apps_owner, &state.user) {
        (Some(owner), _) | (None, Some(owner)) => format!("apps of {owner}"),
        (None, None) => "apps".to_string(),
    };
    if let Some(why) = &state.apps_note {
        return note(frame, area, &whose, why);
    }
    let columns = [
        ("NAME", Constraint::Fill(2)),
        ("CLIENT ID", Constraint::Length(28)),
        ("TYPE", Constraint::Length(12)),
        ("EXCH", Constraint::Length(4)),
        ("REDIRECT URIS", Constraint::Fill(3)),
        ("SCOPES", Constraint::Fill(3)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        (&whose, state.apps.len()),
        &columns,
        |i| {
            let a = &state.apps[i];
            let kind = Style::new().fg(if a.public { Color::Cyan } else { Color::Reset });
            Row::new(vec![
                Cell::from(a.name.clone()),
                Cell::from(a.id.clone()),
                Cell::from(a.kind()).style(kind),
                Cell::from(if a.token_exchange { " ✓" } else { "" }),
                Cell::from(a.redirect_uris.join(" ")),
                Cell::from(a.scopes.join(" ")),
            ])
        },
    );
}

pub(super) fn audit(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let whose = format!("audit log of {}", state.audit_org);
    if let Some(why) = &state.audit_note {
        return note(frame, area, &whose, why);
    }
    // The outcome is never cut; on a narrow terminal the time leaves out the year and the action shares
    // what is left.
    let wide = area.width >= 110;
    let columns = [
        ("TIME (UTC)", Constraint::Length(if wide { 19 } else { 14 })),
        (
            "ACTION",
            if wide {
                Constraint::Length(20)
            } else {
                Constraint::Fill(2)
            },
        ),
        ("OUTCOME", Constraint::Length(15)),
        ("APP", Constraint::Fill(2)),
        ("SUBJECT EMAIL", Constraint::Fill(4)),
        ("USER", Constraint::Fill(1)),
        ("SCOPE", Constraint::Fill(3)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        (&whose, state.audit.len()),
        &columns,
        |i| {
            let e = &state.audit[i];
            let outcome = if e.succeeded() {
                Color::Green
            } else {
                Color::Red
            };
            let at: String = e.at.chars().skip(if wide { 0 } else { 5 }).collect();
            Row::new(vec![
                Cell::from(at),
                Cell::from(e.action.clone()),
                Cell::from(e.outcome.clone()).style(Style::new().fg(outcome)),
                Cell::from(e.app.clone()),
                Cell::from(e.subject_email.clone()),
                Cell::from(e.user.clone()),
                Cell::from(e.scope.clone()),
            ])
        },
    );
}

pub(super) fn webhooks(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    if let Some(why) = &state.webhooks_note {
        return note(frame, area, "webhooks", why);
    }
    let columns = [
        ("URL", Constraint::Fill(3)),
        ("WATCHED", Constraint::Fill(2)),
        ("DOMAINS", Constraint::Length(16)),
        ("ENABLED", Constraint::Length(8)),
        ("LAST RESULT", Constraint::Length(30)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        ("webhooks", state.webhooks.len()),
        &columns,
        |i| {
            let h = &state.webhooks[i];
            let enabled = match (h.enabled, h.disabled_reason.is_empty()) {
                (true, _) => Cell::from("yes").style(Style::new().fg(Color::Green)),
                (false, true) => Cell::from("no").style(Style::new().fg(Color::DarkGray)),
                // Disabled by the server (410, failing for days): said in red.
                (false, false) => Cell::from("no (!)").style(Style::new().fg(Color::Red)),
            };
            let last = if h.last.is_empty() {
                Cell::from("-")
            } else {
                let colour = if h.last_ok { Color::Green } else { Color::Red };
                Cell::from(h.last.clone()).style(Style::new().fg(colour))
            };
            Row::new(vec![
                Cell::from(h.url.clone()),
                Cell::from(h.watched.join(" ")),
                Cell::from(h.domains.join(" ")),
                enabled,
                last,
            ])
        },
    );
}

/// A webhook's attempts, newest at the top; a failed poll is said in the title until one succeeds.
pub(super) fn deliveries(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let d = &state.deliveries;
    let title = match &d.note {
        Some(why) => format!("deliveries of {} · {why}; retrying", d.url),
        None => format!("deliveries of {} · live", d.url),
    };
    let columns = [
        ("TIME (UTC)", Constraint::Length(19)),
        ("EVENT", Constraint::Fill(2)),
        ("ATTEMPT", Constraint::Length(7)),
        ("STATUS", Constraint::Length(6)),
        ("DURATION", Constraint::Length(9)),
        ("ERROR", Constraint::Length(9)),
        ("NEXT ATTEMPT", Constraint::Length(19)),
        ("STATE", Constraint::Fill(1)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        (&title, d.rows.len()),
        &columns,
        |i| {
            let a = &d.rows[i];
            let colour = if a.ok() { Color::Green } else { Color::Red };
            let attempt = if a.manual {
                format!("{} (r)", a.attempt)
            } else {
                a.attempt.to_string()
            };
            Row::new(vec![
                Cell::from(a.at.clone()),
                Cell::from(a.event.clone()),
                Cell::from(attempt),
                Cell::from(a.status_code.map_or_else(|| "-".into(), |c| c.to_string()))
                    .style(Style::new().fg(colour)),
                Cell::from(format!("{} ms", a.duration_ms)),
                Cell::from(a.error_class.clone()).style(Style::new().fg(Color::Red)),
                Cell::from(a.next_attempt.clone()),
                Cell::from(a.state.clone()),
            ])
        },
    );
}

/// The user's notifications, newest at the top.
pub(super) fn notifications(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let n = &state.notifications;
    if n.unsupported {
        return note(
            frame,
            area,
            "notifications",
            "this server has no notifications (it is older than this console)",
        );
    }
    let columns = [
        ("TIME (UTC)", Constraint::Length(19)),
        ("KIND", Constraint::Length(20)),
        ("NAMESPACE", Constraint::Fill(1)),
        ("SUBJECT", Constraint::Fill(1)),
        ("TITLE", Constraint::Fill(3)),
    ];
    list(
        frame,
        area,
        state,
        visible,
        ("notifications", n.rows.len()),
        &columns,
        |i| {
            let r = &n.rows[i];
            let colour = if r.is_bad() { Color::Red } else { Color::Reset };
            Row::new(vec![
                Cell::from(r.at.clone()),
                Cell::from(r.kind.clone()).style(Style::new().fg(colour)),
                Cell::from(r.namespace.clone()),
                Cell::from(r.subject.clone()),
                Cell::from(r.headline()),
            ])
        },
    );
}
