//! One compared tensor pair: what the engine measured and judged, what the reports print.

use crate::index::{Index, TensorId};
use crate::matching::MatchKind;
use crate::metrics::msprobe::Accuracy;
use crate::metrics::verdict::Level;
use crate::metrics::{MsaccucmpMetrics, MsprobeMetrics};
use accutrace_formats::stats::TensorStats;
use std::sync::{Arc, LazyLock};

/// The metrics of a row that measured none ([`CompareRow::msprobe`] of a row without its own).
static UNSUPPORTED: LazyLock<MsprobeMetrics> = LazyLock::new(MsprobeMetrics::unsupported);

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
    /// The target tensor and its bench counterpart ([`NO_BENCH`]: none), read through
    /// [`CompareRow::target`] and [`CompareRow::bench`]: ids in 32 bits, as a matched pair's (an index
    /// numbers at most 2^32 tensors; #18: a `TensorId` and an `Option` of one were 24 of a row's 72 bytes).
    target: u32,
    bench: u32,
    pub how: Option<MatchKind>,
    /// msprobe's metrics, read through [`CompareRow::msprobe`]: boxed, and absent while unsupported (nothing
    /// measured), as on every row of a statistics capture, the runs with the most rows (#18: inline they
    /// were 120 of a row's 184 bytes).
    msprobe: Option<Box<MsprobeMetrics>>,
    /// msaccucmp's metrics, where asked for (`--metrics all`, JSON, CSV) and the values were read: boxed,
    /// absent on the rows of statistics captures, the runs with the most rows (#18: inline they were 112
    /// of a row's 288 bytes).
    pub msaccucmp: Option<Box<MsaccucmpMetrics>>,
    /// The sides' statistics where the comparison measured them because the index holds none; read both
    /// through [`CompareRow::target_stats`] and [`CompareRow::bench_stats`]. Boxed and absent for most
    /// rows: the index's own are not copied (#18: a copy was 200 of a row's 528 bytes).
    pub target_measured_stats: Option<Box<TensorStats>>,
    pub bench_measured_stats: Option<Box<TensorStats>>,
    pub accuracy: Accuracy,
    /// msprobe's Result column; its messages are [`CompareRow::messages`].
    pub result: Level,
    /// accutrace's verdict: this tensor fails on precision.
    pub failed: bool,
    /// What the verdict rests on; [`Measured::Nothing`] leaves the pair unjudged.
    pub measured: Measured,
    /// msprobe's messages, why the pair failed and why a side could not be read: absent for most rows, so
    /// boxed together (#18: inline they were 72 of a row's 352 bytes). Rows whose only texts are the same
    /// messages of msprobe share one box ([`SharedMessages`]): its messages are a few fixed sentences,
    /// and every pair of two statistics captures whose hashes differ has one (#18: a box and two strings
    /// a row, 49 MiB at 198,840 such pairs).
    texts: Option<Arc<RowTexts>>,
}

/// A row's bench id where no bench tensor matched (ids stay below it: matching holds them in 32 bits too).
const NO_BENCH: u32 = u32::MAX;

/// The texts a row rarely has (see [`CompareRow::messages`], [`CompareRow::reason`], [`CompareRow::error`]).
#[derive(Clone, Debug, Default)]
struct RowTexts {
    messages: Vec<String>,
    reason: Option<String>,
    error: Option<String>,
}

/// msprobe's messages of one verdict, made once for every row that takes them
/// ([`CompareRow::share_messages`]).
#[derive(Clone, Debug)]
pub(super) struct SharedMessages(Option<Arc<RowTexts>>);

impl SharedMessages {
    pub(super) fn new(messages: Vec<String>) -> SharedMessages {
        SharedMessages((!messages.is_empty()).then(|| Arc::new(RowTexts { messages, ..RowTexts::default() })))
    }
}

