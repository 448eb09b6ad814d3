//! An independent, deliberately naive reference for the device layouts: for every host index, the device
//! offset computed by formula (docs/CANN.md §2 and CANN's transfer code), checked against `layout::to_host` on
//! random data and random shapes. Nothing here reuses the library's tables or plans.

use accutrace_formats::layout::{self, Format};
use accutrace_formats::DType;

/// A small deterministic generator (xorshift64*), so failures reproduce.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn dim(&mut self, max: u64) -> u64 {
        1 + self.below(max)
    }
}

fn ceil(a: u64, b: u64) -> u64 {
    a.div_ceil(b)
}

/// Row-major unravel of `i` in `shape`.
fn unravel(mut i: u64, shape: &[u64]) -> Vec<u64> {
    let mut idx = vec![0; shape.len()];
    for k in (0..shape.len()).rev() {
        idx[k] = i % shape[k];
        i /= shape[k];
    }
    idx
}

fn gcd(a: u64, b: u64) -> u64 {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
    }
}

fn lcm(a: u64, b: u64) -> u64 {
    a / gcd(a, b) * b
}

/// Device offset of a host index.
type OffsetFn = Box<dyn Fn(&[u64]) -> u64>;

/// The reference: device shape for `host`, and the device offset of every host index.
struct Reference {
    device_shape: Vec<u64>,
    offset: OffsetFn,
}

