//! The views' tables: the catalog (and its recipes pane), apps, audit log, webhooks and notifications (the
//! endpoints and a webhook's deliveries have modules of their own). Their columns share the width by
//! importance, and every cell is cut to its column with `…`.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Cell, Paragraph, Row};
use ratatui::Frame;

use super::{cells, list, note, shown};
use crate::columns::{fit, share, Column};
use crate::state::{clock, CatalogRow, Runs, State};

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
    if let Some(why) = state.list_note() {
        return note(frame, area, "catalog", &why);
    }
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

/// The recipes pane's columns: the recipe and whether it runs here first; the model file goes first.
const RECIPES: [(&str, Column); 5] = [
    ("RECIPE", Column::new(0, 20, 36, true).up_to(44)),
    ("ACCELERATOR", Column::new(2, 11, 11, true)),
    ("ENGINE", Column::new(3, 8, 12, false)),
    ("MODEL FILE", Column::new(4, 10, 24, false).up_to(40)),
    ("HERE", Column::new(1, 16, 30, true).up_to(100)),
];

/// `texts` as one line of the recipes pane's columns (`widths`), each cut to its width; the last one (whether
/// it runs here) in `last`'s style.
fn recipe_cells(texts: [&str; 5], widths: &[Option<u16>], last: Style) -> Line<'static> {
    let mut spans = Vec::new();
    for (k, (text, w)) in texts.iter().zip(widths).enumerate() {
        let Some(w) = w else {
            continue;
        };
        let cell = format!("{:<width$} ", fit(text, *w), width = usize::from(*w));
        spans.push(match k {
            4 => Span::styled(cell, last),
            _ => Span::raw(cell),
        });
    }
    Line::from(spans)
}

