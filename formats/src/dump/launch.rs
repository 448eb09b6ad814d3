//! Execution order: what the runtime says about when an op ran, read from its dump file name (cann-facts
//! §1, §5). Chunks and files arrive in any order (a big file completes after a small one that started
//! later; several writer threads append in turn), so every reader orders ops by this key, never by arrival.

use super::names::DumpFileName;

/// When the runtime says an op ran. Ordered field by field: the dump timestamp first; the producer's dump
/// number (six-field names: a process-wide count of dumped files), then task and stream ids break ties
/// between ops of one microsecond; FFTS+ sub-tasks of one task follow their context and thread ids.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct Launch {
    /// Dump time, µs since the epoch.
    pub timestamp_us: u64,
    /// The six-field name's dump number.
    pub dump_number: Option<u64>,
    /// Device task id.
    pub task_id: u64,
    /// Device stream id (0 when the name has none).
    pub stream_id: u64,
    /// FFTS+ context id (0 without the suffix).
    pub context_id: u64,
    /// FFTS+ thread id (0 without the suffix).
    pub thread_id: u64,
}

impl Launch {
    /// The launch a dump file name describes (a four-field name has no stream id: 0).
    pub fn of_name(name: &DumpFileName) -> Launch {
        Launch {
            timestamp_us: name.timestamp_us,
            dump_number: name.dump_number,
            task_id: name.task_id,
            stream_id: name.stream_id.unwrap_or(0),
            context_id: name.ffts.map_or(0, |f| f.context_id),
            thread_id: name.ffts.map_or(0, |f| f.thread_id),
        }
    }

    /// A source that only knows a time (a vendor benchmark's `{op}.{i}.{timestamp}.npy`) or an order.
    pub fn at(timestamp_us: u64) -> Launch {
        Launch { timestamp_us, ..Launch::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dump::parse_file_name;

    #[test]
    fn the_timestamp_leads_and_ids_break_ties() {
        let of = |name: &str| Launch::of_name(&parse_file_name(name).unwrap());
        let mut names = [
            "MatMul.b.12.2.100",
            "Add.a.11.2.100",
            "Relu.c.5.2.99",
            "MatMul.d.7.2.100.4.3.0.0",
            "MatMul.d.7.2.100.4.2.0.0",
        ];
        names.sort_by_key(|n| of(n));
        let expected = [
            "Relu.c.5.2.99",
            "MatMul.d.7.2.100.4.2.0.0",
            "MatMul.d.7.2.100.4.3.0.0",
            "Add.a.11.2.100",
            "MatMul.b.12.2.100",
        ];
        assert_eq!(names, expected);
        assert_eq!(
            of("Add.a.11.2.100"),
            Launch { timestamp_us: 100, task_id: 11, stream_id: 2, ..Launch::at(0) }
        );
        // Six-field names: the dump number comes before the task id.
        assert!(of("Add.x.3.20.2.50") < of("Add.y.4.10.2.50"));
    }
}