impl CompareRow {
    /// The row of `target` paired with `bench` (`how`), before anything is measured: msprobe's metrics
    /// unsupported, accuracy not comparable, a pass, no texts; values to be measured.
    pub fn new(target: TensorId, bench: Option<TensorId>, how: Option<MatchKind>) -> CompareRow {
        CompareRow {
            target: target as u32,
            bench: bench.map_or(NO_BENCH, |b| b as u32),
            how,
            msprobe: None,
            msaccucmp: None,
            target_measured_stats: None,
            bench_measured_stats: None,
            accuracy: Accuracy::NotComparable,
            result: Level::Pass,
            failed: false,
            measured: Measured::Values,
            texts: None,
        }
    }

    /// The target tensor.
    pub fn target(&self) -> TensorId {
        self.target as TensorId
    }

    /// Its bench counterpart, where one matched.
    pub fn bench(&self) -> Option<TensorId> {
        (self.bench != NO_BENCH).then_some(self.bench as TensorId)
    }

    /// msprobe's metrics: all unsupported until measured.
    pub fn msprobe(&self) -> &MsprobeMetrics {
        self.msprobe.as_deref().unwrap_or(&UNSUPPORTED)
    }

    pub fn set_msprobe(&mut self, metrics: MsprobeMetrics) {
        self.msprobe = (metrics != *UNSUPPORTED).then(|| Box::new(metrics));
    }

    /// msprobe's messages for the Result column (empty when clean).
    pub fn messages(&self) -> &[String] {
        self.texts.as_ref().map_or(&[], |t| t.messages.as_slice())
    }

    /// Why it failed, in words.
    pub fn reason(&self) -> Option<&str> {
        self.texts.as_ref().and_then(|t| t.reason.as_deref())
    }

    /// Why a side could not be read: the pair is not judged (neither pass nor fail) and is an input
    /// problem of the comparison.
    pub fn error(&self) -> Option<&str> {
        self.texts.as_ref().and_then(|t| t.error.as_deref())
    }

    pub fn set_messages(&mut self, messages: Vec<String>) {
        if !messages.is_empty() || self.texts.is_some() {
            self.edit_texts(|t| t.messages = messages);
        }
    }

    pub fn set_reason(&mut self, reason: Option<String>) {
        if reason.is_some() || self.texts.is_some() {
            self.edit_texts(|t| t.reason = reason);
        }
    }

    pub fn set_error(&mut self, error: Option<String>) {
        if error.is_some() || self.texts.is_some() {
            self.edit_texts(|t| t.error = error);
        }
    }

    /// Takes `messages` as msprobe's messages: a row without other texts points to them, one with others
    /// copies them.
    pub(super) fn share_messages(&mut self, messages: &SharedMessages) {
        match (&self.texts, &messages.0) {
            (None, shared) => self.texts = shared.clone(),
            (Some(_), shared) => {
                self.set_messages(shared.as_ref().map_or_else(Vec::new, |t| t.messages.clone()))
            }
        }
    }

    /// Changes the texts, boxed only while one is set (the setters allocate nothing to leave a row
    /// without texts); texts shared with other rows are copied first.
    fn edit_texts(&mut self, edit: impl FnOnce(&mut RowTexts)) {
        let mut texts = self.texts.take().map(Arc::unwrap_or_clone).unwrap_or_default();
        edit(&mut texts);
        let empty = texts.messages.is_empty() && texts.reason.is_none() && texts.error.is_none();
        self.texts = (!empty).then(|| Arc::new(texts));
    }

    /// The target's statistics: its index's, else those the comparison measured. `ti` is the target's
    /// index.
    pub fn target_stats(&self, ti: &Index) -> Option<TensorStats> {
        ti.stats(self.target()).or(self.target_measured_stats.as_deref().copied())
    }

    /// The bench's statistics, where a bench tensor matched: its index's (`bi`), else those measured.
    pub fn bench_stats(&self, bi: &Index) -> Option<TensorStats> {
        let stored = self.bench().and_then(|b| bi.stats(b));
        stored.or(self.bench_measured_stats.as_deref().copied())
    }

    /// Read and measured (or shown identical by content hash): its verdict counts.
    pub fn judged(&self) -> bool {
        self.error().is_none() && self.measured != Measured::Nothing
    }

    /// Judged and not failed.
    pub fn passed(&self) -> bool {
        !self.failed && self.judged()
    }

