//! Device-to-host conversion from device order: the same mapping as [`to_host_into`](super::to_host_into)'s
//! walk over the host tensor, taken the other way round, as runs of device elements in device order, each
//! landing on host elements a fixed step apart. A reader that decodes the device values once, in order (a
//! capture tensor read block by block), puts each run where it goes, and never holds the device-order
//! values whole beside the host ones.

use super::plan::{Axis, Plan};

/// What one device axis is to the host: part of which host axis, and how.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Role {
    /// No host axis (a device axis of size 1).
    None,
    /// The whole of host axis `axis`.
    Plain { axis: usize },
    /// The blocks of host axis `axis` (index `i / block`).
    Outer { axis: usize, block: u64 },
    /// The position within a block of host axis `axis` (index `i % block`).
    Inner { axis: usize, block: u64 },
}

/// A separable device layout walked in device order ([`device_runs`](super::device_runs)).
#[derive(Clone, Debug)]
pub struct DeviceRuns {
    /// Per device axis (row-major): its size, its role, and the host offset one step along it moves.
    axes: Vec<(u64, Role, u64)>,
    /// Per host axis: its length.
    host_lens: Vec<u64>,
    device_len: u64,
    host_len: u64,
}

impl DeviceRuns {
    /// The layout of `plan` in device order, where every device axis of more than one element is one part
    /// of one host axis (every format but grouped FRACTAL_Z and C1HWNCoC0's diagonal); `None` otherwise.
    pub(super) fn of(plan: &Plan, device_len: u64, host_len: u64) -> Option<DeviceRuns> {
        if plan.merged.is_some() {
            return None;
        }
        let host_lens: Vec<u64> = plan.axes.iter().map(|a| a.len).collect();
        // Host strides, row-major.
        let mut strides = vec![0u64; plan.axes.len()];
        let mut stride = 1u64;
        for (s, a) in strides.iter_mut().zip(&plan.axes).rev() {
            *s = stride;
            stride = stride.checked_mul(a.len)?;
        }
        let mut roles = vec![Role::None; plan.device_axes.len()];
        let mut claim = |device_axis: usize, role: Role| -> Option<()> {
            let slot = roles.get_mut(device_axis)?;
            (*slot == Role::None).then(|| *slot = role)
        };
        for (axis, Axis { hi, lo, block, .. }) in plan.axes.iter().enumerate() {
            match lo.as_slice() {
                [] if *block == 1 => claim(*hi, Role::Plain { axis })?,
                [inner] => {
                    claim(*hi, Role::Outer { axis, block: *block })?;
                    claim(*inner, Role::Inner { axis, block: *block })?;
                }
                _ => return None,
            }
        }
        let mut axes = Vec::with_capacity(roles.len());
        for (&size, role) in plan.device_axes.iter().zip(roles) {
            let step = match role {
                Role::None if size > 1 => return None,
                Role::None => 0,
                Role::Plain { axis } | Role::Inner { axis, .. } => strides[axis],
                Role::Outer { axis, block } => strides[axis].checked_mul(block)?,
            };
            axes.push((size, role, step));
        }
        Some(DeviceRuns { axes, host_lens, device_len, host_len })
    }

    /// Device elements in all, padding included.
    pub fn device_len(&self) -> u64 {
        self.device_len
    }

    /// Host elements in all.
    pub fn host_len(&self) -> u64 {
        self.host_len
    }

    /// Calls `f(device_start, host_start, host_step, len)` for every run of device elements that are host
    /// elements, in device order: device elements `device_start..device_start + len` are host elements
    /// `host_start`, `host_start + host_step`, ... The device elements between runs are padding. Stops, and
    /// returns `false`, where `f` does.
    pub fn for_each(&self, mut f: impl FnMut(u64, u64, u64, u64) -> bool) -> bool {
        let mut parts = vec![(None, None); self.host_lens.len()];
        self.walk(0, 0, 0, &mut parts, &mut f)
    }

