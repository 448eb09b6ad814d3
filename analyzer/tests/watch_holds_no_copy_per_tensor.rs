//! What watch holds of the tensors it watches is no copy of each one's statistics and no list of each one's
//! events (#18: memory must not grow with the tensor count by tables of watch's own): the bytes held are
//! counted by this test binary's own allocator (`alloc_count`).

mod support;

use accutrace_formats::capture::Io;
use accutrace_formats::DType;
use analyzer::filter::Filter;
use analyzer::watch::{defaults, watch, WatchOptions};
use support::RunWriter;

/// Process-wide: the checks run on other threads (this binary has one test).
#[global_allocator]
static ALLOCATOR: alloc_count::Process = alloc_count::Process;

#[test]
fn watched_tensors_are_checked_without_a_table_of_their_own() {
    const OPS: u64 = 5_000;
    let dir = tempfile::tempdir().unwrap();
    let mut run = RunWriter::create(&dir.path().join("run"), 1 << 24);
    for k in 0..OPS {
        run.op(k, "Add");
        for (n, (io, index)) in [(Io::Input, 0), (Io::Input, 1), (Io::Output, 0)].into_iter().enumerate() {
            run.tensor(io, index, DType::FLOAT, &((3 * k + n as u64) as f32 + 1.0).to_le_bytes());
        }
    }
    let source = analyzer::sources::open(&run.finish()).unwrap();
    let options = WatchOptions {
        filter: Filter::default(),
        conditions: defaults(),
        read_tensors: true,
        progress: false,
    };
    let (report, peak) = alloc_count::Process::peak_while(|| watch(&*source, &options));
    let l = &report.labels;
    let watched = (l.weights + l.gradients + l.activations + l.optimizer_state + l.leaves) as usize;
    assert!(watched >= 3 * OPS as usize / 2, "{:?}", report.labels);
    assert!(report.input_problems.is_empty());
    // The labels (`Roles`), the list of watched tensors and a window of 1,024 tensors' events: 47 bytes a
    // watched tensor (128 with windows of 4,096). With a copy of every tensor's statistics in a map, and
    // every tensor's events in lists, 777.
    assert!(peak / watched <= 100, "{peak} bytes held for {watched} watched tensors");
}
