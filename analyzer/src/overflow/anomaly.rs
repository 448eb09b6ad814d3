//! The anomaly a tensor's statistics show: inf/NaN, and values at the dtype's saturation limit.

use accutrace_formats::stats::TensorStats;
use serde::Serialize;

/// The anomaly a tensor shows, from its statistics.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Anomaly {
    pub nan: u64,
    pub inf: u64,
    /// Values at the dtype's saturation limit (what saturation mode leaves of an overflow).
    pub saturated: u64,
}

impl Anomaly {
    pub fn of(stats: &TensorStats, is_float: bool) -> Anomaly {
        Anomaly {
            nan: stats.nan,
            inf: stats.pos_inf + stats.neg_inf,
            saturated: if is_float { stats.at_saturation } else { 0 },
        }
    }

    pub fn any(self) -> bool {
        self.nan + self.inf + self.saturated > 0
    }

    /// "3 NaN, 260 inf": what the report says.
    pub fn describe(self) -> String {
        let mut parts = Vec::new();
        if self.nan > 0 {
            parts.push(format!("{} NaN", self.nan));
        }
        if self.inf > 0 {
            parts.push(format!("{} inf", self.inf));
        }
        if self.saturated > 0 {
            parts.push(format!("{} saturated", self.saturated));
        }
        parts.join(", ")
    }
}
