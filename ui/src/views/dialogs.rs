//! The confirm dialog and the secret shown once.

use ratatui::layout::Rect;
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Clear, Paragraph};
use ratatui::Frame;

use super::centered;
use super::text::wrap_lines;
use crate::columns::fit;
use crate::keymap::{Command, Context, Keymap};
use crate::state::{AppAction, Effect, IssuedSecret, SecretKind, State, WebhookAction};

/// The question the confirm dialog asks before `asked` runs.
pub(super) fn question(asked: &Effect, state: &State) -> String {
    match asked {
        Effect::Act {
            action,
            namespace,
            name,
        } => format!("{} {namespace}/{name}?", action.verb()),
        Effect::AppAct { action, id, name } => {
            let public = state.apps.iter().any(|a| a.id == *id && a.public);
            match action {
                AppAction::RotateSecret if public => format!(
                    "give {name} a secret? It becomes confidential; the secret is shown once."
                ),
                AppAction::RotateSecret => format!(
                    "rotate the secret of {name}? The old secret stops working at once; the new one is shown once."
                ),
                AppAction::DeleteSecret => format!(
                    "delete the secret of {name}? The app becomes public: it signs in with PKCE only."
                ),
                AppAction::Delete => {
                    format!("delete app {name}? Every token it holds stops working.")
                }
            }
        }
        Effect::WebhookAct { action, url, .. } => match action {
            WebhookAction::Disable => {
                format!("disable webhook {url}? Its pending deliveries are cancelled.")
            }
            WebhookAction::Enable => format!("enable webhook {url}?"),
            WebhookAction::Delete => {
                format!("delete webhook {url}? Its deliveries go with it.")
            }
        },
        Effect::InstallEngine { name, endpoint } => format!(
            "{endpoint} needs the {name} engine, which is not installed on this server. Install it now from \
             the package registry? The endpoint starts once it is in."
        ),
        _ => "go ahead?".to_string(),
    }
}

/// `text` in lines of at most `width` characters, broken between words.
fn wrapped(text: &str, width: usize) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    for word in text.split_whitespace() {
        match lines.last_mut() {
            Some(line) if line.chars().count() + 1 + word.chars().count() <= width => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_string()),
        }
    }
    lines
}

pub(super) fn confirm(frame: &mut Frame, area: Rect, question: &str, yes: bool) {
    // A one-line question in a small box; a longer one wrapped in a wider one.
    let width: u16 = if question.chars().count() <= 46 {
        50
    } else {
        64
    };
    let question = wrapped(question, width as usize - 4);
    let box_ = centered(area, width, question.len() as u16 + 4);
    let button = |label: &'static str, on: bool| {
        let style = if on {
            Style::new().add_modifier(Modifier::REVERSED)
        } else {
            Style::new()
        };
        Span::styled(format!(" {label} "), style)
    };
    let mut lines: Vec<Line> = question.into_iter().map(Line::from).collect();
    lines.push(Line::default());
    lines.push(Line::from(vec![
        button("Cancel", !yes),
        Span::raw("   "),
        button("Yes", yes),
    ]));
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(Block::default().borders(Borders::ALL).title(" confirm ")),
        box_,
    );
}

/// What the secret popup says under the secret: that it will not be shown again, what to do with it, and
/// how to get another.
fn secret_note(issued: &IssuedSecret, keymap: &Keymap) -> String {
    match issued.kind {
        SecretKind::Client => {
            let again = match keymap.keys_for(Context::Apps, Command::RotateSecret) {
                Some(keys) => format!(" If it is lost, {keys} in the apps view gives the app a new one."),
                None => String::new(),
            };
            format!("This secret will not be shown again: store it now.{again}")
        }
        SecretKind::Signing => format!(
            "Receivers verify each delivery's webhook-signature with it (Standard Webhooks). It will not be \
             shown here again: store it now (`switchyard webhooks signing-secret {}` reads it again).",
            issued.id
        ),
    }
}

/// A secret just made (an app's client secret, a webhook's signing secret), shown this once; wrapped, in a
/// box as tall as it needs.
pub(super) fn secret(frame: &mut Frame, area: Rect, issued: &IssuedSecret, keymap: &Keymap) {
    let (id_label, secret_label, title) = match issued.kind {
        SecretKind::Client => (
            "client id      ",
            "client secret  ",
            format!(" secret of {} (shown once) ", issued.of),
        ),
        SecretKind::Signing => (
            "webhook         ",
            "signing secret  ",
            format!(" signing secret of webhook {} (shown once) ", issued.of),
        ),
    };
    let width = 76.min(area.width);
    let inner = usize::from(width.saturating_sub(2));
    let lines = vec![
        Line::from(vec![Span::raw(id_label), Span::raw(issued.id.clone())]),
        Line::from(vec![
            Span::raw(secret_label),
            Span::styled(
                issued.secret.reveal().to_string(),
                Style::new().add_modifier(Modifier::BOLD).fg(Color::Yellow),
            ),
        ]),
        Line::default(),
        Line::styled(
            secret_note(issued, keymap),
            Style::new().add_modifier(Modifier::BOLD),
        ),
    ];
    let lines = wrap_lines(lines, inner);
    let box_ = centered(area, width, lines.len() as u16 + 2);
    frame.render_widget(Clear, box_);
    frame.render_widget(
        Paragraph::new(lines).block(
            Block::default()
                .borders(Borders::ALL)
                .title(fit(&title, width.saturating_sub(2))),
        ),
        box_,
    );
}
