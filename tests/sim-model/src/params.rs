//! The model's parameters (fp32 master weights), their names, and their seeded initialization.

use crate::config::ModelConfig;
use crate::rng::Rng;

/// Per-layer parameter slots, in order, starting at `layer_base(l)`.
pub const LN1_G: usize = 0;
pub const LN1_B: usize = 1;
pub const WQKV: usize = 2;
pub const WO: usize = 3;
pub const LN2_G: usize = 4;
pub const LN2_B: usize = 5;
pub const W1: usize = 6;
pub const B1: usize = 7;
pub const W2: usize = 8;
pub const B2: usize = 9;
const PER_LAYER: usize = 10;

/// Token embedding (vocab, d_model).
pub const EMB: usize = 0;
/// Learned positional embedding (seq, d_model).
pub const POS: usize = 1;

pub fn layer_base(l: usize) -> usize {
    2 + PER_LAYER * l
}

/// Final layernorm gamma, beta and LM head, after the last layer.
pub fn final_base(n_layers: usize) -> usize {
    layer_base(n_layers)
}
pub const LNF_G: usize = 0;
pub const LNF_B: usize = 1;
pub const WLM: usize = 2;

#[derive(Clone, Debug)]
pub struct Param {
    /// `model/layer_0/attn/qkv/weight`, ...
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Builds and initializes every parameter from `cfg.seed`.
pub fn init(cfg: &ModelConfig) -> Vec<Param> {
    let (v, d, f, s) = (cfg.vocab, cfg.d_model, cfg.d_ff, cfg.seq);
    let mut out = Vec::new();
    let mut push = |name: String, shape: Vec<usize>, init: Init| {
        let n: usize = shape.iter().product();
        let data = match init {
            Init::Const(c) => vec![c; n],
            Init::Normal(std) => {
                let mut rng = Rng::derive(cfg.seed, &name, 0);
                let std = std * cfg.faults.init_scale;
                (0..n).map(|_| rng.normal() * std).collect()
            }
        };
        out.push(Param { name, shape, data });
    };
    let fan = |n: usize| 1.0 / (n as f32).sqrt();
    push("model/embedding/weight".into(), vec![v, d], Init::Normal(0.5));
    push("model/embedding/pos/weight".into(), vec![s, d], Init::Normal(0.1));
    for l in 0..cfg.n_layers {
        let p = format!("model/layer_{l}");
        push(format!("{p}/ln_1/gamma"), vec![d], Init::Const(1.0));
        push(format!("{p}/ln_1/beta"), vec![d], Init::Const(0.0));
        push(format!("{p}/attn/qkv/weight"), vec![d, 3 * d], Init::Normal(fan(d)));
        push(format!("{p}/attn/proj/weight"), vec![d, d], Init::Normal(0.5 * fan(d)));
        push(format!("{p}/ln_2/gamma"), vec![d], Init::Const(1.0));
        push(format!("{p}/ln_2/beta"), vec![d], Init::Const(0.0));
        push(format!("{p}/mlp/fc1/weight"), vec![d, f], Init::Normal(fan(d)));
        push(format!("{p}/mlp/fc1/bias"), vec![f], Init::Const(0.0));
        push(format!("{p}/mlp/fc2/weight"), vec![f, d], Init::Normal(0.5 * fan(f)));
        push(format!("{p}/mlp/fc2/bias"), vec![d], Init::Const(0.0));
    }
    push("model/ln_f/gamma".into(), vec![d], Init::Const(1.0));
    push("model/ln_f/beta".into(), vec![d], Init::Const(0.0));
    push("model/lm_head/weight".into(), vec![d, v], Init::Normal(fan(d)));
    out
}

enum Init {
    Const(f32),
    Normal(f32),
}
