//! One compared tensor pair: what the engine measured and judged, what the reports print.

use crate::index::{Index, TensorId};
use crate::matching::MatchKind;
use crate::metrics::msprobe::Accuracy;
use crate::metrics::verdict::Level;
use crate::metrics::{MsaccucmpMetrics, MsprobeMetrics};
use accutrace_formats::stats::TensorStats;

/// What a pair's verdict rests on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Measured {
    /// The values of both sides were read and measured, or their element counts differ (a failure that
    /// needs no values).
    Values,
    /// Neither side's values were read, but both sides store the same content hash for the same dtype, shape
    /// and device layout: the tensors are identical bit for bit. A pass, without metrics.
    EqualHashes,
    /// A side holds no tensor data (a statistics-mode capture) and no content hash shows the pair identical:
    /// nothing was measured. Neither a pass nor a failure; an input problem of the comparison.
    Nothing,
}

impl Measured {
    /// The words the CSV's `Reason` and the JSON's `measured` use.
    pub fn text(self) -> &'static str {
        match self {
            Measured::Values => "values",
            Measured::EqualHashes => "equal content hashes (identical, not decoded)",
            Measured::Nothing => "not measured: a side holds no tensor data",
        }
    }
}

/// One compared tensor pair (or an unmatched target tensor).
#[derive(Clone, Debug)]
pub struct CompareRow {
    pub target: TensorId,
    pub bench: Option<TensorId>,
    pub how: Option<MatchKind>,
    pub msprobe: MsprobeMetrics,
    pub msaccucmp: Option<MsaccucmpMetrics>,
    /// The sides' statistics where the comparison measured them because the index holds none; read both
    /// through [`CompareRow::target_stats`] and [`CompareRow::bench_stats`]. Boxed and absent for most
    /// rows: the index's own are not copied (#18: a copy was 200 of a row's 528 bytes).
    pub target_measured_stats: Option<Box<TensorStats>>,
    pub bench_measured_stats: Option<Box<TensorStats>>,
    pub accuracy: Accuracy,
    /// msprobe's Result column and its messages.
    pub result: Level,
    pub messages: Vec<String>,
    /// accutrace's verdict: this tensor fails on precision.
    pub failed: bool,
    /// Why it failed, in words.
    pub reason: Option<String>,
    /// Why a side could not be read: the pair is not judged (neither pass nor fail) and is an input
    /// problem of the comparison.
    pub error: Option<String>,
    /// What the verdict rests on; [`Measured::Nothing`] leaves the pair unjudged.
    pub measured: Measured,
}

impl CompareRow {
    /// The target's statistics: its index's, else those the comparison measured. `ti` is the target's
    /// index.
    pub fn target_stats<'a>(&'a self, ti: &'a Index) -> Option<&'a TensorStats> {
        ti.tensors[self.target].stats.as_ref().or(self.target_measured_stats.as_deref())
    }

    /// The bench's statistics, where a bench tensor matched: its index's (`bi`), else those measured.
    pub fn bench_stats<'a>(&'a self, bi: &'a Index) -> Option<&'a TensorStats> {
        let stored = self.bench.and_then(|b| bi.tensors[b].stats.as_ref());
        stored.or(self.bench_measured_stats.as_deref())
    }

    /// Read and measured (or shown identical by content hash): its verdict counts.
    pub fn judged(&self) -> bool {
        self.error.is_none() && self.measured != Measured::Nothing
    }

    /// Judged and not failed.
    pub fn passed(&self) -> bool {
        !self.failed && self.judged()
    }

    /// Matched, readable, but nothing measured: a side holds no tensor data.
    pub fn unmeasured(&self) -> bool {
        self.error.is_none() && self.measured == Measured::Nothing
    }
}
