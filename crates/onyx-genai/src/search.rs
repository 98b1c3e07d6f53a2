//! Search: the options of a generation ([`GeneratorParams`]) and the choice of the next token
//! from the last position's logits, in genai's order: repetition penalty, no-repeat n-grams,
//! min_length, then greedy or sampling (temperature, top-k, top-p).

use crate::config::{Config, SearchConfig};
use crate::error::{invalid, Result};

/// Options of one generation, starting from the folder's `search` section (genai's
/// `GeneratorParams`).
#[derive(Debug, Clone)]
pub struct GeneratorParams {
    /// The search options.
    pub search: SearchConfig,
    pub(crate) max_length: usize,
}

impl GeneratorParams {
    /// The folder's defaults.
    pub fn new(config: &Config) -> GeneratorParams {
        GeneratorParams { search: config.search.clone(), max_length: config.max_length() }
    }

    /// Sets one search option by genai's name (`max_length`, `do_sample`, `top_k`, `top_p`,
    /// `temperature`, `repetition_penalty`, `no_repeat_ngram_size`, `min_length`,
    /// `num_beams`, `num_return_sequences`, `length_penalty`, `early_stopping`, `random_seed`,
    /// `batch_size`); numbers for booleans are 0 or 1, as genai's `set_search_option`.
    pub fn set_search_option(&mut self, name: &str, value: f64) -> Result<()> {
        let s = &mut self.search;
        let count = |v: f64| -> Result<usize> {
            if v >= 0.0 && v.fract() == 0.0 && v < 1e15 {
                Ok(v as usize)
            } else {
                Err(invalid(format!("search option {name}: expected a whole number >= 0, got {v}")))
            }
        };
        match name {
            "max_length" => {
                s.max_length = count(value)?;
                self.max_length = s.max_length;
            }
            "min_length" => s.min_length = count(value)?,
            "top_k" => s.top_k = count(value)?,
            "num_beams" => s.num_beams = count(value)?.max(1),
            "num_return_sequences" => s.num_return_sequences = count(value)?.max(1),
            "no_repeat_ngram_size" => s.no_repeat_ngram_size = count(value)?,
            "chunk_size" => s.chunk_size = count(value)?,
            "do_sample" => s.do_sample = value != 0.0,
            "early_stopping" => s.early_stopping = value != 0.0,
            "past_present_share_buffer" => s.past_present_share_buffer = value != 0.0,
            "top_p" if (0.0..=1.0).contains(&value) => s.top_p = value as f32,
            "temperature" if value > 0.0 => s.temperature = value as f32,
            "repetition_penalty" if value > 0.0 => s.repetition_penalty = value as f32,
            "length_penalty" => s.length_penalty = value as f32,
            "diversity_penalty" => s.diversity_penalty = value as f32,
            "random_seed" => s.random_seed = value as i64,
            "batch_size" if value == 1.0 => {}
            "batch_size" => {
                return Err(invalid(format!(
                    "search option batch_size: Onyx runs one prompt per generator for now, got {value}"
                )))
            }
            "top_p" | "temperature" | "repetition_penalty" => {
                return Err(invalid(format!("search option {name}: {value} is out of range")))
            }
            other => return Err(invalid(format!("unknown search option '{other}'"))),
        }
        Ok(())
    }

    /// Tokens (prompt and generated) at which generation stops.
    pub fn max_length(&self) -> usize {
        self.max_length
    }
}

/// A seeded random source for sampling: the same seed draws the same tokens.
pub(crate) fn rng_for(search: &SearchConfig) -> fastrand::Rng {
    match u64::try_from(search.random_seed) {
        Ok(seed) => fastrand::Rng::with_seed(seed),
        Err(_) => fastrand::Rng::new(),
    }
}

