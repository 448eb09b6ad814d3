//! Per-format layouts: which device axes each host axis lands on.
//!
//! Host layouts (what [`to_host`](super::to_host) returns and `host_shape` describes):
//! - NC1HWC0, NC1HWC0_C04, FRACTAL_Z, HWCN, NHWC: NCHW.
//! - NDC1HWC0, FRACTAL_Z_3D, NDHWC, DHWCN: NCDHW.
//! - FRACTAL_NZ: ND `(..., n, c)`; 1-D and 0-D host shapes are read as `(1, c)`.
//! - C1HWNCoC0: HWCN, as CANN's own C1HWNCoC0 <-> HWCN transfer defines it (depthwise weights, N being the
//!   channel multiplier). Device shape (C1, H, W, N, Co, C0) with Co = C0: element (h, w, c, n) sits on the
//!   diagonal `co == c0 == c % C0`; every off-diagonal slot is padding (zero on a real device).

use super::plan::{checked_product, round_up, Axis, Merged, Plan};
use super::Format;
use crate::{DType, FormatError, Result};

/// N0: the cube block along N (and along rows of FRACTAL_NZ) is 16 for every dtype.
const N0: u64 = 16;

fn need_rank(format: Format, host: &[u64], rank: usize, order: &str) -> Result<()> {
    if host.len() == rank {
        Ok(())
    } else {
        Err(FormatError::at(
            0,
            format!("{format} needs a {rank}-D host shape ({order}), got {host:?} ({}-D)", host.len()),
        ))
    }
}

/// The layout of `format` for a host tensor of `host` shape.
pub(crate) fn plan(format: Format, host: &[u64], dtype: DType, groups: i32) -> Result<Plan> {
    let c0 = u64::from(dtype.c0());
    match format {
        Format::NC1HWC0 | Format::NC1HWC0_C04 => {
            need_rank(format, host, 4, "N, C, H, W")?;
            let c0 = if format == Format::NC1HWC0_C04 { 4 } else { c0 };
            let [n, c, h, w] = [host[0], host[1], host[2], host[3]];
            let dev = vec![n, c.div_ceil(c0), h, w, c0];
            let axes =
                vec![Axis::plain(n, 0), Axis::split(c, 1, 4, c0), Axis::plain(h, 2), Axis::plain(w, 3)];
            Ok(Plan { device_axes: dev.clone(), device_shape: dev, merged: None, axes })
        }
        Format::NDC1HWC0 => {
            need_rank(format, host, 5, "N, C, D, H, W")?;
            let [n, c, d, h, w] = [host[0], host[1], host[2], host[3], host[4]];
            let dev = vec![n, d, c.div_ceil(c0), h, w, c0];
            let axes = vec![
                Axis::plain(n, 0),
                Axis::split(c, 2, 5, c0),
                Axis::plain(d, 1),
                Axis::plain(h, 3),
                Axis::plain(w, 4),
            ];
            Ok(Plan { device_axes: dev.clone(), device_shape: dev, merged: None, axes })
        }
        Format::FRACTAL_Z | Format::FRACTAL_Z_G => {
            need_rank(format, host, 4, "N, C, H, W")?;
            fractal_z(host[0], host[1], None, host[2], host[3], c0, groups)
        }
        Format::FRACTAL_Z_3D => {
            need_rank(format, host, 5, "N, C, D, H, W")?;
            fractal_z(host[0], host[1], Some(host[2]), host[3], host[4], c0, groups)
        }
        Format::FRACTAL_NZ => fractal_nz(host, c0),
        Format::HWCN | Format::NHWC => {
            need_rank(format, host, 4, "N, C, H, W")?;
            let [n, c, h, w] = [host[0], host[1], host[2], host[3]];
            // Device axis of each host axis (N, C, H, W).
            let (dev, at) = if format == Format::HWCN {
                (vec![h, w, c, n], [3, 2, 0, 1])
            } else {
                (vec![n, h, w, c], [0, 3, 1, 2])
            };
            let axes = host.iter().zip(at).map(|(&len, a)| Axis::plain(len, a)).collect();
            Ok(Plan { device_axes: dev.clone(), device_shape: dev, merged: None, axes })
        }
        Format::NDHWC | Format::DHWCN => {
            need_rank(format, host, 5, "N, C, D, H, W")?;
            let [n, c, d, h, w] = [host[0], host[1], host[2], host[3], host[4]];
            let (dev, at) = if format == Format::NDHWC {
                (vec![n, d, h, w, c], [0, 4, 1, 2, 3])
            } else {
                (vec![d, h, w, c, n], [4, 3, 0, 1, 2])
            };
            let axes = host.iter().zip(at).map(|(&len, a)| Axis::plain(len, a)).collect();
            Ok(Plan { device_axes: dev.clone(), device_shape: dev, merged: None, axes })
        }
        Format::C1HWNCOC0 => {
            need_rank(format, host, 4, "H, W, C, N")?;
            let [h, w, c, n] = [host[0], host[1], host[2], host[3]];
            let dev = vec![c.div_ceil(c0), h, w, n, c0, c0];
            // c lands at (c / C0, ..., co = c % C0, c0 = c % C0): the diagonal of each Co x C0 block.
            let c_axis = Axis { len: c, hi: 0, lo: vec![4, 5], block: c0 };
            let axes = vec![Axis::plain(h, 1), Axis::plain(w, 2), c_axis, Axis::plain(n, 3)];
            Ok(Plan { device_axes: dev.clone(), device_shape: dev, merged: None, axes })
        }
        _ => Err(FormatError::at(
            0,
            format!("device format {format} is not supported (dtype {})", dtype.name()),
        )),
    }
}

