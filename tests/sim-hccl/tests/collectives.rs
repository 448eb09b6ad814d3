//! The stand-in's collectives through its C entry points, one thread per rank (the transport is the same
//! between threads as between processes: files in the communicator's directory). `sim-train --ranks`
//! tests the multi-process path.

use ascend_sys::hccl::*;
use hccl::abi::*;
use std::ffi::c_void;

const RANKS: u32 = 4;

/// Runs `body(rank, comm)` on `ranks` threads joined to one fresh communicator; returns each rank's result.
fn on_ranks<T: Send + 'static>(ranks: u32, body: fn(u32, HcclComm) -> T) -> Vec<T> {
    let mut info = HcclRootInfo { internal: [0; 4108] };
    // SAFETY: `info` is a writable HcclRootInfo.
    assert_eq!(unsafe { HcclGetRootInfo(&mut info) }, HCCL_SUCCESS);
    let threads: Vec<_> = (0..ranks)
        .map(|rank| {
            std::thread::spawn(move || {
                let mut comm: HcclComm = std::ptr::null_mut();
                // SAFETY: `info` is a readable root info, `comm` a writable handle.
                assert_eq!(unsafe { HcclCommInitRootInfo(ranks, &info, rank, &mut comm) }, HCCL_SUCCESS);
                let out = body(rank, comm);
                assert_eq!(HcclCommDestroy(comm), HCCL_SUCCESS);
                out
            })
        })
        .collect();
    threads.into_iter().map(|t| t.join().expect("rank thread")).collect()
}

fn ptr(v: &mut [f32]) -> *mut c_void {
    v.as_mut_ptr().cast()
}

#[test]
fn all_reduce_gives_every_rank_the_same_reduction() {
    let results = on_ranks(RANKS, |rank, comm| {
        let r = rank as f32;
        let mut sum = vec![r, 10.0 * r, -r, 0.5];
        let mut max = vec![r, -r, f32::NAN * (rank == 3) as u8 as f32, 1.0];
        let mut ints: Vec<i32> = vec![rank as i32, i32::MAX];
        // SAFETY: each buffer holds `count` elements of its type; in-place (send == recv) is allowed.
        unsafe {
            assert_eq!(
                HcclAllReduce(
                    ptr(&mut sum),
                    ptr(&mut sum),
                    4,
                    HCCL_DATA_TYPE_FP32,
                    HCCL_REDUCE_SUM,
                    comm,
                    std::ptr::null_mut()
                ),
                0
            );
            assert_eq!(
                HcclAllReduce(
                    ptr(&mut max),
                    ptr(&mut max),
                    4,
                    HCCL_DATA_TYPE_FP32,
                    HCCL_REDUCE_MAX,
                    comm,
                    std::ptr::null_mut()
                ),
                0
            );
            let p = ints.as_mut_ptr().cast();
            assert_eq!(
                HcclAllReduce(p, p, 2, HCCL_DATA_TYPE_INT32, HCCL_REDUCE_SUM, comm, std::ptr::null_mut()),
                0
            );
        }
        (sum, max, ints)
    });
    for (sum, max, ints) in &results {
        assert_eq!(sum, &[6.0, 60.0, -6.0, 2.0]);
        assert_eq!(max[..2], [3.0, 0.0]);
        assert!(max[2].is_nan(), "a NaN on one rank reaches every rank");
        assert_eq!(ints, &[6, i32::MAX.wrapping_mul(4)]);
    }
}

#[test]
fn broadcast_gather_scatter_and_point_to_point_move_the_right_parts() {
    let results = on_ranks(RANKS, |rank, comm| {
        let null = std::ptr::null_mut();
        let r = rank as f32;
        let mut bcast = vec![r; 3];
        let mut mine = vec![r, r + 0.5];
        let mut gathered = vec![0f32; 2 * RANKS as usize];
        // Part i of rank r's send buffer is (r, i): after the sum, rank i holds sum over r of (r + 100 i).
        let mut parts: Vec<f32> = (0..RANKS).flat_map(|i| [r + 100.0 * i as f32, 1.0]).collect();
        let mut scattered = vec![0f32; 2];
        let mut received = vec![0f32; 2];
        let (next, prev) = ((rank + 1) % RANKS, (rank + RANKS - 1) % RANKS);
        // SAFETY: every buffer holds the element count passed with it.
        unsafe {
            assert_eq!(HcclBroadcast(ptr(&mut bcast), 3, HCCL_DATA_TYPE_FP32, 2, comm, null), 0);
            assert_eq!(
                HcclAllGather(ptr(&mut mine), ptr(&mut gathered), 2, HCCL_DATA_TYPE_FP32, comm, null),
                0
            );
            assert_eq!(
                HcclReduceScatter(
                    ptr(&mut parts),
                    ptr(&mut scattered),
                    2,
                    HCCL_DATA_TYPE_FP32,
                    HCCL_REDUCE_SUM,
                    comm,
                    null
                ),
                0
            );
            assert_eq!(HcclSend(ptr(&mut mine), 2, HCCL_DATA_TYPE_FP32, next, comm, null), 0);
            assert_eq!(HcclRecv(ptr(&mut received), 2, HCCL_DATA_TYPE_FP32, prev, comm, null), 0);
            assert_eq!(HcclBarrier(comm, null), 0);
        }
        (rank, bcast, gathered, scattered, received)
    });
    for (rank, bcast, gathered, scattered, received) in results {
        assert_eq!(bcast, [2.0; 3]);
        assert_eq!(gathered, [0.0, 0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5]);
        assert_eq!(scattered, [6.0 + 400.0 * rank as f32, 4.0]);
        let prev = ((rank + RANKS - 1) % RANKS) as f32;
        assert_eq!(received, [prev, prev + 0.5]);
    }
}