fn reference(format: Format, host: &[u64], c0: u64, groups: u64) -> Reference {
    let h = host.to_vec();
    match format {
        Format::NC1HWC0 | Format::NC1HWC0_C04 => {
            let c0 = if format == Format::NC1HWC0_C04 { 4 } else { c0 };
            let (cc, hh, ww) = (h[1], h[2], h[3]);
            let c1 = ceil(cc, c0);
            Reference {
                device_shape: vec![h[0], c1, hh, ww, c0],
                offset: Box::new(move |i| {
                    (((i[0] * c1 + i[1] / c0) * hh + i[2]) * ww + i[3]) * c0 + i[1] % c0
                }),
            }
        }
        Format::NDC1HWC0 => {
            let (cc, dd, hh, ww) = (h[1], h[2], h[3], h[4]);
            let c1 = ceil(cc, c0);
            Reference {
                device_shape: vec![h[0], dd, c1, hh, ww, c0],
                offset: Box::new(move |i| {
                    ((((i[0] * dd + i[2]) * c1 + i[1] / c0) * hh + i[3]) * ww + i[4]) * c0 + i[1] % c0
                }),
            }
        }
        Format::FRACTAL_Z | Format::FRACTAL_Z_3D if groups <= 1 => {
            let is3d = format == Format::FRACTAL_Z_3D;
            let (nn, cc) = (h[0], h[1]);
            let (dd, hh, ww) = if is3d { (h[2], h[3], h[4]) } else { (1, h[2], h[3]) };
            let (c1, n1) = (ceil(cc, c0), ceil(nn, 16));
            Reference {
                device_shape: vec![dd * c1 * hh * ww, n1, 16, c0],
                offset: Box::new(move |i| {
                    let (d, y, x) = if is3d { (i[2], i[3], i[4]) } else { (0, i[2], i[3]) };
                    let row = ((d * c1 + i[1] / c0) * hh + y) * ww + x;
                    ((row * n1 + i[0] / 16) * 16 + i[0] % 16) * c0 + i[1] % c0
                }),
            }
        }
        Format::FRACTAL_Z | Format::FRACTAL_Z_3D => {
            // CANN's grouped transfer: one loop nest over (g, d, c, h, w, n) with e = g % e_mult.
            let is3d = format == Format::FRACTAL_Z_3D;
            let (nn, cin) = (h[0], h[1]);
            let (dd, hh, ww) = if is3d { (h[2], h[3], h[4]) } else { (1, h[2], h[3]) };
            let cout = nn / groups;
            let e_mult = lcm(lcm(cin, c0) / cin, lcm(cout, 16) / cout).min(groups);
            let cin_opt = ceil(e_mult * cin, c0) * c0;
            let cout_opt = ceil(e_mult * cout, 16) * 16;
            let c1 = cin_opt / c0;
            let g_dim = ceil(groups, e_mult);
            Reference {
                device_shape: vec![g_dim * dd * c1 * hh * ww, cout_opt / 16, 16, c0],
                offset: Box::new(move |i| {
                    let (d, y, x) = if is3d { (i[2], i[3], i[4]) } else { (0, i[2], i[3]) };
                    let g = i[0] / cout;
                    let n = i[0] % cout;
                    let e = g % e_mult;
                    let dst_ci = e * cin + i[1];
                    let dst_co = e * cout + n;
                    (g / e_mult) * dd * c1 * hh * ww * cout_opt * c0
                        + d * c1 * hh * ww * cout_opt * c0
                        + (dst_ci / c0) * hh * ww * cout_opt * c0
                        + y * ww * cout_opt * c0
                        + x * cout_opt * c0
                        + dst_co * c0
                        + dst_ci % c0
                }),
            }
        }
        Format::FRACTAL_NZ => {
            let mut full = h.clone();
            while full.len() < 2 {
                full.insert(0, 1);
            }
            let r = full.len();
            let (nn, cc) = (full[r - 2], full[r - 1]);
            let (n1, c1) = (ceil(nn, 16), ceil(cc, c0));
            let batch: Vec<u64> = full[..r - 2].to_vec();
            let mut device_shape = batch.clone();
            device_shape.extend([c1, n1, 16, c0]);
            let pad = r - h.len();
            Reference {
                device_shape,
                offset: Box::new(move |i| {
                    let mut idx = vec![0; pad];
                    idx.extend_from_slice(i);
                    let b = idx[..r - 2].iter().zip(&batch).fold(0, |acc, (&x, &dim)| acc * dim + x);
                    let (n, c) = (idx[r - 2], idx[r - 1]);
                    (((b * c1 + c / c0) * n1 + n / 16) * 16 + n % 16) * c0 + c % c0
                }),
            }
        }
        Format::HWCN => {
            let (nn, cc, hh, ww) = (h[0], h[1], h[2], h[3]);
            Reference {
                device_shape: vec![hh, ww, cc, nn],
                offset: Box::new(move |i| ((i[2] * ww + i[3]) * cc + i[1]) * nn + i[0]),
            }
        }
        Format::NHWC => {
            let (cc, hh, ww) = (h[1], h[2], h[3]);
            Reference {
                device_shape: vec![h[0], hh, ww, cc],
                offset: Box::new(move |i| ((i[0] * hh + i[2]) * ww + i[3]) * cc + i[1]),
            }
        }
        Format::NDHWC => {
            let (cc, dd, hh, ww) = (h[1], h[2], h[3], h[4]);
            Reference {
                device_shape: vec![h[0], dd, hh, ww, cc],
                offset: Box::new(move |i| (((i[0] * dd + i[2]) * hh + i[3]) * ww + i[4]) * cc + i[1]),
            }
        }
        Format::DHWCN => {
            let (nn, cc, hh, ww) = (h[0], h[1], h[3], h[4]);
            Reference {
                device_shape: vec![h[2], hh, ww, cc, nn],
                offset: Box::new(move |i| (((i[2] * hh + i[3]) * ww + i[4]) * cc + i[1]) * nn + i[0]),
            }
        }
        Format::C1HWNCOC0 => {
            // Host HWCN; the value sits on the diagonal co == c0 (CANN's C1HWNCoC0 -> HWCN transfer).
            let (hh, ww, cc, nn) = (h[0], h[1], h[2], h[3]);
            let c1 = ceil(cc, c0);
            Reference {
                device_shape: vec![c1, hh, ww, nn, c0, c0],
                offset: Box::new(move |i| {
                    let (c1i, c0i) = (i[2] / c0, i[2] % c0);
                    ((((c1i * hh + i[0]) * ww + i[1]) * nn + i[3]) * c0 + c0i) * c0 + c0i
                }),
            }
        }
        _ => {
            let device_shape = h.clone();
            Reference {
                device_shape,
                offset: Box::new(move |i| i.iter().zip(&h).fold(0, |acc, (&x, &dim)| acc * dim + x)),
            }
        }
    }
}

