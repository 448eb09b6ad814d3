//! The sums of one pass over a pair, for each family: what the generic kernels ([`super::msprobe`],
//! [`super::msaccucmp`]) and the fused f32 pass (`fused.rs`) both produce, and what turns into the
//! metrics. Chunks merge in index order, so a result does not depend on the thread count.

/// msprobe's sums of one pass over a pair, mergeable across chunks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MsprobeSums {
    pub len: u64,
    /// Σ N·B, Σ N², Σ B², Σ (N-B)².
    pub dot: f64,
    pub nn: f64,
    pub bb: f64,
    pub dd: f64,
    pub max_abs: f64,
    pub max_re: f64,
    /// Some relative error was NaN (numpy's max would be NaN).
    pub re_nan: bool,
    pub lt_one: u64,
    pub lt_five: u64,
    /// Some input was inf or NaN (the fast path's sums are then void).
    pub nonfinite: bool,
}

impl MsprobeSums {
    pub fn merge(self, o: Self) -> Self {
        MsprobeSums {
            len: self.len + o.len,
            dot: self.dot + o.dot,
            nn: self.nn + o.nn,
            bb: self.bb + o.bb,
            dd: self.dd + o.dd,
            max_abs: self.max_abs.max(o.max_abs),
            max_re: self.max_re.max(o.max_re),
            re_nan: self.re_nan || o.re_nan,
            lt_one: self.lt_one + o.lt_one,
            lt_five: self.lt_five + o.lt_five,
            nonfinite: self.nonfinite || o.nonfinite,
        }
    }
}

/// msaccucmp's first pass (everything but the KL divergence), mergeable across chunks.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct MsaccucmpSums {
    pub len: u64,
    pub dot: f64,
    pub xx: f64,
    pub yy: f64,
    pub sum_abs: f64,
    pub sum_sq: f64,
    pub max_abs: f64,
    pub acc_rel: f64,
    pub max_rel: f64,
    pub x_min: f64,
    pub x_max: f64,
    pub y_min: f64,
    pub y_max: f64,
    pub x_sh: f64,
    pub x_sh2: f64,
    pub y_sh: f64,
    pub y_sh2: f64,
    pub x_absmax: f64,
}

impl MsaccucmpSums {
    pub fn merge(self, o: Self) -> Self {
        MsaccucmpSums {
            len: self.len + o.len,
            dot: self.dot + o.dot,
            xx: self.xx + o.xx,
            yy: self.yy + o.yy,
            sum_abs: self.sum_abs + o.sum_abs,
            sum_sq: self.sum_sq + o.sum_sq,
            max_abs: self.max_abs.max(o.max_abs),
            acc_rel: self.acc_rel + o.acc_rel,
            max_rel: self.max_rel.max(o.max_rel),
            x_min: self.x_min.min(o.x_min),
            x_max: self.x_max.max(o.x_max),
            y_min: self.y_min.min(o.y_min),
            y_max: self.y_max.max(o.y_max),
            x_sh: self.x_sh + o.x_sh,
            x_sh2: self.x_sh2 + o.x_sh2,
            y_sh: self.y_sh + o.y_sh,
            y_sh2: self.y_sh2 + o.y_sh2,
            x_absmax: self.x_absmax.max(o.x_absmax),
        }
    }
}