/// Changes the last position's `logits` as the options say, before the choice.
pub(crate) fn process_logits(logits: &mut [f32], sequence: &[i32], search: &SearchConfig, eos: &[i64]) {
    if search.repetition_penalty != 1.0 {
        repetition_penalty(logits, sequence, search.repetition_penalty);
    }
    if search.no_repeat_ngram_size > 0 {
        no_repeat_ngram(logits, sequence, search.no_repeat_ngram_size);
    }
    if sequence.len() < search.min_length {
        for &id in eos {
            if let Some(l) = logits.get_mut(id as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// Each token already in the sequence: positive logits divided by `penalty`, negative ones
/// multiplied (CTRL's rule, as genai and transformers apply it).
fn repetition_penalty(logits: &mut [f32], sequence: &[i32], penalty: f32) {
    let mut seen = vec![false; logits.len()];
    for &id in sequence {
        if let Some(s) = seen.get_mut(id as usize) {
            if !*s {
                *s = true;
                let l = &mut logits[id as usize];
                *l = if *l < 0.0 { *l * penalty } else { *l / penalty };
            }
        }
    }
}

/// Bans every token that would complete an n-gram already in the sequence.
fn no_repeat_ngram(logits: &mut [f32], sequence: &[i32], n: usize) {
    if sequence.len() + 1 < n {
        return;
    }
    let prefix = &sequence[sequence.len() + 1 - n..];
    for window in sequence.windows(n) {
        if window[..n - 1] == *prefix {
            if let Some(l) = logits.get_mut(window[n - 1] as usize) {
                *l = f32::NEG_INFINITY;
            }
        }
    }
}

/// The most likely token (the first of equal maxima, as genai takes it).
pub(crate) fn greedy(logits: &[f32]) -> i32 {
    let mut best = 0;
    for (i, &l) in logits.iter().enumerate() {
        if l > logits[best] {
            best = i;
        }
    }
    best as i32
}

/// Draws a token from softmax(logits / temperature) restricted to the `top_k` most likely
/// tokens (0: all), then to the smallest set of them whose probability reaches `top_p`
/// (0 or 1: no limit).
pub(crate) fn sample(logits: &[f32], search: &SearchConfig, rng: &mut fastrand::Rng) -> i32 {
    let k = if search.top_k == 0 { logits.len() } else { search.top_k.min(logits.len()) };
    if k == 1 {
        return greedy(logits);
    }
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let by_logit = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
    if k < order.len() {
        order.select_nth_unstable_by(k - 1, by_logit);
        order.truncate(k);
    }
    order.sort_unstable_by(by_logit);
    let max = logits[order[0]];
    let inv_t = 1.0 / search.temperature;
    let mut probs: Vec<f32> = order.iter().map(|&i| ((logits[i] - max) * inv_t).exp()).collect();
    let total: f32 = probs.iter().sum();
    probs.iter_mut().for_each(|p| *p /= total);
    let mut keep = probs.len();
    if search.top_p > 0.0 && search.top_p < 1.0 {
        let mut sum = 0.0;
        for (i, p) in probs.iter().enumerate() {
            sum += p;
            if sum >= search.top_p {
                keep = i + 1;
                break;
            }
        }
    }
    let mass: f32 = probs[..keep].iter().sum();
    let mut u = rng.f32() * mass;
    for (i, p) in probs[..keep].iter().enumerate() {
        if u < *p {
            return order[i] as i32;
        }
        u -= p;
    }
    order[keep - 1] as i32
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(top_k: usize, top_p: f32, temperature: f32) -> SearchConfig {
        SearchConfig { do_sample: true, top_k, top_p, temperature, ..SearchConfig::default() }
    }

    #[test]
    fn greedy_takes_the_first_maximum() {
        assert_eq!(greedy(&[0.5, 2.0, -1.0, 2.0]), 1);
    }

    #[test]
    fn penalties_follow_genai() {
        let mut logits = vec![2.0, -2.0, 1.0, 4.0];
        process_logits(
            &mut logits,
            &[0, 1, 1],
            &SearchConfig { repetition_penalty: 2.0, min_length: 5, ..Default::default() },
            &[3],
        );
        assert_eq!(logits, [1.0, -4.0, 1.0, f32::NEG_INFINITY]);
        let mut logits = vec![0.0; 5];
        no_repeat_ngram(&mut logits, &[1, 2, 3, 1, 2], 3);
        assert_eq!(logits, [0.0, 0.0, 0.0, f32::NEG_INFINITY, 0.0]);
    }

    /// Frequencies over many draws match the distribution that the logits, temperature,
    /// top-k and top-p define, on awkward random logits.
    #[test]
    fn sampling_frequencies_match_the_distribution() {
        let mut rng = fastrand::Rng::with_seed(7);
        let logits: Vec<f32> = (0..37).map(|_| rng.f32() * 6.0 - 3.0).collect();
        for (k, p, t) in [(0, 0.0, 1.0), (5, 0.0, 0.7), (0, 0.6, 1.3), (9, 0.8, 1.0)] {
            let s = search(k, p, t);
            // The expected distribution, computed independently in f64.
            let mut order: Vec<usize> = (0..logits.len()).collect();
            order.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]));
            order.truncate(if k == 0 { logits.len() } else { k });
            let w: Vec<f64> = order.iter().map(|&i| (logits[i] as f64 / t as f64).exp()).collect();
            let z: f64 = w.iter().sum();
            let mut keep = w.len();
            if p > 0.0 {
                let mut c = 0.0;
                keep = w
                    .iter()
                    .position(|x| {
                        c += x / z;
                        c >= p as f64
                    })
                    .unwrap()
                    + 1;
            }
            let zk: f64 = w[..keep].iter().sum();
            let draws = 60_000;
            let mut counts = vec![0usize; logits.len()];
            let mut rng = fastrand::Rng::with_seed(11);
            for _ in 0..draws {
                counts[sample(&logits, &s, &mut rng) as usize] += 1;
            }
            for (j, &i) in order.iter().enumerate() {
                let want = if j < keep { w[j] / zk } else { 0.0 };
                let got = counts[i] as f64 / draws as f64;
                let sigma = (want * (1.0 - want) / draws as f64).sqrt();
                assert!(
                    (got - want).abs() <= 5.0 * sigma + 1e-9,
                    "k={k} p={p} t={t}: token {i} drawn {got}, expected {want}"
                );
            }
            let outside: usize = (0..logits.len()).filter(|i| !order[..keep].contains(i)).map(|i| counts[i]).sum();
            assert_eq!(outside, 0, "k={k} p={p}: drew tokens outside top-k/top-p");
        }
    }

    #[test]
    fn a_seed_reproduces_and_top_k_1_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| ((i * 37) % 11) as f32 * 0.3).collect();
        let s = search(0, 0.9, 1.0);
        let draw = |seed| {
            let mut rng = fastrand::Rng::with_seed(seed);
            (0..20).map(|_| sample(&logits, &s, &mut rng)).collect::<Vec<_>>()
        };
        assert_eq!(draw(3), draw(3));
        assert_ne!(draw(3), draw(4));
        assert_eq!(sample(&logits, &search(1, 0.0, 1.0), &mut fastrand::Rng::with_seed(1)), greedy(&logits));
    }

    #[test]
    fn options_are_checked() {
        let config = crate::Config::from_json(r#"{"model": {"type": "llama", "vocab_size": 4, "decoder": {"filename": "m.onnx", "num_hidden_layers": 1}}}"#).unwrap();
        let mut p = GeneratorParams::new(&config);
        p.set_search_option("max_length", 12.0).unwrap();
        assert_eq!(p.max_length(), 12);
        assert!(p.set_search_option("top_p", 1.5).unwrap_err().to_string().contains("top_p"));
        assert!(p.set_search_option("max_length", -1.0).is_err());
        assert!(p.set_search_option("beam_width", 1.0).unwrap_err().to_string().contains("unknown search option"));
    }
}