    /// The runs under device axis `level` on, from device offset `device` and host offset `host`, with the
    /// outer and inner indices of split host axes fixed so far in `parts`.
    fn walk(
        &self,
        level: usize,
        device: u64,
        host: u64,
        parts: &mut [(Option<u64>, Option<u64>)],
        f: &mut impl FnMut(u64, u64, u64, u64) -> bool,
    ) -> bool {
        let (size, role, step) = self.axes[level];
        if level + 1 == self.axes.len() {
            let len = match role {
                Role::None => size,
                Role::Plain { axis } => size.min(self.host_lens[axis]),
                Role::Inner { axis, block } => match parts[axis].0 {
                    Some(outer) => self.host_lens[axis].saturating_sub(outer * block).min(block).min(size),
                    None => return true,
                },
                Role::Outer { axis, block } => match parts[axis].1 {
                    Some(inner) => self.host_lens[axis].saturating_sub(inner).div_ceil(block).min(size),
                    None => return true,
                },
            };
            return len == 0 || f(device, host, step, len);
        }
        let below: u64 = self.axes[level + 1..].iter().map(|a| a.0).product();
        for i in 0..size {
            let valid = match role {
                Role::None => true,
                Role::Plain { axis } => i < self.host_lens[axis],
                Role::Outer { axis, block } => {
                    parts[axis].0 = Some(i);
                    parts[axis].1.is_none_or(|inner| i * block + inner < self.host_lens[axis])
                }
                Role::Inner { axis, block } => {
                    parts[axis].1 = Some(i);
                    parts[axis].0.is_none_or(|outer| outer * block + i < self.host_lens[axis])
                }
            };
            if valid && !self.walk(level + 1, device + i * below, host + i * step, parts, f) {
                return false;
            }
        }
        // This level's part is unknown again to the levels above it.
        match role {
            Role::Outer { axis, .. } => parts[axis].0 = None,
            Role::Inner { axis, .. } => parts[axis].1 = None,
            _ => {}
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::super::{device_runs, device_shape, to_host, Format};
    use crate::DType;

    /// Every separable format, host shapes with and without padding (odd channels, rows and columns, size-1
    /// axes, 1-D and batched ND), fp16 and int8 blocks: the runs, in device order and apart, put every device
    /// value where `to_host` puts it, and cover every host element once. The non-separable layouts (grouped
    /// FRACTAL_Z, C1HWNCoC0's diagonal) give no runs.
    #[test]
    fn runs_put_every_device_value_where_to_host_puts_it() {
        let four = [[2, 17, 3, 5], [1, 1, 1, 1], [3, 32, 2, 2], [5, 3, 1, 7], [17, 40, 1, 1]];
        let five = [[2, 17, 2, 3, 4], [1, 33, 1, 2, 1], [3, 5, 2, 1, 2]];
        let nd: [&[u64]; 6] = [&[33, 17], &[2, 3, 16, 16], &[5], &[1, 40], &[2, 31, 65], &[48, 32]];
        let mut cases: Vec<(Format, Vec<u64>, i32)> = Vec::new();
        for format in [Format::NC1HWC0, Format::NC1HWC0_C04, Format::FRACTAL_Z, Format::HWCN, Format::NHWC] {
            cases.extend(four.iter().map(|s| (format, s.to_vec(), 1)));
        }
        for format in [Format::NDC1HWC0, Format::FRACTAL_Z_3D, Format::NDHWC, Format::DHWCN] {
            cases.extend(five.iter().map(|s| (format, s.to_vec(), 1)));
        }
        cases.extend(nd.iter().map(|s| (Format::FRACTAL_NZ, s.to_vec(), 1)));
        let (mut with_runs, mut without) = (0, 0);
        for dtype in [DType::FLOAT16, DType::INT8] {
            for (format, host, groups) in cases
                .iter()
                .cloned()
                .chain([(Format::C1HWNCOC0, vec![3, 2, 17, 2], 1), (Format::FRACTAL_Z, vec![4, 6, 3, 3], 2)])
            {
                let device_shape = device_shape(format, &host, dtype, groups).unwrap();
                let n: u64 = device_shape.iter().product();
                let device: Vec<u32> = (0..n as u32).collect();
                let expected = to_host(format, &device, &device_shape, &host, dtype, groups).unwrap();
                let Some(runs) = device_runs(format, &device_shape, &host, dtype, groups).unwrap() else {
                    without += 1;
                    continue;
                };
                assert_eq!((runs.device_len(), runs.host_len()), (n, expected.len() as u64));
                let mut got = vec![u32::MAX; expected.len()];
                let mut next = 0;
                runs.for_each(|d, h, step, len| {
                    assert!(d >= next && len > 0, "{format} {host:?}: run at {d} after {next}");
                    next = d + len;
                    for k in 0..len {
                        let at = (h + k * step) as usize;
                        assert_eq!(got[at], u32::MAX, "{format} {host:?}: host {at} twice");
                        got[at] = device[(d + k) as usize];
                    }
                    true
                });
                assert!(got == expected, "{format} {host:?} {dtype}");
                with_runs += 1;
            }
        }
        assert_eq!((with_runs, without), (2 * cases.len(), 4));
    }

    /// `for_each` stops where the callback says so.
    #[test]
    fn a_walk_stops_when_told() {
        let (host, dtype) = ([2u64, 17, 3, 5], DType::FLOAT16);
        let shape = device_shape(Format::NC1HWC0, &host, dtype, 1).unwrap();
        let runs = device_runs(Format::NC1HWC0, &shape, &host, dtype, 1).unwrap().unwrap();
        let mut calls = 0;
        assert!(!runs.for_each(|_, _, _, _| {
            calls += 1;
            calls < 3
        }));
        assert_eq!(calls, 3);
    }
}
