//! Reading the terminal: a thread turns its events into actions, keys named as the keymap names them, and a
//! gate lets the event loop take the terminal's input away from that thread while `$EDITOR` runs. Imports
//! `keymap` and `state`.

use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use ratatui::crossterm::event::{
    self, Event, KeyCode, KeyEvent, KeyEventKind, KeyModifiers, MouseButton, MouseEventKind,
};
use tokio::sync::mpsc;

use crate::keymap;
use crate::state::{Action, Key};

/// The epoch of actions that do not come from a server (keys, ticks): never dropped.
pub(crate) const ALWAYS: u64 = u64::MAX;

/// A key as the keymap names it.
pub fn key_name(ev: &KeyEvent) -> Option<String> {
    let name = match ev.code {
        KeyCode::Char(c) if ev.modifiers.contains(KeyModifiers::CONTROL) => {
            format!("ctrl-{}", c.to_ascii_lowercase())
        }
        KeyCode::Char(' ') => "space".into(),
        KeyCode::Char(c) => c.to_string(),
        KeyCode::F(n) => format!("f{n}"),
        code => keymap::NAMED_KEYS
            .iter()
            .find(|(named, _)| *named == code)?
            .1
            .to_string(),
    };
    Some(name)
}

/// Lets the event loop take the terminal's input away from the reading thread while `$EDITOR` runs.
#[derive(Default)]
pub(crate) struct InputGate {
    /// (pause asked, paused)
    state: Mutex<(bool, bool)>,
    changed: Condvar,
}

impl InputGate {
    /// Called by the reading thread between reads: parks while a pause is asked.
    fn wait_if_paused(&self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        while s.0 {
            s.1 = true;
            self.changed.notify_all();
            s = match self.changed.wait(s) {
                Ok(s) => s,
                Err(_) => return,
            };
        }
        s.1 = false;
    }

    /// Returns once the reading thread is parked.
    pub(crate) fn pause(&self) {
        let Ok(mut s) = self.state.lock() else {
            return;
        };
        s.0 = true;
        while !s.1 {
            s = match self.changed.wait_timeout(s, Duration::from_secs(1)) {
                Ok((s, _)) => s,
                Err(_) => return,
            };
        }
    }

    /// Lets the reading thread read again.
    pub(crate) fn resume(&self) {
        if let Ok(mut s) = self.state.lock() {
            s.0 = false;
            self.changed.notify_all();
        }
    }
}

/// Terminal events become actions on a thread of their own. The thread checks the gate between short polls,
/// so it can be stopped without losing a key to it.
pub(crate) fn read_input(tx: mpsc::UnboundedSender<(u64, Action)>, gate: Arc<InputGate>) {
    std::thread::spawn(move || loop {
        gate.wait_if_paused();
        let action = match event::poll(Duration::from_millis(200)) {
            Ok(false) => continue,
            Ok(true) => match event::read() {
                Ok(Event::Key(k)) if k.kind != KeyEventKind::Release => {
                    key_name(&k).map(|n| Action::Key(Key(n)))
                }
                Ok(Event::Resize(w, h)) => Some(Action::Resize(w, h)),
                Ok(Event::Mouse(m)) => match m.kind {
                    MouseEventKind::ScrollDown => Some(Action::Wheel(true)),
                    MouseEventKind::ScrollUp => Some(Action::Wheel(false)),
                    MouseEventKind::Down(MouseButton::Left) => Some(Action::Click(m.row)),
                    _ => None,
                },
                Ok(_) => None,
                Err(_) => Some(Action::Key(Key("ctrl-c".into()))),
            },
            // No more input: quit rather than run on deaf.
            Err(_) => Some(Action::Key(Key("ctrl-c".into()))),
        };
        if let Some(a) = action {
            if tx.send((ALWAYS, a)).is_err() {
                break;
            }
        }
    });
}