#[test]
fn members_agree_on_the_communicator() {
    let results = on_ranks(3, |rank, comm| {
        let (mut size, mut id) = (0u32, 0u32);
        let mut name = [0 as std::ffi::c_char; COMM_NAME_MAX_LENGTH as usize];
        // SAFETY: writable outputs of the sizes the calls document.
        unsafe {
            assert_eq!(HcclGetRankSize(comm, &mut size), 0);
            assert_eq!(HcclGetRankId(comm, &mut id), 0);
            assert_eq!(HcclGetCommName(comm, name.as_mut_ptr()), 0);
            assert_eq!(id, rank);
            std::ffi::CStr::from_ptr(name.as_ptr()).to_string_lossy().into_owned()
        }
        .to_string()
            + &format!(" {size}")
    });
    assert!(results[0].starts_with("sim-hccl-") && results[0].ends_with(" 3"), "{}", results[0]);
    assert!(results.iter().all(|n| n == &results[0]), "{results:?}");
}

#[test]
fn a_reversed_reduction_differs_on_that_rank_only() {
    let results = on_ranks(RANKS, |rank, comm| {
        // Folded in rank order: 1e8 - 1e8 + 1 + 1 = 2; reversed: 1 + 1 - 1e8 rounds to -1e8, + 1e8 = 0.
        let mut v = vec![[1e8f32, -1e8, 1.0, 1.0][rank as usize]];
        if rank == 1 {
            // SAFETY: a NUL-terminated fault name.
            assert_eq!(unsafe { simHcclInjectFault(comm, c"reverse_reduction_order".as_ptr()) }, 0);
        }
        // SAFETY: one fp32 element.
        let code = unsafe {
            HcclAllReduce(
                ptr(&mut v),
                ptr(&mut v),
                1,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                comm,
                std::ptr::null_mut(),
            )
        };
        assert_eq!(code, 0);
        v[0]
    });
    assert_eq!(results, [2.0, 0.0, 2.0, 2.0]);
}

#[test]
fn mismatched_calls_fail_on_every_member_instead_of_mixing_buffers() {
    let results = on_ranks(2, |rank, comm| {
        let mut v = vec![1f32; 5];
        let count = 4 + u64::from(rank);
        // SAFETY: `v` holds 5 elements, at least `count`.
        unsafe {
            HcclAllReduce(
                ptr(&mut v),
                ptr(&mut v),
                count,
                HCCL_DATA_TYPE_FP32,
                HCCL_REDUCE_SUM,
                comm,
                std::ptr::null_mut(),
            )
        }
    });
    assert_eq!(results, [HCCL_E_PARA, HCCL_E_PARA]);
}

#[test]
fn bad_arguments_are_refused() {
    let results = on_ranks(2, |rank, comm| {
        let null = std::ptr::null_mut();
        let mut v = vec![0f32; 2];
        // SAFETY: the buffers hold the counts passed; the bad arguments are the point.
        unsafe {
            [
                HcclSend(ptr(&mut v), 2, HCCL_DATA_TYPE_FP32, rank, comm, null),
                HcclSend(ptr(&mut v), 2, HCCL_DATA_TYPE_FP32, 7, comm, null),
                HcclAllReduce(ptr(&mut v), ptr(&mut v), 2, 15, HCCL_REDUCE_SUM, comm, null),
                HcclAllReduce(ptr(&mut v), ptr(&mut v), 2, HCCL_DATA_TYPE_FP32, 9, comm, null),
                HcclAllReduce(null, null, 2, HCCL_DATA_TYPE_FP32, HCCL_REDUCE_SUM, comm, null),
                HcclAllReduce(
                    ptr(&mut v),
                    ptr(&mut v),
                    u64::MAX,
                    HCCL_DATA_TYPE_FP32,
                    HCCL_REDUCE_SUM,
                    comm,
                    null,
                ),
            ]
        }
    });
    for codes in results {
        assert_eq!(
            codes,
            [HCCL_E_PARA, HCCL_E_PARA, HCCL_E_NOT_SUPPORT, HCCL_E_NOT_SUPPORT, HCCL_E_PARA, HCCL_E_PARA]
        );
    }
}
