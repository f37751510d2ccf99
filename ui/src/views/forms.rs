//! The forms (deploy, new app, webhook), each issue of the server's answer beside its field.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::centered;
use super::text::wrap_lines;
use crate::columns::fit;
use crate::forms::app::{AppField, AppForm};
use crate::forms::deploy::{DeployForm, Field};
use crate::forms::input::FormState;
use crate::forms::issues::FormField;
use crate::forms::webhook::{HookField, WebhookForm};
use crate::keymap::{Command, Context, Keymap};

/// The keys that choose among a field's values in a form, as bound (`←→` in the built-in keymap); none
/// when no key does.
fn choosing(keymap: &Keymap) -> Option<String> {
    let keys: Vec<String> = [Command::PrevChoice, Command::NextChoice]
        .into_iter()
        .filter_map(|c| keymap.keys_for(Context::Form, c))
        .collect();
    let arrows = keys.iter().all(|k| k == "←" || k == "→");
    (!keys.is_empty()).then(|| keys.join(if arrows { "" } else { "/" }))
}

/// The deploy form: each field with every issue the server had with it beside it, all at once.
pub(super) fn deploy(frame: &mut Frame, area: Rect, form: &DeployForm, keymap: &Keymap) {
    let hint = match choosing(keymap) {
        Some(keys) => format!(" ({keys} chooses)"),
        None => String::new(),
    };
    let switch = match choosing(keymap) {
        Some(keys) => format!(" ({keys}, space or y/n)"),
        None => " (space or y/n)".to_string(),
    };
    let fields = Field::ALL.iter().map(|f| {
        let value = match f {
            Field::Recipe | Field::Type | Field::PrivateRegion => {
                format!("{}{hint}", form.value(*f))
            }
            f if f.switch() => format!("{}{switch}", form.value(*f)),
            _ => form.value(*f),
        };
        (f.label().to_string(), value)
    });
    let lines = form_lines(FormView {
        fields: fields.collect(),
        state: &form.state,
        label_width: 26,
        busy: "deploying…",
        hints: &[],
    });
    let title = format!(" deploy {} ", form.repo_id);
    form_popup(frame, area, 96, &title, lines);
}

/// The new-app form: each field with every issue the server had with it under it.
pub(super) fn new_app(frame: &mut Frame, area: Rect, form: &AppForm, keymap: &Keymap) {
    let hint = match choosing(keymap) {
        Some(keys) => format!(" ({keys} or y/n)"),
        None => " (y/n)".to_string(),
    };
    let fields = AppField::ALL.iter().map(|f| {
        let value = match f {
            AppField::Public => format!("{}{hint}", form.value(*f)),
            _ => form.value(*f),
        };
        (f.label().to_string(), value)
    });
    let lines = form_lines(FormView {
        fields: fields.collect(),
        state: &form.state,
        label_width: 32,
        busy: "creating…",
        hints: &[],
    });
    let whose = form.owner.as_deref().map(|o| format!(" for {o}"));
    let title = format!(" new app{} ", whose.unwrap_or_default());
    form_popup(frame, area, 96, &title, lines);
}

/// The webhook form: each field with every issue the server had with it beside it, all at once.
pub(super) fn webhook_form(frame: &mut Frame, area: Rect, form: &WebhookForm) {
    let editing = form.id.is_some();
    let fields = HookField::ALL
        .iter()
        .map(|f| (f.label(editing).to_string(), form.shown(*f)));
    let lines = form_lines(FormView {
        fields: fields.collect(),
        state: &form.state,
        label_width: 28,
        busy: "saving…",
        hints: &["watched: user:NAME org:NAME model:AUTHOR/MODEL · domains: repo endpoint"],
    });
    let title = if editing {
        " edit webhook "
    } else {
        " new webhook "
    };
    form_popup(frame, area, 100, title, lines);
}

/// What a form popup shows: each field (label, value) with its issues, the focused one, and the lines
/// under them.
struct FormView<'a, F> {
    /// Each field's label and value, in the form's order (`F::ALL`).
    fields: Vec<(String, String)>,
    state: &'a FormState<F>,
    label_width: usize,
    /// Shown while the form is with the server.
    busy: &'a str,
    hints: &'a [&'a str],
}

/// A form's lines: each field with every issue beside it, all at once, then the issues about no one field
/// and the hints (the keys are in the footer).
fn form_lines<'a, F: FormField>(view: FormView<'_, F>) -> Vec<Line<'a>> {
    let mut lines = Vec::new();
    for (i, (label, value)) in view.fields.into_iter().enumerate() {
        let focused = i == view.state.focus;
        let marker = if focused { "▸" } else { " " };
        let style = match focused {
            true => Style::new().add_modifier(Modifier::BOLD),
            false => Style::new(),
        };
        lines.push(Line::from(vec![
            Span::raw(format!(
                "{marker} {label:<width$}",
                width = view.label_width
            )),
            Span::styled(format!("{value}{}", if focused { "▏" } else { "" }), style),
        ]));
        for issue in F::ALL
            .get(i)
            .map(|f| view.state.issues.of(*f))
            .into_iter()
            .flatten()
        {
            lines.push(Line::styled(
                format!("    ← {issue}"),
                Style::new().fg(Color::Red),
            ));
        }
    }
    lines.push(Line::default());
    if view.state.busy {
        lines.push(Line::styled(
            view.busy.to_string(),
            Style::new().fg(Color::Yellow),
        ));
    }
    for e in &view.state.issues.errors {
        lines.push(Line::styled(e.clone(), Style::new().fg(Color::Red)));
    }
    for hint in view.hints {
        lines.push(Line::styled(
            hint.to_string(),
            Style::new().fg(Color::DarkGray),
        ));
    }
    lines
}

/// A bordered popup of `lines`, at most `width` wide, over the middle of `area`: its lines wrapped, and as
/// tall as they need.
fn form_popup(frame: &mut Frame, area: Rect, width: u16, title: &str, lines: Vec<Line>) {
    let width = width.min(area.width);
    let lines = wrap_lines(lines, usize::from(width.saturating_sub(2)));
    let box_ = centered(area, width, lines.len() as u16 + 2);
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(fit(title, width.saturating_sub(2))),
        ),
        box_,
    );
}
