//! The held-out arm against the rest (`[proxy] holdout`, issue 49): per client and models, what
//! a conversation cost with no transform and with pith's, so a user can check the savings
//! against conversations pith did not touch instead of trusting pith's own estimate. The arms
//! are the report's sessions (a conversation is a session), split by whether any of their
//! requests was held out; a session is held out whole, its arm being a hash of its opening.

use serde::Serialize;

use super::SessionTotals;

/// Conversations each arm needs before the comparison is given (below, "not enough
/// conversations yet").
pub const MIN_CONVERSATIONS: u64 = 20;

/// The arms compared, per client and the models its conversations used.
#[derive(Debug, Serialize)]
pub struct HoldoutComparison {
    /// Conversations each arm needs before a difference is given.
    pub min_conversations: u64,
    /// One group per client and models, the most conversations first.
    pub groups: Vec<ArmsCompared>,
}

/// One client's (and models') conversations in the two arms.
#[derive(Debug, Serialize)]
pub struct ArmsCompared {
    /// The client.
    pub client: String,
    /// The models its conversations used, joined by ", ".
    pub models: String,
    /// The conversations pith left untouched.
    pub held_out: Arm,
    /// The conversations pith's transforms ran on.
    pub transformed: Arm,
    /// Cost per conversation, transformed less held out, USD, with a 95% interval; `None`
    /// until each arm has [`MIN_CONVERSATIONS`] priced conversations.
    pub cost_per_conversation_difference: Option<Interval>,
}

/// One arm's figures.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Arm {
    /// Conversations (sessions).
    pub conversations: u64,
    /// Their requests.
    pub requests: u64,
    /// Their cost at list prices, USD (priced conversations only).
    pub cost_usd: f64,
    /// Conversations with a known price (the cost's).
    pub priced_conversations: u64,
    /// Requests per conversation.
    pub requests_per_conversation: f64,
    /// Cost per priced request.
    pub cost_per_request_usd: Option<f64>,
    /// Cost per priced conversation.
    pub cost_per_conversation_usd: Option<f64>,
    /// Share of their prompt tokens read from the cache.
    pub cache_hit_share: f64,
}

/// An estimate and its 95% interval.
#[derive(Debug, Clone, Copy, Serialize, PartialEq)]
pub struct Interval {
    /// The estimate.
    pub estimate: f64,
    /// Its interval's low end.
    pub low: f64,
    /// Its high end.
    pub high: f64,
}

/// The comparison of `sessions`, `held_out` naming those held out; `None` when no session was.
pub fn compare(sessions: &[SessionTotals], held_out: &[String]) -> Option<HoldoutComparison> {
    if held_out.is_empty() {
        return None;
    }
    let held: std::collections::HashSet<&str> = held_out.iter().map(String::as_str).collect();
    let mut groups: std::collections::BTreeMap<(String, String), [Vec<&SessionTotals>; 2]> =
        Default::default();
    for s in sessions {
        let Some(id) = &s.session else { continue };
        let arm = usize::from(!held.contains(id.as_str()));
        groups
            .entry((s.client.clone(), s.models.join(", ")))
            .or_default()[arm]
            .push(s);
    }
    let mut groups: Vec<ArmsCompared> = groups
        .into_iter()
        .map(|((client, models), [held, rest])| ArmsCompared {
            client,
            models,
            cost_per_conversation_difference: difference(&held, &rest),
            held_out: arm(&held),
            transformed: arm(&rest),
        })
        .collect();
    groups
        .sort_by_key(|g| std::cmp::Reverse(g.held_out.conversations + g.transformed.conversations));
    Some(HoldoutComparison {
        min_conversations: MIN_CONVERSATIONS,
        groups,
    })
}

fn arm(sessions: &[&SessionTotals]) -> Arm {
    let priced: Vec<&&SessionTotals> = sessions
        .iter()
        .filter(|s| s.totals.cost_usd.is_some())
        .collect();
    let cost_usd: f64 = priced.iter().filter_map(|s| s.totals.cost_usd).sum();
    let priced_requests: u64 = priced.iter().map(|s| s.totals.requests).sum();
    let requests: u64 = sessions.iter().map(|s| s.totals.requests).sum();
    let prompt: u64 = sessions.iter().map(|s| s.totals.prompt_tokens).sum();
    let read: u64 = sessions.iter().map(|s| s.totals.usage.cache_read).sum();
    let per = |total: f64, n: u64| (n > 0).then(|| total / n as f64);
    Arm {
        conversations: sessions.len() as u64,
        requests,
        cost_usd,
        priced_conversations: priced.len() as u64,
        requests_per_conversation: per(requests as f64, sessions.len() as u64).unwrap_or(0.0),
        cost_per_request_usd: per(cost_usd, priced_requests),
        cost_per_conversation_usd: per(cost_usd, priced.len() as u64),
        cache_hit_share: if prompt == 0 {
            0.0
        } else {
            read as f64 / prompt as f64
        },
    }
}

/// The difference of the arms' mean cost per conversation (transformed less held out), with a
/// normal 95% interval from each arm's own spread (Welch's); `None` below
/// [`MIN_CONVERSATIONS`] priced conversations in either arm.
fn difference(held: &[&SessionTotals], rest: &[&SessionTotals]) -> Option<Interval> {
    let costs = |arm: &[&SessionTotals]| -> Vec<f64> {
        arm.iter().filter_map(|s| s.totals.cost_usd).collect()
    };
    let (a, b) = (costs(held), costs(rest));
    if (a.len() as u64) < MIN_CONVERSATIONS || (b.len() as u64) < MIN_CONVERSATIONS {
        return None;
    }
    let (mean_a, var_a) = mean_and_variance(&a);
    let (mean_b, var_b) = mean_and_variance(&b);
    let estimate = mean_b - mean_a;
    let half = 1.96 * (var_a / a.len() as f64 + var_b / b.len() as f64).sqrt();
    Some(Interval {
        estimate,
        low: estimate - half,
        high: estimate + half,
    })
}

/// A sample's mean and its (n - 1) variance.
fn mean_and_variance(xs: &[f64]) -> (f64, f64) {
    let n = xs.len() as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let variance = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0).max(1.0);
    (mean, variance)
}