fn random_host(rng: &mut Rng, format: Format, groups: u64) -> Vec<u64> {
    let mut d = |max| rng.dim(max);
    match format {
        Format::NC1HWC0 | Format::NC1HWC0_C04 | Format::HWCN | Format::NHWC | Format::C1HWNCOC0 => {
            vec![d(4), d(40), d(5), d(5)]
        }
        Format::FRACTAL_Z => vec![d(40) * groups, d(40), d(3), d(3)],
        Format::FRACTAL_Z_3D => vec![d(20) * groups, d(20), d(3), d(3), d(3)],
        Format::NDC1HWC0 | Format::NDHWC | Format::DHWCN => vec![d(3), d(40), d(3), d(4), d(4)],
        Format::FRACTAL_NZ => {
            let rank = 1 + rng.below(4) as usize;
            (0..rank).map(|k| if k + 2 < rank { rng.dim(3) } else { rng.dim(50) }).collect()
        }
        _ => (0..1 + rng.below(4)).map(|_| rng.dim(6)).collect(),
    }
}

fn check(format: Format, dtype: DType, groups: u64, cases: usize, seed: u64) {
    let mut rng = Rng(seed);
    let c0 = u64::from(dtype.c0());
    for case in 0..cases {
        let host = random_host(&mut rng, format, groups);
        let reference = reference(format, &host, c0, groups);
        let device_len: u64 = reference.device_shape.iter().product();
        // Random device contents, padding included: cropping must pick exactly the reference's elements.
        let device: Vec<u64> = (0..device_len).map(|_| rng.next()).collect();
        let host_len: u64 = host.iter().product();
        let expected: Vec<u64> =
            (0..host_len).map(|i| device[(reference.offset)(&unravel(i, &host)) as usize]).collect();
        let got = layout::to_host(format, &device, &reference.device_shape, &host, dtype, groups as i32)
            .unwrap_or_else(|e| panic!("{format} {dtype} host {host:?} groups {groups}: {e}"));
        assert_eq!(got, expected, "{format} {dtype} host {host:?} groups {groups} case {case}");
        let library_shape = layout::device_shape(format, &host, dtype, groups as i32).unwrap();
        assert_eq!(library_shape, reference.device_shape, "{format} {dtype} host {host:?}");
    }
}

const DTYPES: [DType; 4] = [DType::FLOAT16, DType::FLOAT, DType::INT8, DType::INT4];

#[test]
fn blocked_formats_match_the_reference() {
    for (k, format) in
        [Format::NC1HWC0, Format::NC1HWC0_C04, Format::NDC1HWC0, Format::C1HWNCOC0].into_iter().enumerate()
    {
        for (j, dtype) in DTYPES.into_iter().enumerate() {
            check(format, dtype, 1, 40, 1 + (k * 10 + j) as u64);
        }
    }
}

#[test]
fn fractal_formats_match_the_reference() {
    for (k, format) in [Format::FRACTAL_Z, Format::FRACTAL_Z_3D, Format::FRACTAL_NZ].into_iter().enumerate() {
        for (j, dtype) in DTYPES.into_iter().enumerate() {
            check(format, dtype, 1, 40, 100 + (k * 10 + j) as u64);
        }
    }
}

#[test]
fn grouped_fractal_z_matches_the_reference() {
    for groups in [2, 3, 4, 8, 32] {
        for dtype in [DType::FLOAT16, DType::INT8] {
            check(Format::FRACTAL_Z, dtype, groups, 25, 200 + groups);
            check(Format::FRACTAL_Z_3D, dtype, groups, 10, 300 + groups);
        }
    }
}

#[test]
fn transposes_and_identities_match_the_reference() {
    for format in
        [Format::HWCN, Format::NHWC, Format::NDHWC, Format::DHWCN, Format::ND, Format::NCHW, Format::NCL]
    {
        check(format, DType::FLOAT, 1, 40, 400 + format.code() as u64);
    }
}

#[test]
fn depthwise_diagonal_is_what_cann_documents() {
    // One channel block, H = W = N = 1: the 16 values sit at (co, c0) = (k, k) of the 16x16 block.
    let host: Vec<u32> = (0..16).collect();
    let (device, shape) =
        layout::to_device(Format::C1HWNCOC0, &host, &[1, 1, 16, 1], DType::FLOAT16, 1, 999).unwrap();
    assert_eq!(shape, vec![1, 1, 1, 1, 16, 16]);
    for k in 0..16 {
        assert_eq!(device[k * 16 + k], k as u32);
    }
    assert_eq!(device.iter().filter(|&&v| v == 999).count(), 256 - 16);
}
