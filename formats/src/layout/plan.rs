//! The engine under every conversion: a device layout described as offset tables per host axis.
//!
//! Every format handled here places host element (i0, i1, ...) at a device offset that is a sum of one
//! term per host axis: for NC1HWC0, `n*s_N + (c/C0)*s_C1 + (c%C0)*s_C0 + h*s_H + w*s_W`. Precomputing each
//! term in a table (one entry per host index along that axis) makes both directions a walk over the host
//! tensor in row-major order that adds a handful of table entries per element. The one non-separable
//! layout (grouped FRACTAL_Z, where the group of `n` moves `c`) merges the N and C axes into one table.

use crate::{FormatError, Result};

/// How one host axis maps to device offsets: `(i / block) * stride(hi) + (i % block) * sum(stride(lo))`.
#[derive(Clone, Debug)]
pub(crate) struct Axis {
    pub len: u64,
    pub hi: usize,
    pub lo: Vec<usize>,
    pub block: u64,
}

impl Axis {
    /// A host axis that is one device axis.
    pub fn plain(len: u64, device_axis: usize) -> Axis {
        Axis { len, hi: device_axis, lo: Vec::new(), block: 1 }
    }

    /// A host axis padded to `block` and split into (outer, inner) device axes: C -> (C1, C0).
    pub fn split(len: u64, outer: usize, inner: usize, block: u64) -> Axis {
        Axis { len, hi: outer, lo: vec![inner], block }
    }
}

/// Host axes (N, C) merged into one table whose entry for `n * C + c` is computed by a closure.
pub(crate) struct Merged {
    pub len: u64,
    pub offset: Box<dyn Fn(u64) -> u64>,
}

/// A layout: the logical device axes, the shape CANN reports, and the host axes' mapping.
pub(crate) struct Plan {
    /// Logical device axis sizes, row-major (e.g. FRACTAL_Z: C1, H, W, N1, 16, C0).
    pub device_axes: Vec<u64>,
    /// The device shape as dumps report it (FRACTAL_Z: C1*H*W, N1, 16, C0).
    pub device_shape: Vec<u64>,
    /// The leading host axes merged into one table, if the layout is not separable there.
    pub merged: Option<Merged>,
    /// The remaining host axes, in host order.
    pub axes: Vec<Axis>,
}

/// Product of `dims`, or an error naming what overflowed.
pub(crate) fn checked_product(dims: &[u64], what: &str) -> Result<u64> {
    crate::tensor::element_count(dims)
        .ok_or_else(|| FormatError::at(0, format!("{what} {dims:?} has more than 2^64 elements")))
}

/// `ceil(a / b) * b`, checked.
pub(crate) fn round_up(a: u64, b: u64) -> Result<u64> {
    a.div_ceil(b)
        .checked_mul(b)
        .ok_or_else(|| FormatError::at(0, format!("padding {a} to a multiple of {b} overflows")))
}

impl Plan {
    /// Number of device elements (padding included).
    pub fn device_len(&self) -> Result<u64> {
        checked_product(&self.device_axes, "device shape")
    }

    /// Builds the offset tables. Call only after checking the element counts against real buffers: table
    /// sizes are host dims, bounded by the host element count (which must be non-zero here).
    pub fn tables(&self) -> Result<Vec<Vec<usize>>> {
        let device_len = self.device_len()?;
        let mut strides = vec![0u64; self.device_axes.len()];
        let mut stride = 1u64;
        for (s, &size) in strides.iter_mut().zip(&self.device_axes).rev() {
            *s = stride;
            // Cannot overflow: the full product (device_len) was checked.
            stride *= size;
        }
        let mut tables = Vec::with_capacity(self.axes.len() + 1);
        let mut max_offset = 0u64;
        if let Some(merged) = &self.merged {
            let table: Vec<u64> = (0..merged.len).map(|i| (merged.offset)(i)).collect();
            max_offset = max_offset.saturating_add(table.iter().copied().max().unwrap_or(0));
            tables.push(table);
        }
        for axis in &self.axes {
            let lo_stride: u64 = axis.lo.iter().map(|&a| strides[a]).sum();
            let table: Vec<u64> = (0..axis.len)
                .map(|i| {
                    let outer = (i / axis.block).saturating_mul(strides[axis.hi]);
                    outer.saturating_add((i % axis.block).saturating_mul(lo_stride))
                })
                .collect();
            max_offset = max_offset.saturating_add(table.iter().copied().max().unwrap_or(0));
            tables.push(table);
        }
        // Guards the walks' indexing: a layout bug becomes an error, never an out-of-bounds panic.
        if max_offset >= device_len.max(1) {
            return Err(FormatError::at(
                0,
                format!("layout maps past the device buffer ({max_offset} >= {device_len})"),
            ));
        }
        let to_usize = |t: Vec<u64>| t.into_iter().map(|x| x as usize).collect();
        Ok(tables.into_iter().map(to_usize).collect())
    }
}

/// Calls `f` with the device offset of every host element, in host row-major order.
pub(crate) fn walk(tables: &[Vec<usize>], mut f: impl FnMut(usize)) {
    fn rec(outer: &[Vec<usize>], base: usize, last: &[usize], f: &mut impl FnMut(usize)) {
        match outer.split_first() {
            None => last.iter().for_each(|&t| f(base + t)),
            Some((first, rest)) => first.iter().for_each(|&t| rec(rest, base + t, last, f)),
        }
    }
    match tables.split_last() {
        None => f(0),
        Some((last, outer)) => rec(outer, 0, last, &mut f),
    }
}
