//! Device formats (NC1HWC0, FRACTAL_Z, FRACTAL_NZ, ...) to and from the host layout.
//!
//! Conversions work on decoded values of any `Copy` type (f32 lanes, f64, or `[f32; 2]` for complex), so
//! one implementation serves every dtype; the dtype only picks the cube block C0 (docs/CANN.md §2: 16 for
//! 16/32-bit types, 32 for 8-bit, 64 for 4-bit; NC1HWC0_C04 uses 4). Device buffers are padded and the
//! padding is not guaranteed to be zero, so [`to_host`] always crops to the host shape.
//!
//! `host_shape` is the `original_shape` of the dump in the host layout the format converts to (see
//! [`plans`] for the table: NCHW, NCDHW, ND, or HWCN for C1HWNCoC0).

mod format;
mod plan;
pub mod plans;
mod runs;

pub use format::Format;
pub use runs::DeviceRuns;

use crate::{DType, FormatError, Result};
use plan::{checked_product, walk, Plan};

/// A host dim at or above this is a dynamic-shape marker (CANN writes -1 / -2 as u64), not a size.
const DYNAMIC_DIM: u64 = 1 << 48;

/// Whether `host_shape` can drive a conversion: present and without dynamic-dimension markers.
pub fn host_shape_is_usable(host_shape: &[u64]) -> bool {
    !host_shape.is_empty() && host_shape.iter().all(|&d| d < DYNAMIC_DIM)
}

fn to_usize(n: u64, what: &str) -> Result<usize> {
    usize::try_from(n)
        .map_err(|_| FormatError::at(0, format!("{what} of {n} elements exceeds the address space")))
}

/// Drops size-1 dims: shapes that differ only by them describe the same bytes.
fn squeezed(shape: &[u64]) -> Vec<u64> {
    shape.iter().copied().filter(|&d| d != 1).collect()
}

/// Checks a dump's device shape against what the host shape implies. Leniency: size-1 dims are ignored and
/// the folded (reported) or unfolded (logical) form of blocked formats both match. A host shape given in
/// the wrong order (HWCN instead of NCHW) usually fails here rather than decoding to plausible garbage.
fn check_device_shape(format: Format, plan: &Plan, device_shape: &[u64], host_shape: &[u64]) -> Result<()> {
    let given = squeezed(device_shape);
    if given == squeezed(&plan.device_shape) || given == squeezed(&plan.device_axes) {
        return Ok(());
    }
    Err(FormatError::at(
        0,
        format!(
            "{format} device shape {device_shape:?} does not fit host shape {host_shape:?} (expected {:?})",
            plan.device_shape
        ),
    ))
}

/// The device shape `format` gives a host tensor of `host_shape` (as dumps report it).
pub fn device_shape(format: Format, host_shape: &[u64], dtype: DType, groups: i32) -> Result<Vec<u64>> {
    if format.is_identity() {
        return Ok(host_shape.to_vec());
    }
    Ok(plans::plan(format, host_shape, dtype, groups)?.device_shape)
}

/// Device values to the host layout, cropped to `host_shape`. See [`to_host_with_shape`].
pub fn to_host<T: Copy>(
    format: Format,
    device: &[T],
    device_shape: &[u64],
    host_shape: &[u64],
    dtype: DType,
    groups: i32,
) -> Result<Vec<T>> {
    Ok(to_host_with_shape(format, device, device_shape, host_shape, dtype, groups)?.0)
}

/// Device values to the host layout, and the shape they have there.
///
/// When the host shape is missing or dynamic ([`host_shape_is_usable`] is false), the device values come
/// back unchanged with the device shape: nothing can be cropped, and guessing would be worse. `groups` is the
/// dump's `sub_format` (grouped FRACTAL_Z when > 1).
pub fn to_host_with_shape<T: Copy>(
    format: Format,
    device: &[T],
    device_shape: &[u64],
    host_shape: &[u64],
    dtype: DType,
    groups: i32,
) -> Result<(Vec<T>, Vec<u64>)> {
    let mut out = Vec::new();
    let shape = to_host_into(format, device, 1, device_shape, host_shape, dtype, groups, &mut out)?;
    Ok((out, shape))
}

