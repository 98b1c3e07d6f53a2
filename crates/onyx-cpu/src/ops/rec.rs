//! Recurrent kernels: RNN, GRU and LSTM ([`rnn`]); Scan ([`scan`]).

mod rnn;
mod scan;
#[cfg(test)]
mod tests;

use crate::Registry;

/// Registers this family's kernels.
pub fn register(r: &mut Registry) {
    r.add("Scan", scan::build_scan);
    r.add("RNN", rnn::build_rnn);
    r.add("GRU", rnn::build_gru);
    r.add("LSTM", rnn::build_lstm);
}
