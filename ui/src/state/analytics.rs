//! What changes the charts: the describe's key cycles their range, ticks load them once a period (the
//! described endpoint's, and the list's sparklines on a terminal wide enough), and answers are kept and
//! drawn only when they changed what is shown.

use std::collections::HashMap;

use super::charts::{
    period, Analytics, ChartRange, SPARKLINE_EVERY_S, SPARKLINE_MIN_WIDTH, SPARKLINE_SPAN,
};
use super::model::{State, View};
use super::overlay::Overlay;
use super::panes;
use crate::effects::Effect;

/// The endpoint described, when it is one.
fn described(state: &State) -> Option<(String, String)> {
    let Overlay::Describe(p) = &state.overlay else {
        return None;
    };
    let ep = state.selected_endpoint()?;
    (state.view == View::Endpoints && p.title == format!("{}/{}", ep.namespace, ep.name))
        .then(|| (ep.namespace.clone(), ep.name.clone()))
}

/// The load of the described endpoint's charts over the range shown.
fn load(state: &mut State, namespace: String, name: String) -> Vec<Effect> {
    vec![state.charts.load(state.now, namespace, name)]
}

/// The charts over the next range (the describe's key).
pub(super) fn cycle(state: &mut State) -> Vec<Effect> {
    let Some((namespace, name)) = described(state) else {
        return Vec::new();
    };
    state.charts.range = state.charts.range.next();
    state.dirty = true;
    load(state, namespace, name)
}

/// At each tick: the described endpoint's charts, and the list's sparklines (on a terminal wide enough for
/// them), once a period each (see [`period`]); a sparklines load while another is under way is not asked.
pub(super) fn due(state: &mut State) -> Vec<Effect> {
    let mut effects = Vec::new();
    if let Some((namespace, name)) = described(state) {
        if state.charts.asked != Some(period(state.now, state.charts.range.every_s())) {
            effects.extend(load(state, namespace, name));
        }
    }
    let listed = state.view == View::Endpoints
        && state.overlay == Overlay::None
        && state.size.0 >= SPARKLINE_MIN_WIDTH
        && !state.endpoints.is_empty();
    let now = period(state.now, SPARKLINE_EVERY_S);
    if listed && state.charts.sparklines_asked != Some(now) && !state.charts.sparklines_loading {
        state.charts.sparklines_asked = Some(now);
        state.charts.sparklines_loading = true;
        // The rows the filter leaves.
        let endpoints = state
            .visible()
            .into_iter()
            .map(|i| &state.endpoints[i])
            .map(|e| (e.namespace.clone(), e.name.clone()))
            .collect();
        effects.push(Effect::LoadSparklines {
            endpoints,
            from: state.now - SPARKLINE_SPAN,
        });
    }
    effects
}

/// A describe load came: kept when it is of the endpoint described and the range shown, and drawn when it
/// changed what is shown (the decisions are listed in the description's text). A load that failed leaves
/// the charts last read in place.
pub(super) fn on_loaded(
    state: &mut State,
    range: ChartRange,
    result: Result<Analytics, (String, String, String)>,
) {
    let Some((namespace, name)) = described(state) else {
        return;
    };
    let of = match &result {
        Ok(a) => (&a.namespace, &a.name),
        Err((ns, n, _)) => (ns, n),
    };
    if range != state.charts.range || (of.0, of.1) != (&namespace, &name) {
        return;
    }
    let shown_before = matches!(state.charts.of(&namespace, &name), Some(Ok(_)));
    if let Err((_, _, why)) = &result {
        if shown_before {
            state.message = Some((format!("charts: {why}"), true));
            state.dirty = true;
            return;
        }
    }
    if state.charts.shown.as_ref() == Some(&result) {
        return;
    }
    state.charts.shown = Some(result);
    panes::redescribe(state);
}

/// The list's sparklines came: drawn when they changed.
pub(super) fn on_sparklines_loaded(state: &mut State, lines: Vec<((String, String), Vec<f64>)>) {
    state.charts.sparklines_loading = false;
    let lines: HashMap<(String, String), Vec<f64>> = lines.into_iter().collect();
    if lines != state.charts.sparklines {
        state.charts.sparklines = lines;
        state.dirty = true;
    }
}
