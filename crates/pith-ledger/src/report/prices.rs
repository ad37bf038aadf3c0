//! Model prices for cost estimates: a built-in table of published list prices, overridden and
//! extended by `[prices."<model>"]` in config. A model with no price is reported as such; pith
//! never guesses.

use std::collections::BTreeMap;

use pith_wire::usage::{Band, Usage};
use serde::Deserialize;

/// A model's price as `[prices."<model>"]` in pith's config sets it, USD per million tokens.
#[derive(Debug, Clone, Copy, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PriceConfig {
    /// USD per million uncached input tokens.
    pub input: f64,
    /// USD per million output tokens.
    pub output: f64,
    /// USD per million five-minute cache-write tokens (default 1.25x input).
    pub cache_write: Option<f64>,
    /// USD per million one-hour cache-write tokens (default 2x input).
    pub cache_write_1h: Option<f64>,
    /// USD per million cache-read tokens (default 0.1x input).
    pub cache_read: Option<f64>,
}

/// USD per million tokens.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Price {
    /// Uncached input.
    pub input: f64,
    /// Output.
    pub output: f64,
    /// Five-minute cache writes.
    pub cache_write: f64,
    /// One-hour cache writes.
    pub cache_write_1h: f64,
    /// Cache reads.
    pub cache_read: f64,
}

impl Price {
    /// Anthropic's multipliers: a 5-minute cache write costs 1.25x input, a 1-hour one 2x, a
    /// cache read 0.1x.
    const fn standard(input: f64, output: f64) -> Price {
        Price {
            input,
            output,
            cache_write: input * 1.25,
            cache_write_1h: input * 2.0,
            cache_read: input * 0.1,
        }
    }

    fn from_config(c: &PriceConfig) -> Price {
        let base = Price::standard(c.input, c.output);
        Price {
            cache_write: c.cache_write.unwrap_or(base.cache_write),
            cache_write_1h: c.cache_write_1h.unwrap_or(base.cache_write_1h),
            cache_read: c.cache_read.unwrap_or(base.cache_read),
            ..base
        }
    }

    /// Cost in USD of the given token counts, each write at its lifetime's rate.
    pub fn cost(&self, t: Usage) -> f64 {
        let write_1h = t.cache_write_1h.min(t.cache_write);
        (t.input as f64 * self.input
            + t.output as f64 * self.output
            + (t.cache_write - write_1h) as f64 * self.cache_write
            + write_1h as f64 * self.cache_write_1h
            + t.cache_read as f64 * self.cache_read)
            / 1_000_000.0
    }

    /// USD per million prompt tokens billed in `band`.
    pub fn rate(&self, band: Band) -> f64 {
        match band {
            Band::CacheRead => self.cache_read,
            Band::CacheWrite5m => self.cache_write,
            Band::CacheWrite1h => self.cache_write_1h,
            Band::Input => self.input,
        }
    }

    /// What the provider's prompt cache changed the cost of `t` by, in USD, against the same
    /// prompt billed as uncached input: reads' discount less writes' surcharge. Negative when a
    /// cache was written and never read.
    pub fn cache_discount(&self, t: Usage) -> f64 {
        let write_1h = t.cache_write_1h.min(t.cache_write);
        (t.cache_read as f64 * (self.input - self.cache_read)
            - (t.cache_write - write_1h) as f64 * (self.cache_write - self.input)
            - write_1h as f64 * (self.cache_write_1h - self.input))
            / 1_000_000.0
    }
}

/// Published list prices (Anthropic pricing page; the cache-write rates from Anthropic's
/// multipliers, see [`Price::standard`]).
/// Keys match a model id exactly or as a prefix followed by `-` (dated snapshots).
const BUILT_IN: &[(&str, Price)] = &[
    ("claude-opus-4-6", Price::standard(5.0, 25.0)),
    ("claude-opus-4-5", Price::standard(5.0, 25.0)),
    ("claude-opus-4-1", Price::standard(15.0, 75.0)),
    ("claude-opus-4", Price::standard(15.0, 75.0)),
    ("claude-sonnet-4-6", Price::standard(3.0, 15.0)),
    ("claude-sonnet-4-5", Price::standard(3.0, 15.0)),
    ("claude-sonnet-4", Price::standard(3.0, 15.0)),
    ("claude-haiku-4-5", Price::standard(1.0, 5.0)),
    ("claude-3-5-haiku", Price::standard(0.8, 4.0)),
    ("claude-3-haiku", Price::standard(0.25, 1.25)),
];

/// The price table in force.
#[derive(Debug, Clone)]
pub struct Prices {
    table: BTreeMap<String, Price>,
}

impl Prices {
    /// The built-in list prices, `overrides` (the config's `[prices]`) replacing and adding.
    pub fn new(overrides: &BTreeMap<String, PriceConfig>) -> Prices {
        let mut table: BTreeMap<String, Price> = BUILT_IN
            .iter()
            .map(|(k, p)| ((*k).to_owned(), *p))
            .collect();
        for (model, c) in overrides {
            table.insert(model.clone(), Price::from_config(c));
        }
        Prices { table }
    }

    /// The price for `model`: an exact key, else the longest key that is a prefix of it followed
    /// by `-` or `@`.
    pub fn lookup(&self, model: &str) -> Option<Price> {
        if let Some(p) = self.table.get(model) {
            return Some(*p);
        }
        self.table
            .iter()
            .filter(|(k, _)| {
                model.starts_with(k.as_str())
                    && matches!(model.as_bytes().get(k.len()), Some(b'-' | b'@'))
            })
            .max_by_key(|(k, _)| k.len())
            .map(|(_, p)| *p)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_exact_prefix_and_unknown() {
        let prices = Prices::new(&BTreeMap::new());
        assert_eq!(
            prices.lookup("claude-sonnet-4-6").map(|p| p.input),
            Some(3.0)
        );
        assert_eq!(
            prices.lookup("claude-opus-4-5-20251101").map(|p| p.input),
            Some(5.0)
        );
        assert_eq!(
            prices.lookup("claude-opus-4-20250514").map(|p| p.input),
            Some(15.0)
        );
        assert_eq!(prices.lookup("claude-opus-45"), None);
        assert_eq!(prices.lookup("gpt-5.5"), None);
        let p = prices.lookup("claude-haiku-4-5").unwrap();
        let million = Usage {
            input: 1_000_000,
            cache_write: 1_000_000,
            cache_read: 1_000_000,
            ..Usage::default()
        };
        assert!((p.cost(million) - (1.0 + 1.25 + 0.1)).abs() < 1e-9);
        // A one-hour write is billed at its own rate, not the five-minute one.
        let hour = Usage {
            cache_write: 1_000_000,
            cache_write_1h: 1_000_000,
            ..Usage::default()
        };
        assert!((p.cost(hour) - 2.0).abs() < 1e-9);
        assert!((p.cache_discount(million) - (0.9 - 0.25)).abs() < 1e-9);
        assert!((p.cache_discount(hour) + 1.0).abs() < 1e-9);
        assert_eq!(p.rate(Band::CacheWrite1h), 2.0);
    }

    #[test]
    fn config_overrides_and_adds() {
        let mut o = BTreeMap::new();
        o.insert(
            "gpt-5.5".to_owned(),
            PriceConfig {
                input: 2.0,
                output: 8.0,
                cache_write: None,
                cache_write_1h: None,
                cache_read: Some(0.2),
            },
        );
        let prices = Prices::new(&o);
        let p = prices.lookup("gpt-5.5").unwrap();
        assert_eq!((p.input, p.cache_read, p.cache_write), (2.0, 0.2, 2.5));
    }
}
