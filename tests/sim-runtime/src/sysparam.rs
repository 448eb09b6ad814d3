//! Context options (`aclrtCtxSetSysParamOpt` / `aclrtCtxGetSysParamOpt`): the deterministic-computation
//! switch a framework turns on for reproducible runs (torch_npu's `torch.use_deterministic_algorithms`).
//!
//! The simulated device has one context; like the overflow mode, the options return to their defaults
//! (all 0) at `aclInit` and `aclrtResetDevice`.

use ascend_sys::{aclError, aclSysParamOpt, ACL_ERROR_INVALID_PARAM, ACL_OPT_DETERMINISTIC};
use ascend_sys::{ACL_OPT_ENABLE_DEBUG_KERNEL, ACL_SUCCESS};
use std::sync::atomic::{AtomicI64, Ordering};

static DETERMINISTIC: AtomicI64 = AtomicI64::new(0);
static DEBUG_KERNEL: AtomicI64 = AtomicI64::new(0);

fn option(opt: aclSysParamOpt) -> Option<&'static AtomicI64> {
    match opt {
        ACL_OPT_DETERMINISTIC => Some(&DETERMINISTIC),
        ACL_OPT_ENABLE_DEBUG_KERNEL => Some(&DEBUG_KERNEL),
        _ => None,
    }
}

/// Every option back to its default.
pub fn reset() {
    DETERMINISTIC.store(0, Ordering::SeqCst);
    DEBUG_KERNEL.store(0, Ordering::SeqCst);
}

/// Whether deterministic computation is on (what the model's kernels consult).
pub fn deterministic() -> bool {
    DETERMINISTIC.load(Ordering::SeqCst) != 0
}

pub fn set(opt: aclSysParamOpt, value: i64) -> aclError {
    // The real runtime takes 0 to 3 for the deterministic option (1 deterministic, 2 strong consistency,
    // 3 batch consistency) and 0 or 1 for the others (hicann/runtime src/runtime/api/impl/api_error.cc).
    let max = if opt == ACL_OPT_DETERMINISTIC { 3 } else { 1 };
    match option(opt) {
        Some(o) if (0..=max).contains(&value) => {
            o.store(value, Ordering::SeqCst);
            ACL_SUCCESS
        }
        _ => ACL_ERROR_INVALID_PARAM,
    }
}

pub fn get(opt: aclSysParamOpt) -> Result<i64, aclError> {
    option(opt).map(|o| o.load(Ordering::SeqCst)).ok_or(ACL_ERROR_INVALID_PARAM)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_take_their_levels_and_unknown_ones_are_refused() {
        reset();
        assert!(!deterministic());
        assert_eq!(set(ACL_OPT_DETERMINISTIC, 1), ACL_SUCCESS);
        assert!(deterministic());
        assert_eq!(get(ACL_OPT_DETERMINISTIC), Ok(1));
        assert_eq!(set(ACL_OPT_DETERMINISTIC, 3), ACL_SUCCESS);
        assert_eq!(get(ACL_OPT_DETERMINISTIC), Ok(3));
        assert_eq!(set(ACL_OPT_DETERMINISTIC, 4), ACL_ERROR_INVALID_PARAM);
        assert_eq!(set(ACL_OPT_ENABLE_DEBUG_KERNEL, 2), ACL_ERROR_INVALID_PARAM);
        assert_eq!(set(7, 1), ACL_ERROR_INVALID_PARAM);
        assert_eq!(get(7), Err(ACL_ERROR_INVALID_PARAM));
        reset();
        assert_eq!(get(ACL_OPT_DETERMINISTIC), Ok(0));
    }
}