/// The detail pane: the selected model's recipes (all of them with `enter`), each with whether it runs here.
pub(super) fn recipes(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let item = visible
        .get(state.selected.min(visible.len().saturating_sub(1)))
        .map(|i| &state.catalog[*i]);
    let room = area.height.saturating_sub(3) as usize;
    let widths = share(&RECIPES.map(|c| c.1), area.width.saturating_sub(2));
    let bold = Style::new().add_modifier(Modifier::BOLD);
    let mut lines = vec![recipe_cells(RECIPES.map(|c| c.0), &widths, bold).style(bold)];
    let title = match item {
        Some(item) => {
            let shown = if item.recipes.len() > room {
                room.saturating_sub(1)
            } else {
                room
            };
            for r in item.recipes.iter().take(shown) {
                let (runs, note) = state.engines.recipe_note(&r.id, &r.accelerator);
                let texts = [r.id.as_str(), &r.accelerator, &r.engine, &r.file, &note];
                let here = Style::new().fg(mark_colour(runs));
                lines.push(recipe_cells(texts, &widths, here));
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
    let title = fit(&title, area.width.saturating_sub(2));
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(title)),
        area,
    );
}

/// A time's last `width` characters: `2026-11-22 11:59:30` as `11-22 11:59:30` or `11:59:30`.
pub(super) fn tail(text: &str, width: u16) -> String {
    let n = text.chars().count();
    text.chars()
        .skip(n.saturating_sub(usize::from(width)))
        .collect()
}

/// The apps' columns: the name and client id first, the redirect URIs and scopes share what is left.
const APPS: [(&str, Column); 6] = [
    ("NAME", Column::new(0, 10, 20, true).up_to(32)),
    ("CLIENT ID", Column::new(1, 12, 28, true)),
    ("TYPE", Column::new(2, 6, 12, true)),
    ("EXCH", Column::new(5, 4, 4, false)),
    ("REDIRECT URIS", Column::new(3, 12, 24, false).up_to(60)),
    ("SCOPES", Column::new(4, 10, 20, false).up_to(48)),
];

pub(super) fn apps(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let whose = match (&state.apps_owner, &state.user) {
        (Some(owner), _) | (None, Some(owner)) => format!("apps of {owner}"),
        (None, None) => "apps".to_string(),
    };
    if let Some(why) = state.list_note() {
        return note(frame, area, &whose, &why);
    }
    let widths = share(&APPS.map(|c| c.1), area.width.saturating_sub(2));
    let columns = shown(APPS.map(|c| c.0), &widths);
    let row = |i: usize| {
        let a = &state.apps[i];
        let texts = [
            a.name.clone(),
            a.id.clone(),
            a.kind().to_string(),
            if a.token_exchange { " ✓" } else { "" }.to_string(),
            a.redirect_uris.join(" "),
            a.scopes.join(" "),
        ];
        let kind = Style::new().fg(if a.public { Color::Cyan } else { Color::Reset });
        cells(texts, &widths, move |k, text, w| match k {
            2 => Cell::from(fit(&text, w)).style(kind),
            _ => Cell::from(fit(&text, w)),
        })
    };
    let title = (whose.as_str(), state.apps.len());
    list(frame, area, state, visible, title, &columns, row);
}

/// The audit log's columns: the outcome and whom it was for first, never cut; on a narrow terminal the time
/// leaves out the year, and the app, the user and the scope shrink or go (`enter` has them all).
const AUDIT: [(&str, Column); 7] = [
    ("TIME (UTC)", Column::new(4, 14, 19, true)),
    ("ACTION", Column::new(3, 12, 20, true)),
    ("OUTCOME", Column::new(0, 13, 15, true)),
    ("APP", Column::new(5, 8, 16, false).up_to(24)),
    ("SUBJECT EMAIL", Column::new(1, 12, 24, true).up_to(36)),
    ("USER", Column::new(6, 6, 10, false).up_to(16)),
    ("SCOPE", Column::new(7, 8, 16, false).up_to(32)),
];

/// `2026-11-22 11:59:30` in `width`: whole, as `11-22 11:59:30`, or as `11:59:30`.
fn moment(text: &str, width: u16) -> String {
    let skip = match width {
        19.. => 0,
        14..=18 => 5,
        _ => 11,
    };
    text.chars().skip(skip).collect()
}

pub(super) fn audit(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let whose = format!("audit log of {}", state.audit_org);
    if let Some(why) = state.list_note() {
        return note(frame, area, &whose, &why);
    }
    let widths = share(&AUDIT.map(|c| c.1), area.width.saturating_sub(2));
    let columns = shown(AUDIT.map(|c| c.0), &widths);
    let row = |i: usize| {
        let e = &state.audit[i];
        let outcome = Style::new().fg(if e.succeeded() {
            Color::Green
        } else {
            Color::Red
        });
        let texts = [
            e.at.clone(),
            e.action.clone(),
            e.outcome.clone(),
            e.app.clone(),
            e.subject_email.clone(),
            e.user.clone(),
            e.scope.clone(),
        ];
        cells(texts, &widths, move |k, text, w| match k {
            // `2026-11-22 11:59:30` as `11-22 11:59:30` where the year does not fit.
            0 => Cell::from(moment(&text, w)),
            2 => Cell::from(fit(&text, w)).style(outcome),
            _ => Cell::from(fit(&text, w)),
        })
    };
    let title = (whose.as_str(), state.audit.len());
    list(frame, area, state, visible, title, &columns, row);
}

/// The webhooks' columns: the URL first, then whether it is enabled and how its last attempt went.
const WEBHOOKS: [(&str, Column); 5] = [
    ("URL", Column::new(0, 16, 32, true).up_to(40)),
    ("WATCHED", Column::new(3, 10, 16, false).up_to(40)),
    ("DOMAINS", Column::new(4, 7, 15, false)),
    ("ENABLED", Column::new(2, 7, 7, true)),
    ("LAST RESULT", Column::new(1, 12, 22, true).up_to(30)),
];

pub(super) fn webhooks(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    if let Some(why) = state.list_note() {
        return note(frame, area, "webhooks", &why);
    }
    let widths = share(&WEBHOOKS.map(|c| c.1), area.width.saturating_sub(2));
    let columns = shown(WEBHOOKS.map(|c| c.0), &widths);
    let row = |i: usize| {
        let h = &state.webhooks[i];
        let (enabled, on) = match (h.enabled, h.disabled_reason.is_empty()) {
            (true, _) => ("yes", Color::Green),
            (false, true) => ("no", Color::DarkGray),
            // Disabled by the server (410, failing for days): said in red.
            (false, false) => ("no (!)", Color::Red),
        };
        // Held by its circuit breaker: said where its last result is.
        let (last, last_colour) = match (h.held(state.now), h.last.is_empty()) {
            (Some(until), _) => (
                format!("held until {}", clock(until, state.now)),
                Color::Yellow,
            ),
            (None, true) => ("-".to_string(), Color::Reset),
            (None, false) if h.last_ok => (h.last.clone(), Color::Green),
            (None, false) => (h.last.clone(), Color::Red),
        };
        let texts = [
            h.url.clone(),
            h.watched.join(" "),
            h.domains.join(" "),
            enabled.to_string(),
            last,
        ];
        cells(texts, &widths, move |k, text, w| {
            let cell = Cell::from(fit(&text, w));
            match k {
                3 => cell.style(Style::new().fg(on)),
                4 => cell.style(Style::new().fg(last_colour)),
                _ => cell,
            }
        })
    };
    let title = ("webhooks", state.webhooks.len());
    list(frame, area, state, visible, title, &columns, row);
}

/// The notifications' columns: the title first; the namespace and subject shrink or go.
const NOTIFICATIONS: [(&str, Column); 5] = [
    ("TIME (UTC)", Column::new(1, 8, 19, true)),
    ("KIND", Column::new(2, 12, 20, true)),
    ("NAMESPACE", Column::new(4, 8, 12, false).up_to(20)),
    ("SUBJECT", Column::new(3, 8, 16, false).up_to(32)),
    ("TITLE", Column::new(0, 20, 40, true).up_to(100)),
];

/// The user's notifications, newest at the top; an empty list says why it is empty.
pub(super) fn notifications(frame: &mut Frame, area: Rect, state: &State, visible: &[usize]) {
    let n = &state.notifications;
    if let Some(why) = state.list_note() {
        return note(frame, area, "notifications", &why);
    }
    let widths = share(&NOTIFICATIONS.map(|c| c.1), area.width.saturating_sub(2));
    let columns = shown(NOTIFICATIONS.map(|c| c.0), &widths);
    let row = |i: usize| {
        let r = &n.rows[i];
        let colour = if r.is_bad() { Color::Red } else { Color::Reset };
        let texts = [
            r.at.clone(),
            r.kind.clone(),
            r.namespace.clone(),
            r.subject.clone(),
            r.headline(),
        ];
        cells(texts, &widths, move |k, text, w| match k {
            0 => Cell::from(moment(&text, w)),
            1 => Cell::from(fit(&text, w)).style(Style::new().fg(colour)),
            _ => Cell::from(fit(&text, w)),
        })
    };
    let title = ("notifications", n.rows.len());
    list(frame, area, state, visible, title, &columns, row);
}
