//! The counts are right: a vector held while `f` runs is counted, and one freed inside `f` still made the
//! peak.

#[global_allocator]
static ALLOCATOR: alloc_count::PerThread = alloc_count::PerThread;

#[test]
fn a_thread_peak_counts_what_was_held_at_most() {
    let (kept, peak) = alloc_count::PerThread::peak_while(|| {
        let freed = vec![0u8; 1 << 20];
        drop(freed);
        vec![1u8; 1 << 10]
    });
    assert_eq!(kept.len(), 1 << 10);
    assert!((1 << 20..(1 << 20) + 4096).contains(&peak), "{peak}");
    // Another thread's allocations are its own.
    let (_, peak) = alloc_count::PerThread::peak_while(|| std::thread::spawn(|| vec![0u8; 1 << 20]).join());
    assert!(peak < 1 << 16, "{peak}");
}