/// [`to_host_with_shape`] into `out`, whose old contents are dropped and whose memory is reused (a caller
/// that converts tensor after tensor allocates nothing once `out` is as large as the largest), for elements
/// of `lanes` values each, stored one after the other (complex values as (re, im): 2): `device` holds
/// `lanes` values per device element and `out` gets `lanes` per host element. Returns the host shape; the
/// errors are [`to_host_with_shape`]'s (`out` is then empty).
#[allow(clippy::too_many_arguments)]
pub fn to_host_into<T: Copy>(
    format: Format,
    device: &[T],
    lanes: usize,
    device_shape: &[u64],
    host_shape: &[u64],
    dtype: DType,
    groups: i32,
    out: &mut Vec<T>,
) -> Result<Vec<u64>> {
    out.clear();
    let lanes = lanes.max(1);
    let device_count = checked_product(device_shape, "device shape")?;
    if !device.len().is_multiple_of(lanes) || device_count != (device.len() / lanes) as u64 {
        return Err(FormatError::at(
            0,
            format!(
                "device shape {device_shape:?} has {device_count} elements, the data has {}",
                device.len() / lanes
            ),
        ));
    }
    if !host_shape_is_usable(host_shape) {
        out.extend_from_slice(device);
        return Ok(device_shape.to_vec());
    }
    let host_count = checked_product(host_shape, "host shape")?;
    if format.is_identity() {
        if host_count != device_count {
            return Err(FormatError::at(
                0,
                format!(
                    "{format}: host shape {host_shape:?} has {host_count} elements, device {device_count}"
                ),
            ));
        }
        out.extend_from_slice(device);
        return Ok(host_shape.to_vec());
    }
    let plan = checked_plan(format, device_count, device_shape, host_shape, dtype, groups)?;
    if host_count == 0 {
        return Ok(host_shape.to_vec());
    }
    // Table sizes and the output are bounded by host_count <= device_count == device.len() / lanes.
    let tables = plan.tables()?;
    out.reserve(to_usize(host_count, "host tensor")?.saturating_mul(lanes));
    if lanes == 1 {
        walk(&tables, |offset| out.push(device[offset]));
    } else {
        walk(&tables, |offset| out.extend_from_slice(&device[offset * lanes..][..lanes]));
    }
    Ok(host_shape.to_vec())
}

/// The layout of `format` for `host_shape`, checked against the device shape and its `device_count`
/// elements.
fn checked_plan(
    format: Format,
    device_count: u64,
    device_shape: &[u64],
    host_shape: &[u64],
    dtype: DType,
    groups: i32,
) -> Result<Plan> {
    let plan = plans::plan(format, host_shape, dtype, groups)?;
    check_device_shape(format, &plan, device_shape, host_shape)?;
    if plan.device_len()? != device_count {
        return Err(FormatError::at(
            0,
            format!(
                "{format}: host shape {host_shape:?} needs {} device elements, got {device_count}",
                plan.device_len()?
            ),
        ));
    }
    Ok(plan)
}

/// [`to_host_into`]'s mapping as runs in device order ([`DeviceRuns`]), for a reader that takes the device
/// values once, in order: `None` where `to_host_into` copies the values as they are (no usable host shape,
/// a format that is the host layout) or the layout does not split by device axis (grouped FRACTAL_Z,
/// C1HWNCoC0's diagonal). The errors are `to_host_into`'s for the same shapes.
pub fn device_runs(
    format: Format,
    device_shape: &[u64],
    host_shape: &[u64],
    dtype: DType,
    groups: i32,
) -> Result<Option<DeviceRuns>> {
    let device_count = checked_product(device_shape, "device shape")?;
    if !host_shape_is_usable(host_shape) || format.is_identity() {
        return Ok(None);
    }
    let host_count = checked_product(host_shape, "host shape")?;
    let plan = checked_plan(format, device_count, device_shape, host_shape, dtype, groups)?;
    Ok(DeviceRuns::of(&plan, device_count, host_count))
}

/// Host values (row-major in `host_shape`) to `format`: the device values and the device shape. Padding is
/// filled with `pad` (the simulated runtime passes garbage to prove that readers crop).
pub fn to_device<T: Copy>(
    format: Format,
    host: &[T],
    host_shape: &[u64],
    dtype: DType,
    groups: i32,
    pad: T,
) -> Result<(Vec<T>, Vec<u64>)> {
    let host_count = checked_product(host_shape, "host shape")?;
    if host_count != host.len() as u64 {
        return Err(FormatError::at(
            0,
            format!("host shape {host_shape:?} has {host_count} elements, the data has {}", host.len()),
        ));
    }
    if format.is_identity() {
        return Ok((host.to_vec(), host_shape.to_vec()));
    }
    let plan = plans::plan(format, host_shape, dtype, groups)?;
    let device_len = to_usize(plan.device_len()?, "device tensor")?;
    let mut device = vec![pad; device_len];
    if host_count > 0 {
        let tables = plan.tables()?;
        let mut next = host.iter();
        walk(&tables, |offset| {
            if let Some(&v) = next.next() {
                device[offset] = v;
            }
        });
    }
    Ok((device, plan.device_shape))
}