/// FRACTAL_NZ: `(..., n, c)` -> `(..., ceil(c/C0), ceil(n/16), 16, C0)`.
fn fractal_nz(host: &[u64], c0: u64) -> Result<Plan> {
    let mut padded = vec![1u64; 2usize.saturating_sub(host.len())];
    padded.extend_from_slice(host);
    let b = padded.len() - 2;
    let (n, c) = (padded[b], padded[b + 1]);
    let mut dev = padded[..b].to_vec();
    dev.extend_from_slice(&[c.div_ceil(c0), n.div_ceil(N0), N0, c0]);
    let mut axes: Vec<Axis> = padded[..b].iter().enumerate().map(|(i, &len)| Axis::plain(len, i)).collect();
    axes.push(Axis::split(n, b + 1, b + 2, N0));
    axes.push(Axis::split(c, b, b + 3, c0));
    Ok(Plan { device_axes: dev.clone(), device_shape: dev, merged: None, axes })
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

/// `lcm(a, b) / a` without forming the lcm (cannot overflow): `b / gcd(a, b)`.
fn lcm_over(a: u64, b: u64) -> u64 {
    b / gcd(a, b).max(1)
}

/// FRACTAL_Z (and _3D with `d`): `(N, C, [D,] H, W)` -> `(G*D*C1*H*W, N1, 16, C0)`.
///
/// Ungrouped: logical device axes (D, C1, H, W, N1, 16, C0). Grouped (`groups > 1`, docs/CANN.md §2): `e_mult`
/// groups share one padded block; group `g` packs its channels at `e = g % e_mult` inside block
/// `g / e_mult`, so its input channel `c` sits at `e*Cin + c` and its output channel `j` at `e*Cout + j`.
fn fractal_z(n: u64, c: u64, d: Option<u64>, h: u64, w: u64, c0: u64, groups: i32) -> Result<Plan> {
    let has_d = d.is_some();
    let d = d.unwrap_or(1);
    let shape_of = |axes: &[u64]| -> Result<Vec<u64>> {
        // The reported shape folds everything before the N1 axis into one dim.
        let k = axes.len() - 3;
        Ok([checked_product(&axes[..k], "device shape")?, axes[k], axes[k + 1], axes[k + 2]].to_vec())
    };
    if groups <= 1 {
        let dev = vec![d, c.div_ceil(c0), h, w, n.div_ceil(N0), N0, c0];
        let mut axes = vec![Axis::split(n, 4, 5, N0), Axis::split(c, 1, 6, c0)];
        if has_d {
            axes.push(Axis::plain(d, 0));
        }
        axes.extend([Axis::plain(h, 2), Axis::plain(w, 3)]);
        return Ok(Plan { device_shape: shape_of(&dev)?, device_axes: dev, merged: None, axes });
    }
    let groups = groups as u64;
    if !n.is_multiple_of(groups) {
        return Err(FormatError::at(
            0,
            format!("FRACTAL_Z: N = {n} output channels are not divisible by {groups} groups"),
        ));
    }
    let (cin, cout) = (c, n / groups);
    // lcm(Cin, C0)/Cin and lcm(Cout, 16)/Cout are both powers of two <= 64: their lcm cannot overflow.
    let (a, b) = (lcm_over(cin, c0), lcm_over(cout, N0));
    let e_mult = (a * b / gcd(a, b)).min(groups);
    let mul = |x: u64, y: u64| {
        x.checked_mul(y).ok_or_else(|| FormatError::at(0, format!("FRACTAL_Z: {x} x {y} overflows")))
    };
    let cin_opt = round_up(mul(e_mult, cin)?, c0)?;
    let cout_opt = round_up(mul(e_mult, cout)?, N0)?;
    let dev = vec![groups.div_ceil(e_mult), d, cin_opt / c0, h, w, cout_opt / N0, N0, c0];
    checked_product(&dev, "device shape")?;
    // Row-major strides of the device axes. A checked product can still be 0 with a huge other dim (an
    // empty tensor), so the strides saturate: nothing is indexed then, and otherwise they fit.
    let s_c1 = h.saturating_mul(w).saturating_mul(cout_opt).saturating_mul(c0);
    let s_g = d.saturating_mul(cin_opt / c0).saturating_mul(s_c1);
    let offset = move |i: u64| {
        let (nn, cc) = (i / cin.max(1), i % cin.max(1));
        let (g, j) = (nn / cout.max(1), nn % cout.max(1));
        let e = g % e_mult;
        let (ci, co) = (e * cin + cc, e * cout + j);
        (g / e_mult) * s_g + (ci / c0) * s_c1 + co * c0 + ci % c0
    };
    let merged = Merged { len: mul(n, c)?, offset: Box::new(offset) };
    let mut axes = Vec::new();
    if has_d {
        axes.push(Axis::plain(d, 1));
    }
    axes.extend([Axis::plain(h, 3), Axis::plain(w, 4)]);
    Ok(Plan { device_shape: shape_of(&dev)?, device_axes: dev, merged: Some(merged), axes })
}
