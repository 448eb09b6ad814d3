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

/// A [`Launch`], or none, in 32 bytes instead of an `Option`'s 56: CANN's dump number and task, stream,
/// context and thread ids fit in 32 bits, and a launch whose do not is boxed whole. An op table holds one
/// per op (#18: memory with the op count).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum PackedLaunch {
    /// No launch: the source only has its own order.
    #[default]
    None,
    /// A launch without a dump number.
    Unnumbered {
        /// [`Launch::timestamp_us`].
        timestamp_us: u64,
        /// Task, stream, context and thread ids.
        ids: [u32; 4],
    },
    /// A launch with a dump number (six-field names).
    Numbered {
        /// [`Launch::timestamp_us`].
        timestamp_us: u64,
        /// [`Launch::dump_number`].
        dump_number: u32,
        /// Task, stream, context and thread ids.
        ids: [u32; 4],
    },
    /// A launch whose ids do not fit in 32 bits, as it was.
    Wide(Box<Launch>),
}

impl PackedLaunch {
    /// `launch` packed: boxed only where an id needs more than 32 bits.
    pub fn new(launch: Option<Launch>) -> PackedLaunch {
        let Some(l) = launch else { return PackedLaunch::None };
        let narrow = |v: u64| u32::try_from(v).ok();
        let ids = [l.task_id, l.stream_id, l.context_id, l.thread_id].map(narrow);
        let [Some(task), Some(stream), Some(context), Some(thread)] = ids else {
            return PackedLaunch::Wide(Box::new(l));
        };
        let (timestamp_us, ids) = (l.timestamp_us, [task, stream, context, thread]);
        match l.dump_number.map(narrow) {
            None => PackedLaunch::Unnumbered { timestamp_us, ids },
            Some(Some(dump_number)) => PackedLaunch::Numbered { timestamp_us, dump_number, ids },
            Some(None) => PackedLaunch::Wide(Box::new(l)),
        }
    }

    /// The launch packed.
    pub fn get(&self) -> Option<Launch> {
        let unpack = |timestamp_us, dump_number, [task, stream, context, thread]: [u32; 4]| Launch {
            timestamp_us,
            dump_number,
            task_id: task.into(),
            stream_id: stream.into(),
            context_id: context.into(),
            thread_id: thread.into(),
        };
        match self {
            PackedLaunch::None => None,
            PackedLaunch::Unnumbered { timestamp_us, ids } => Some(unpack(*timestamp_us, None, *ids)),
            PackedLaunch::Numbered { timestamp_us, dump_number, ids } => {
                Some(unpack(*timestamp_us, Some((*dump_number).into()), *ids))
            }
            PackedLaunch::Wide(l) => Some(**l),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_launch_packs_into_32_bytes_and_back() {
        let wide = u64::from(u32::MAX) + 1;
        let l = Launch {
            timestamp_us: u64::MAX,
            dump_number: None,
            task_id: 1,
            stream_id: 2,
            context_id: 3,
            thread_id: u32::MAX.into(),
        };
        let mut launches =
            vec![None, Some(Launch::default()), Some(l), Some(Launch { dump_number: Some(0), ..l })];
        launches.push(Some(Launch { dump_number: Some(u32::MAX.into()), ..l }));
        // Past 32 bits, each field: boxed, as it was.
        launches.push(Some(Launch { dump_number: Some(wide), ..l }));
        launches.push(Some(Launch { task_id: wide, ..l }));
        launches.push(Some(Launch { stream_id: wide, ..l }));
        launches.push(Some(Launch { context_id: wide, ..l }));
        launches.push(Some(Launch { thread_id: u64::MAX, dump_number: Some(7), ..l }));
        for (k, launch) in launches.into_iter().enumerate() {
            let packed = PackedLaunch::new(launch);
            assert_eq!(packed.get(), launch, "launch {k}");
            assert_eq!(matches!(packed, PackedLaunch::Wide(_)), k >= 5, "launch {k}: {packed:?}");
        }
        assert_eq!(std::mem::size_of::<PackedLaunch>(), 32);
    }
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