    /// Matched, readable, but nothing measured: a side holds no tensor data.
    pub fn unmeasured(&self) -> bool {
        self.error().is_none() && self.measured == Measured::Nothing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The texts are boxed only while one is set: a row whose reason is set and cleared again, or that is
    /// given no messages, holds no box.
    #[test]
    fn a_rows_texts_are_boxed_only_while_one_is_set() {
        let mut row = CompareRow::new(3, Some(4), Some(MatchKind::Exact));
        row.set_messages(Vec::new());
        row.set_reason(None);
        row.set_error(None);
        assert!(row.texts.is_none());
        row.set_reason(Some("shapes differ".into()));
        row.set_messages(vec!["Warning: dtype changed".into()]);
        assert_eq!((row.reason(), row.error()), (Some("shapes differ"), None));
        assert_eq!(row.messages(), ["Warning: dtype changed"]);
        row.set_reason(None);
        row.set_messages(Vec::new());
        assert!(row.texts.is_none(), "{:?}", row.texts);
        row.set_error(Some("cannot read".into()));
        assert_eq!((row.reason(), row.error(), row.messages().len()), (None, Some("cannot read"), 0));
        assert!(!row.judged() && !row.unmeasured());
    }

    /// A row holds msprobe's metrics in a box only once some are measured: the rows of a statistics
    /// capture, which measure none, hold 56 bytes each and nothing beside.
    #[test]
    fn a_rows_metrics_are_boxed_only_once_measured() {
        let mut row = CompareRow::new(3, Some(4), Some(MatchKind::Exact));
        assert!(row.msprobe.is_none() && *row.msprobe() == MsprobeMetrics::unsupported());
        row.set_msprobe(MsprobeMetrics::unsupported());
        assert!(row.msprobe.is_none());
        row.set_msprobe(MsprobeMetrics::shape_unmatched());
        assert_eq!(*row.msprobe(), MsprobeMetrics::shape_unmatched());
        assert!(row.msprobe.is_some());
        assert_eq!(std::mem::size_of::<CompareRow>(), 56);
    }

    /// Rows that take the same messages share them; a row that had texts of its own copies them, and a
    /// change to one row's texts leaves the others' as they were.
    #[test]
    fn rows_share_msprobes_messages() {
        let messages = SharedMessages::new(vec!["Warning: Not measured".into()]);
        let mut rows: Vec<CompareRow> = (0..3).map(|t| CompareRow::new(t, Some(t), None)).collect();
        rows[2].set_reason(Some("shapes differ".into()));
        for row in &mut rows {
            row.share_messages(&messages);
        }
        let at = |row: &CompareRow| row.messages().as_ptr();
        assert!(rows.iter().all(|r| r.messages() == ["Warning: Not measured"]));
        assert_eq!(at(&rows[0]), at(&rows[1]), "one copy for the rows without other texts");
        assert_ne!(at(&rows[0]), at(&rows[2]), "a row with a reason holds its own");
        assert_eq!(rows[2].reason(), Some("shapes differ"));
        rows[1].set_error(Some("cannot read".into()));
        assert_eq!((rows[0].error(), rows[1].error()), (None, Some("cannot read")));
        assert_eq!(rows[0].messages(), rows[1].messages());
        rows[0].share_messages(&SharedMessages::new(Vec::new()));
        assert!(rows[0].texts.is_none() && rows[1].messages().len() == 1);
    }

    /// A row's ids, held in 32 bits, read back as they were given, and a row without a counterpart has
    /// none (not tensor `u32::MAX`).
    #[test]
    fn a_rows_ids_are_read_back_as_given() {
        let row = CompareRow::new(7, Some(0), Some(MatchKind::Exact));
        assert_eq!((row.target(), row.bench()), (7, Some(0)));
        let top = u32::MAX as usize - 1;
        let row = CompareRow::new(top, Some(top), Some(MatchKind::Exact));
        assert_eq!((row.target(), row.bench()), (top, Some(top)));
        assert_eq!(CompareRow::new(0, None, None).bench(), None);
    }
}
