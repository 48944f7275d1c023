//! CAPS batch-selection strategies: which queued requests form the next MoE batch.
