//! The engine under every conversion: a device layout described as offset tables per host axis.
//!
//! Every format handled here places host element (i0, i1, ...) at a device offset that is a sum of one
//! term per host axis: for NC1HWC0, `n*s_N + (c/C0)*s_C1 + (c%C0)*s_C0 + h*s_H + w*s_W`. Precomputing each
//! term in a table (one entry per host index along that axis) makes both directions a walk over the host
//! tensor in row-major order that adds a handful of table entries per element. The one non-separable
//! layout (grouped FRACTAL_Z, where the group of `n` moves `c`) merges the N and C axes into one table.

use crate::{FormatError, Result};
use std::borrow::Cow;

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
    let Some((last, mut outer)) = tables.split_last() else {
        return f(0);
    };
    // A short innermost table (trailing axes of 1, as in an (N, C, 1, 1) tensor in NC1HWC0) makes the
    // recursion run once per handful of elements. Folded into the table outside it, entry `a + b` for each
    // `a` there and then each `b` here, it gives the same offsets in the same order from one longer loop.
    // The sums are offsets the unfolded walk visits, so they cannot overflow ([`Plan::tables`] checked them).
    let mut folded = Cow::Borrowed(last.as_slice());
    while let Some((next, rest)) = outer.split_last() {
        if folded.len() >= FOLD_BELOW || next.len().saturating_mul(folded.len()) > FOLDED_MAX {
            break;
        }
        folded = Cow::Owned(next.iter().flat_map(|&a| folded.iter().map(move |&b| a + b)).collect());
        outer = rest;
    }
    rec(outer, 0, &folded, &mut f)
}

/// [`walk`] folds innermost tables shorter than this into the one outside them...
const FOLD_BELOW: usize = 64;
/// ...while the folded table stays at most this long.
const FOLDED_MAX: usize = 4096;

#[cfg(test)]
mod tests {
    use super::*;

    /// The offsets of `tables` in the order the unfolded definition visits them: row-major over the
    /// tables, one sum per combination of entries.
    fn reference(tables: &[Vec<usize>]) -> Vec<usize> {
        let mut offsets = vec![0];
        for table in tables {
            offsets = offsets.iter().flat_map(|&base| table.iter().map(move |&t| base + t)).collect();
        }
        offsets
    }

    /// Tables of every length from 0 to past the folding bounds, in every position (short innermost tables
    /// folded into one, several or none of the outer ones; an outer table too long to fold into; at most
    /// 50,000 offsets per walk): the walk visits the definition's offsets in its order.
    #[test]
    fn folded_walks_visit_the_same_offsets_in_the_same_order() {
        let lens = [0, 1, 2, 3, 15, 16, 63, 64, 65, 300, FOLDED_MAX + 1];
        let mut shapes: Vec<Vec<usize>> = vec![vec![]];
        for &a in &lens {
            shapes.push(vec![a]);
            for &b in &lens {
                shapes.push(vec![a, b]);
                for &c in &[0, 1, 2, 17, 64] {
                    shapes.push(vec![a, b, c]);
                    shapes.push(vec![c, a, b]);
                    shapes.push(vec![3, c, 1, b.min(70)]);
                }
            }
        }
        let mut folded_somewhere = 0;
        for shape in shapes.iter().filter(|s| s.iter().product::<usize>() <= 50_000) {
            // Distinct strides per table, so that a swapped order or a lost entry shows.
            let mut stride = 1;
            let tables: Vec<Vec<usize>> = shape
                .iter()
                .rev()
                .map(|&len| {
                    let t: Vec<usize> = (0..len).map(|i| i * stride + i % 3).collect();
                    stride *= len.max(1) * 4;
                    t
                })
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            let mut got = Vec::new();
            walk(&tables, |o| got.push(o));
            assert_eq!(got, reference(&tables), "{shape:?}");
            folded_somewhere += usize::from(
                shape.len() > 1
                    && shape.last().is_some_and(|&l| l < FOLD_BELOW)
                    && shape[shape.len() - 2] > 0,
            );
        }
        assert!(folded_somewhere > 100);
    }
}
