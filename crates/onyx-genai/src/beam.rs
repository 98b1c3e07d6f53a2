//! Beam search as genai (and transformers before it) scores it: each step keeps the `num_beams`
//! best continuations by summed log-probability among the `2 * num_beams` best candidates;
//! a candidate ending in EOS among the first `num_beams` becomes a finished hypothesis, scored
//! by its summed log-probability over its length (prompt included) to the `length_penalty`.

use crate::config::SearchConfig;

/// The running state of one prompt's beam search.
#[derive(Debug, Clone)]
pub(crate) struct BeamSearch {
    num_beams: usize,
    length_penalty: f32,
    early_stopping: bool,
    num_return_sequences: usize,
    /// Summed log-probability of each running beam.
    scores: Vec<f32>,
    /// Finished hypotheses: (score, sequence without its EOS), best first, at most num_beams.
    finished: Vec<(f32, Vec<i32>)>,
    done: bool,
}

/// What a step chose: for each new beam, the beam it continues and its token.
pub(crate) struct Step {
    pub parents: Vec<usize>,
    pub tokens: Vec<i32>,
}

impl BeamSearch {
    pub fn new(search: &SearchConfig) -> BeamSearch {
        let k = search.num_beams;
        // Every beam starts as a copy of the prompt: only the first is live at the first step.
        let scores = (0..k).map(|i| if i == 0 { 0.0 } else { -1e9 }).collect();
        BeamSearch {
            num_beams: k,
            length_penalty: search.length_penalty,
            early_stopping: search.early_stopping,
            num_return_sequences: search.num_return_sequences.min(k),
            scores,
            finished: vec![],
            done: false,
        }
    }

    pub fn is_done(&self) -> bool {
        self.done
    }

    /// One step from each beam's processed logits; `sequences` are the beams' tokens so far.
    pub fn step(&mut self, logits: &[Vec<f32>], sequences: &[Vec<i32>], eos: &[i64]) -> Step {
        let k = self.num_beams;
        let vocab = logits[0].len();
        let mut candidates: Vec<(f32, usize, i32)> = Vec::with_capacity(k * vocab);
        for (beam, row) in logits.iter().enumerate() {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let log_sum = row.iter().map(|&l| (l - max).exp()).sum::<f32>().ln() + max;
            candidates.extend(row.iter().enumerate().map(|(t, &l)| (l - log_sum + self.scores[beam], beam, t as i32)));
        }
        let top = (2 * k).min(candidates.len());
        candidates.select_nth_unstable_by(top - 1, |a, b| b.0.total_cmp(&a.0));
        candidates.truncate(top);
        candidates.sort_by(|a, b| b.0.total_cmp(&a.0));
        let length = sequences[0].len();
        let mut step = Step { parents: vec![], tokens: vec![] };
        let mut next_scores = vec![];
        for (rank, &(score, beam, token)) in candidates.iter().enumerate() {
            if eos.contains(&(token as i64)) {
                if rank < k {
                    self.add_finished(score, sequences[beam].clone());
                }
            } else {
                step.parents.push(beam);
                step.tokens.push(token);
                next_scores.push(score);
            }
            if step.tokens.len() == k {
                break;
            }
        }
        let best_running = next_scores.first().copied().unwrap_or(f32::NEG_INFINITY);
        self.done = self.done || self.finished_enough(best_running, length);
        self.scores = next_scores;
        step
    }

    /// Whether no running beam can beat the finished hypotheses any more.
    fn finished_enough(&self, best_running: f32, length: usize) -> bool {
        if self.finished.len() < self.num_beams {
            return false;
        }
        if self.early_stopping {
            return true;
        }
        let worst = self.finished.last().map_or(f32::NEG_INFINITY, |h| h.0);
        worst >= best_running / (length as f32).powf(self.length_penalty)
    }

    fn add_finished(&mut self, sum_logprobs: f32, sequence: Vec<i32>) {
        let score = sum_logprobs / (sequence.len() as f32).powf(self.length_penalty);
        let worst = self.finished.last().map_or(f32::NEG_INFINITY, |h| h.0);
        if self.finished.len() < self.num_beams || score > worst {
            let at = self.finished.iter().position(|h| h.0 < score).unwrap_or(self.finished.len());
            self.finished.insert(at, (score, sequence));
            self.finished.truncate(self.num_beams);
        }
    }

    /// Ends the search (max_length or done): running beams join the finished hypotheses;
    /// returns the best `num_return_sequences`, best first.
    pub fn finish(&mut self, sequences: &[Vec<i32>]) -> Vec<Vec<i32>> {
        if !self.done {
            for (beam, sequence) in sequences.iter().enumerate() {
                self.add_finished(self.scores[beam], sequence.clone());
            }
        }
        self.done = true;
        self.finished.iter().take(self.num_return_sequences).map(|h| h.1.clone()).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn search(k: usize, early: bool) -> BeamSearch {
        BeamSearch::new(&SearchConfig {
            num_beams: k,
            early_stopping: early,
            num_return_sequences: k,
            ..SearchConfig::default()
        })
    }

    #[test]
    fn the_first_step_expands_the_first_beam_only() {
        let mut s = search(2, true);
        let logits = vec![vec![0.0, 3.0, 1.0, 2.0]; 2];
        let step = s.step(&logits, &[vec![9], vec![9]], &[]);
        assert_eq!(step.parents, [0, 0]);
        assert_eq!(step.tokens, [1, 3]);
    }

    #[test]
    fn eos_among_the_best_finishes_a_hypothesis_and_the_best_are_returned() {
        let mut s = search(2, true);
        // EOS (0) is the best candidate: it finishes [9]; the two best others continue.
        let step = s.step(&vec![vec![5.0, 1.0, 2.0, 0.0]; 2], &[vec![9], vec![9]], &[0]);
        assert_eq!((step.parents, step.tokens), (vec![0, 0], vec![2, 1]));
        assert!(!s.is_done());
        let out = s.finish(&[vec![9, 2], vec![9, 1]]);
        assert_eq!(out[0], [9], "the EOS hypothesis scores best");
        assert_eq!(out.len(), 2);
    }
}
